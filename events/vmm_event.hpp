#pragma once
// One event from Cloud Hypervisor's event monitor (--event-monitor), as CH writes it:
//   {"timestamp":{"secs":S,"nanos":N},"source":"vm","event":"booted","properties":null}
// pretty-printed by serde_json, followed by "\n\n". `timestamp` counts from the VMM's start.
// `properties` is null or an object of string values (e.g. {"id":"disk2"}, {"event":"panic"}).
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace chl::events {

struct VmmEvent {
  std::uint64_t secs = 0;
  std::uint32_t nanos = 0;
  std::string source;           // "vmm", "vm", "guest"
  std::string event;            // "booted", "paused", "panic", ...
  nlohmann::json properties;    // null when CH sent null

  // A string property ("" when absent or not a string).
  [[nodiscard]] std::string property(std::string_view key) const;
  // "source/event", e.g. "vm/booted".
  [[nodiscard]] std::string key() const { return source + "/" + event; }
  bool operator==(const VmmEvent&) const = default;
};

// Convert a parsed JSON object; fails naming the missing or mistyped field.
common::Result<VmmEvent> vmm_event_from_json(const nlohmann::json& j);
// The JSON object, keys in CH's order.
nlohmann::ordered_json to_json(const VmmEvent& e);
// Exactly the bytes CH writes for this event: serde_json's pretty form (two-space indent)
// followed by a blank line. Used by the VMM double and by test fixtures.
std::string serialize_like_ch(const VmmEvent& e);

}  // namespace chl::events

#pragma once
// Event streams exactly as Cloud Hypervisor v52 writes them (see
// shared reference cloud-hypervisor-v52-observed.md): pretty-printed JSON, two-space indent,
// keys in CH's order, each event followed by one blank line.
#include <string>
#include <vector>

#include "events/vmm_event.hpp"

namespace chl::events::fixtures {

// The first two events of the observed stream, byte for byte.
inline const std::string kVerbatimStart =
    "{\n"
    "  \"timestamp\": {\n"
    "    \"secs\": 0,\n"
    "    \"nanos\": 65748\n"
    "  },\n"
    "  \"source\": \"vmm\",\n"
    "  \"event\": \"starting\",\n"
    "  \"properties\": null\n"
    "}\n"
    "\n"
    "{\n"
    "  \"timestamp\": {\n"
    "    \"secs\": 0,\n"
    "    \"nanos\": 11566674\n"
    "  },\n"
    "  \"source\": \"vm\",\n"
    "  \"event\": \"booting\",\n"
    "  \"properties\": null\n"
    "}\n"
    "\n";

inline VmmEvent ev(std::uint64_t secs, std::uint32_t nanos, const char* source, const char* event,
                   nlohmann::json props = nullptr) {
  VmmEvent e;
  e.secs = secs;
  e.nanos = nanos;
  e.source = source;
  e.event = event;
  e.properties = std::move(props);
  return e;
}

// The events of the observed session's first VMM process, in order (the table's
// "events emitted" column), with plausible timestamps.
inline std::vector<VmmEvent> observed_session() {
  return {
      ev(0, 65748, "vmm", "starting"),
      ev(0, 11566674, "vm", "booting"),    // boot with no VM: refused
      ev(0, 23100000, "vm", "booting"),    // unbootable config: refused
      ev(0, 24000000, "vm", "deleted"),    // vm.delete of the Created VM
      ev(0, 51000000, "vm", "booting"),    // vm.boot
      ev(0, 98000000, "vm", "booted"),
      ev(0, 99000000, "vm", "booting"),    // boot while Running: refused
      ev(0, 99500000, "vm", "resuming"),   // resume while Running: refused
      ev(1, 1000000, "vm", "pausing"),     // vm.pause
      ev(1, 2000000, "vm", "paused"),
      ev(1, 3000000, "vm", "pausing"),     // pause while Paused: refused
      ev(1, 4000000, "vm", "snapshotting"),// snapshot fails (nested KVM)
      ev(1, 5000000, "vm", "resuming"),    // vm.resume
      ev(1, 6000000, "vm", "resumed"),
      ev(1, 7000000, "vm", "snapshotting"),// snapshot while Running: refused
      ev(1, 8000000, "vm", "resizing"),
      ev(1, 9000000, "vm", "resized"),
      ev(2, 0, "vm", "rebooting"),
      ev(2, 500000000, "vm", "rebooted"),
      ev(3, 0, "vm", "shutdown"),          // vm.shutdown
      ev(3, 100000000, "vm", "booting"),   // boot again after shutdown
      ev(3, 200000000, "vm", "booted"),
      ev(4, 0, "vm", "shutdown"),
      ev(4, 100000000, "vm", "deleted"),
      ev(4, 200000000, "vmm", "shutdown"),
  };
}

// Events with properties, as CH's event! macro writes them (string values).
inline std::vector<VmmEvent> with_properties() {
  return {
      ev(5, 1, "vm", "device-removed", {{"id", "disk2"}}),
      ev(5, 2, "guest", "panic", {{"event", "panic"}}),
      ev(5, 3, "vm", "migration-memory-iteration", {{"id", "3"}}),
      ev(5, 4, "vm", "device-removed", {{"id", "we}ird\"{id\\"}}),
  };
}

inline std::string stream_of(const std::vector<VmmEvent>& events) {
  std::string s;
  for (const auto& e : events) s += serialize_like_ch(e);
  return s;
}

}  // namespace chl::events::fixtures

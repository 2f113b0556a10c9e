#include "events/vmm_event.hpp"

namespace chl::events {

std::string VmmEvent::property(std::string_view key) const {
  if (!properties.is_object()) return {};
  auto it = properties.find(std::string(key));
  if (it == properties.end() || !it->is_string()) return {};
  return it->get<std::string>();
}

common::Result<VmmEvent> vmm_event_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return common::fail(std::errc::invalid_argument, "event is not a JSON object");
  VmmEvent e;
  auto ts = j.find("timestamp");
  if (ts == j.end() || !ts->is_object())
    return common::fail(std::errc::invalid_argument, "event has no \"timestamp\" object");
  auto secs = ts->find("secs");
  auto nanos = ts->find("nanos");
  if (secs == ts->end() || !secs->is_number_unsigned())
    return common::fail(std::errc::invalid_argument, "timestamp.secs is not an unsigned integer");
  if (nanos == ts->end() || !nanos->is_number_unsigned() || nanos->get<std::uint64_t>() >= 1000000000ULL)
    return common::fail(std::errc::invalid_argument, "timestamp.nanos is not an integer below 1e9");
  e.secs = secs->get<std::uint64_t>();
  e.nanos = static_cast<std::uint32_t>(nanos->get<std::uint64_t>());
  auto source = j.find("source");
  if (source == j.end() || !source->is_string() || source->get_ref<const std::string&>().empty())
    return common::fail(std::errc::invalid_argument, "event has no \"source\" string");
  auto event = j.find("event");
  if (event == j.end() || !event->is_string() || event->get_ref<const std::string&>().empty())
    return common::fail(std::errc::invalid_argument, "event has no \"event\" string");
  e.source = source->get<std::string>();
  e.event = event->get<std::string>();
  if (auto props = j.find("properties"); props != j.end()) e.properties = *props;
  return e;
}

nlohmann::ordered_json to_json(const VmmEvent& e) {
  nlohmann::ordered_json j;
  j["timestamp"]["secs"] = e.secs;
  j["timestamp"]["nanos"] = e.nanos;
  j["source"] = e.source;
  j["event"] = e.event;
  j["properties"] = nlohmann::ordered_json::parse(e.properties.dump());
  return j;
}

std::string serialize_like_ch(const VmmEvent& e) { return to_json(e).dump(2) + "\n\n"; }

}  // namespace chl::events

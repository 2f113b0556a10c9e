#include "kubevirt/stats_json.hpp"

namespace chl::kubevirt {

using nlohmann::json;

namespace {

// `<Key>Set` beside `<Key>`.
void put(json& j, const char* key, const Counter& v) {
  j[std::string(key) + "Set"] = v.has_value();
  j[key] = v.value_or(0);
}

void put(json& j, const char* key, const std::string& v) {
  j[std::string(key) + "Set"] = !v.empty();
  j[key] = v;
}

json cpu_json(const CpuStats& c) {
  json j = json::object();
  put(j, "Time", c.time_ns);
  put(j, "User", c.user_ns);
  put(j, "System", c.system_ns);
  return j;
}

json memory_json(const MemoryStats& m) {
  json j = json::object();
  put(j, "Unused", m.unused_kib);
  put(j, "Cached", m.cached_kib);
  put(j, "Available", m.available_kib);
  put(j, "ActualBalloon", m.actual_balloon_kib);
  put(j, "RSS", m.rss_kib);
  put(j, "SwapIn", m.swap_in_kib);
  put(j, "SwapOut", m.swap_out_kib);
  put(j, "MajorFault", m.major_faults);
  put(j, "MinorFault", m.minor_faults);
  put(j, "Usable", m.usable_kib);
  put(j, "Total", m.total_kib);
  return j;
}

json vcpu_json(const VcpuStats& v) {
  json j = json::object();
  j["StateSet"] = v.state.has_value();
  j["State"] = v.state ? static_cast<int>(*v.state) : 0;
  put(j, "Time", v.time_ns);
  put(j, "Wait", v.wait_ns);
  put(j, "Delay", v.delay_ns);
  return j;
}

json net_json(const NetStats& n) {
  json j = json::object();
  put(j, "Name", n.name);
  put(j, "Alias", n.alias);
  put(j, "RxBytes", n.rx_bytes);
  put(j, "RxPkts", n.rx_packets);
  put(j, "RxErrs", n.rx_errors);
  put(j, "RxDrop", n.rx_drops);
  put(j, "TxBytes", n.tx_bytes);
  put(j, "TxPkts", n.tx_packets);
  put(j, "TxErrs", n.tx_errors);
  put(j, "TxDrop", n.tx_drops);
  return j;
}

json block_json(const BlockStats& b) {
  json j = json::object();
  put(j, "Name", b.name);
  j["Alias"] = b.alias;  // KubeVirt's block Alias has no Set flag
  j["BackingIndexSet"] = false;
  j["BackingIndex"] = 0;
  put(j, "Path", b.path);
  put(j, "RdReqs", b.read_requests);
  put(j, "RdBytes", b.read_bytes);
  put(j, "RdTimes", b.read_time_ns);
  put(j, "WrReqs", b.write_requests);
  put(j, "WrBytes", b.write_bytes);
  put(j, "WrTimes", b.write_time_ns);
  put(j, "FlReqs", b.flush_requests);
  put(j, "FlTimes", b.flush_time_ns);
  put(j, "Errors", b.errors);
  put(j, "Allocation", b.allocation_bytes);
  put(j, "Capacity", b.capacity_bytes);
  put(j, "Physical", b.physical_bytes);
  return j;
}

template <typename T, typename F>
json array_of(const std::vector<T>& items, F&& f) {
  json a = json::array();
  for (const auto& i : items) a.push_back(f(i));
  return a;
}

}  // namespace

json to_stats_json(const DomainStatsDocument& s) {
  json j = json::object();
  j["Name"] = s.name;
  j["UUID"] = s.uuid;
  j["Cpu"] = cpu_json(s.cpu);
  j["Memory"] = memory_json(s.memory);
  // Migration job and dirty-rate figures: none measured (no live migration on this path).
  j["MigrateDomainJobInfo"] = {{"DataTotalSet", false},     {"DataTotal", 0},
                               {"DataProcessedSet", false}, {"DataProcessed", 0},
                               {"MemoryBpsSet", false},     {"MemoryBps", 0},
                               {"DataRemainingSet", false}, {"DataRemaining", 0},
                               {"MemDirtyRateSet", false},  {"MemDirtyRate", 0}};
  j["Vcpu"] = array_of(s.vcpus, vcpu_json);
  j["Net"] = array_of(s.nets, net_json);
  j["Block"] = array_of(s.blocks, block_json);
  j["CPUMapSet"] = !s.cpu_map.empty();
  j["CPUMap"] = s.cpu_map.empty() ? json(nullptr) : json(s.cpu_map);
  j["DirtyRate"] = {{"CalcStatusSet", false},         {"CalcStatus", 0},
                    {"CalcStartTimeSet", false},      {"CalcStartTime", 0},
                    {"CalcPeriodSet", false},         {"CalcPeriod", 0},
                    {"MegabytesPerSecondSet", false}, {"MegabytesPerSecond", 0}};
  j["Load"] = {{"Load1mSet", false}, {"Load1m", 0},         {"Load5mSet", false},
               {"Load5m", 0},        {"Load15mSet", false}, {"Load15m", 0}};
  return j;
}

}  // namespace chl::kubevirt

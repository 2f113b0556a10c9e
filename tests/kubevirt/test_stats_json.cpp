// The DomainStats document against the shape KubeVirt's own virt-launcher answered
// GetDomainStats with (golden/GetDomainStats*.json) and against KubeVirt's Go types
// (pkg/virt-launcher/virtwrap/stats/types.go): same keys at every level, every value beside
// its `…Set` flag, the values we measured carried through.
#include <doctest/doctest.h>

#include <fstream>
#include <set>

#include "kubevirt/stats_json.hpp"
#include "tests/support/test_support.hpp"

namespace {

using namespace chl::kubevirt;
using nlohmann::json;

json golden(const std::string& name) {
  std::ifstream in(chl::test::source_dir() / "tests/kubevirt/golden" / name);
  REQUIRE_MESSAGE(in.good(), "missing golden file " << name);
  return json::parse(in);
}

// The same keys and JSON kinds at every level (numbers of any kind are one kind); returns the
// first difference.
std::string shape_difference(const json& a, const json& b, const std::string& path = "") {
  auto kind = [](const json& j) { return j.is_number() ? std::string("number") : j.type_name(); };
  if (kind(a) != kind(b)) return path + ": " + kind(a) + " vs " + kind(b);
  if (a.is_object()) {
    for (const auto& [k, v] : a.items()) {
      if (!b.contains(k)) return path + "/" + k + ": only ours";
      if (auto d = shape_difference(v, b[k], path + "/" + k); !d.empty()) return d;
    }
    for (const auto& [k, v] : b.items())
      if (!a.contains(k)) return path + "/" + k + ": only recorded";
  }
  if (a.is_array()) {
    if (a.size() != b.size())
      return path + ": " + std::to_string(a.size()) + " vs " + std::to_string(b.size()) +
             " elements";
    for (std::size_t i = 0; i < a.size(); ++i)
      if (auto d = shape_difference(a[i], b[i], path + "/" + std::to_string(i)); !d.empty())
        return d;
  }
  return {};
}

std::set<std::string> keys(const json& j) {
  std::set<std::string> k;
  for (const auto& [key, v] : j.items()) k.insert(key);
  return k;
}

// The masquerade run's numbers, as a launcher would have measured them.
DomainStatsDocument recorded_masquerade() {
  DomainStatsDocument s;
  s.name = "ns1_kvh-probe";
  s.uuid = "d7901662-86da-450a-a7f8-552214e3288c";
  s.cpu = {240000000, 100000000, 140000000};
  s.memory.actual_balloon_kib = 65536;
  s.memory.rss_kib = 52032;
  s.memory.total_kib = 65536;
  s.vcpus.push_back({VcpuState::Running, 660000000, 0, 8806241});
  for (int i = 0; i < 3; ++i) s.vcpus.push_back({VcpuState::Offline, {}, {}, {}});
  NetStats net{.name = "tap0", .alias = "default"};
  net.rx_bytes = net.rx_packets = net.rx_errors = net.rx_drops = 0;
  net.tx_bytes = net.tx_packets = net.tx_errors = net.tx_drops = 0;
  s.nets.push_back(net);
  s.cpu_map = {{true, true}};
  return s;
}

}  // namespace

TEST_CASE("stats json: same shape and values as a real virt-launcher's GetDomainStats") {
  const json ref = golden("GetDomainStats-masquerade.json");
  const json ours = to_stats_json(recorded_masquerade());
  const std::string diff = shape_difference(ours, ref);
  CHECK_MESSAGE(diff.empty(), diff);
  // Every value we measured, and every "not measured", as recorded. DirtyRate is the one part
  // we never measure (virt-launcher reports a dirty-rate calculation that never ran).
  for (const char* part : {"Name", "UUID", "Cpu", "Memory", "MigrateDomainJobInfo", "Vcpu", "Net",
                           "Block", "CPUMapSet", "CPUMap", "Load"}) {
    CAPTURE(part);
    CHECK(ours[part] == ref[part]);
  }
  CHECK(keys(ours["DirtyRate"]) == keys(ref["DirtyRate"]));
  CHECK(ours["DirtyRate"]["MegabytesPerSecondSet"] == false);
}

TEST_CASE("stats json: the shape of the run without a network (empty Net)") {
  DomainStatsDocument s = recorded_masquerade();
  s.nets.clear();
  const json ref = golden("GetDomainStats.json");
  const std::string diff = shape_difference(to_stats_json(s), ref);
  CHECK_MESSAGE(diff.empty(), diff);
}

TEST_CASE("stats json: a block device has every field of KubeVirt's DomainStatsBlock") {
  DomainStatsDocument s;
  BlockStats b{.name = "vda", .alias = "rootdisk", .path = "/var/run/kubevirt/disk_0.img"};
  b.read_requests = 10;
  b.read_bytes = 4096;
  b.write_bytes = 512;
  b.capacity_bytes = 1 << 20;
  s.blocks.push_back(b);
  const json j = to_stats_json(s)["Block"][0];
  // stats/types.go's DomainStatsBlock field names (Alias alone has no Set flag).
  const std::set<std::string> go_fields = {
      "NameSet", "Name",          "Alias",      "BackingIndexSet", "BackingIndex", "PathSet",
      "Path",    "RdReqsSet",     "RdReqs",     "RdBytesSet",      "RdBytes",      "RdTimesSet",
      "RdTimes", "WrReqsSet",     "WrReqs",     "WrBytesSet",      "WrBytes",      "WrTimesSet",
      "WrTimes", "FlReqsSet",     "FlReqs",     "FlTimesSet",      "FlTimes",      "ErrorsSet",
      "Errors",  "AllocationSet", "Allocation", "CapacitySet",     "Capacity",     "PhysicalSet",
      "Physical"};
  CHECK(keys(j) == go_fields);
  CHECK(j["Name"] == "vda");
  CHECK(j["Alias"] == "rootdisk");
  CHECK(j["RdReqsSet"] == true);
  CHECK(j["RdReqs"] == 10);
  CHECK(j["RdBytes"] == 4096);
  CHECK(j["WrBytes"] == 512);
  CHECK(j["WrReqsSet"] == false);  // not measured: flag false, value 0
  CHECK(j["WrReqs"] == 0);
  CHECK(j["Capacity"] == 1 << 20);
  CHECK(j["PathSet"] == true);
}

TEST_CASE("stats json: nothing measured is all flags false") {
  const json j = to_stats_json(DomainStatsDocument{});
  for (const char* part : {"Cpu", "Memory"})
    for (const auto& [k, v] : j[part].items())
      if (k.ends_with("Set")) CHECK_MESSAGE(v == false, part << "." << k);
  CHECK(j["Vcpu"] == json::array());
  CHECK(j["CPUMapSet"] == false);
}

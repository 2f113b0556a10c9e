// The DomainStats document against the shape KubeVirt's own virt-launcher answered
// GetDomainStats with (golden/GetDomainStats*.json) and against KubeVirt's Go types
// (pkg/virt-launcher/virtwrap/stats/types.go): same keys at every level, every value beside
// its `…Set` flag, the values we measured carried through.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>

#include <fstream>
#include <set>

#include "kubevirt/proc_stats.hpp"
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

TEST_CASE("stats from /proc: the VMM process's CPU time and RSS, each vcpuN thread's time and run-queue delay") {
  namespace fs = std::filesystem;
  chl::test::TempDir dir("chl-proc");
  const fs::path pid = dir.path() / "4242";
  const long tick_ns = 1000000000L / ::sysconf(_SC_CLK_TCK);
  auto stat_line = [](const std::string& comm, int utime, int stime) {
    // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime …
    return "4242 (" + comm + ") S 1 1 1 0 -1 0 0 0 0 0 " + std::to_string(utime) + " " + std::to_string(stime) + " 0 0 20 0\n";
  };
  fs::create_directories(pid / "task" / "4243");
  fs::create_directories(pid / "task" / "4244");
  fs::create_directories(pid / "task" / "4245");
  chl::test::write_file(pid / "stat", stat_line("cloud-hyper (v)", 30, 12));
  chl::test::write_file(pid / "status", "Name:\tcloud-hypervisor\nVmRSS:\t   20480 kB\n");
  chl::test::write_file(pid / "task" / "4243" / "comm", "vcpu1\n");
  chl::test::write_file(pid / "task" / "4243" / "stat", stat_line("vcpu1", 5, 2));
  chl::test::write_file(pid / "task" / "4243" / "schedstat", "70000000 1234567 99\n");
  chl::test::write_file(pid / "task" / "4244" / "comm", "vcpu0\n");
  chl::test::write_file(pid / "task" / "4244" / "stat", stat_line("vcpu0", 10, 0));
  chl::test::write_file(pid / "task" / "4245" / "comm", "http-server\n");
  // QEMU's names for the same (libvirt's debug-threads=on), and two that are not vCPUs.
  fs::create_directories(pid / "task" / "4246");
  chl::test::write_file(pid / "task" / "4246" / "comm", "CPU 2/TCG\n");
  chl::test::write_file(pid / "task" / "4246" / "stat", stat_line("CPU 2/TCG", 3, 0));
  fs::create_directories(pid / "task" / "4247");
  chl::test::write_file(pid / "task" / "4247" / "comm", "CPU 3/other\n");
  fs::create_directories(pid / "task" / "4248");
  chl::test::write_file(pid / "task" / "4248" / "comm", "vcpu3x\n");
  chl::test::write_file(pid / "task" / "4245" / "stat", stat_line("http-server", 99, 99));
  chl::kubevirt::DomainStatsDocument d;
  chl::kubevirt::add_process_stats(pid, d);
  CHECK(d.cpu.time_ns == 42 * tick_ns);
  CHECK(d.cpu.user_ns == 30 * tick_ns);
  CHECK(d.memory.rss_kib == 20480u);
  REQUIRE(d.vcpus.size() == 3);
  CHECK(d.vcpus[2].time_ns == 3 * tick_ns);
  CHECK(d.vcpus[0].time_ns == 10 * tick_ns);
  CHECK_FALSE(d.vcpus[0].delay_ns);  // no schedstat
  CHECK(d.vcpus[1].time_ns == 7 * tick_ns);
  CHECK(d.vcpus[1].delay_ns == 1234567u);
  auto j = chl::kubevirt::to_stats_json(d);
  CHECK(j["Vcpu"][1]["TimeSet"] == true);
  CHECK(j["Vcpu"][1]["Time"] == 7 * tick_ns);
  // A pid that is gone: nothing set, nothing thrown.
  chl::kubevirt::DomainStatsDocument none;
  chl::kubevirt::add_process_stats(dir.path() / "1", none);
  CHECK_FALSE(none.cpu.time_ns);
  CHECK(none.vcpus.empty());
}

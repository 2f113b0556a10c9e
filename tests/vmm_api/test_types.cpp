// JSON round-trips of the typed CH API bodies (vmm_api/types.hpp).
#include <doctest/doctest.h>

#include <limits>

#include "tests/support/test_support.hpp"
#include "vmm_api/types.hpp"

using namespace chl::vmm_api;

namespace {

// Our output leaves empty optionals out where CH wrote null; compare modulo nulls.
Json strip_nulls(const Json& j) {
  if (j.is_object()) {
    Json out = Json::object();
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!it.value().is_null()) {
        out[it.key()] = strip_nulls(it.value());
      }
    }
    return out;
  }
  if (j.is_array()) {
    Json out = Json::array();
    for (const auto& e : j) {
      out.push_back(strip_nulls(e));
    }
    return out;
  }
  return j;
}

std::string fixture(const std::string& name) {
  return chl::test::read_file(chl::test::source_dir() / "tests/vmm_api/fixtures" / name);
}

}  // namespace

TEST_CASE("vm.info observed from CH v52 parses into typed fields") {
  auto info = parse_vm_info(fixture("vm_info_running_v52.json"));
  REQUIRE_MESSAGE(info, (info ? "" : info.error().message()));
  CHECK(info->state == VmState::Running);
  CHECK(info->memory_actual_size == 67108864u);
  const VmConfig& c = info->config;
  REQUIRE(c.cpus);
  CHECK(c.cpus->boot_vcpus == 1);
  CHECK(c.cpus->max_vcpus == 1);
  CHECK_FALSE(c.cpus->topology);
  CHECK(c.cpus->max_phys_bits == 46u);
  CHECK(c.cpus->core_scheduling == "Vm");
  REQUIRE(c.cpus->features);
  CHECK(c.cpus->features->amx == false);
  REQUIRE(c.memory);
  CHECK(c.memory->size == 67108864u);
  CHECK(c.memory->thp == true);
  CHECK_FALSE(c.memory->zones);
  CHECK(c.payload.kernel == "/path/to/guest.elf");
  CHECK(c.payload.cmdline == "obs stay-up");
  CHECK_FALSE(c.payload.firmware);
  REQUIRE(c.disks);
  REQUIRE(c.disks->size() == 1);
  CHECK((*c.disks)[0].id == "disk1");
  CHECK((*c.disks)[0].path == "/path/to/disk1.img");
  CHECK((*c.disks)[0].image_type == "Raw");
  CHECK((*c.disks)[0].queue_size == 128u);
  CHECK_FALSE(c.net);
  REQUIRE(c.rng);
  CHECK(c.rng->src == "/dev/urandom");
  REQUIRE(c.serial);
  CHECK(c.serial->mode == ConsoleMode::Pty);
  CHECK(c.serial->file == "/dev/pts/0");
  REQUIRE(c.console);
  CHECK(c.console->mode == ConsoleMode::Off);
  REQUIRE(c.debug_console);
  CHECK(c.debug_console->iobase == 233);
  CHECK(c.pvpanic == true);
  CHECK(c.iommu == false);
  // Keys we do not model are kept verbatim, nulls included.
  CHECK(c.extra.contains("rate_limit_groups"));
  CHECK(c.extra.contains("landlock_rules"));
  CHECK_MESSAGE((*c.disks)[0].extra.empty(), (*c.disks)[0].extra.dump());
}

TEST_CASE("vm.info round-trips: output equals input modulo nulls") {
  const Json in = Json::parse(fixture("vm_info_running_v52.json"));
  auto info = from_json_value<VmInfo>(in, "vm.info");
  REQUIRE(info);
  const Json out = *info;
  CHECK(strip_nulls(out) == strip_nulls(in));
  // And once more through text.
  auto again = parse_vm_info(to_json_text(*info));
  REQUIRE(again);
  CHECK(Json(*again) == out);
}

TEST_CASE("unknown fields at every level are preserved, never rejected") {
  Json in = Json::parse(fixture("vm_info_running_v52.json"));
  in["future_top"] = {{"a", 1}};
  in["config"]["future_cfg"] = "x";
  in["config"]["cpus"]["future_cpu_knob"] = true;
  in["config"]["disks"][0]["future_disk"] = Json::array({1, 2});
  in["config"]["payload"]["future_payload"] = nullptr;
  in["config"]["serial"]["future_serial"] = 7;
  auto info = from_json_value<VmInfo>(in, "vm.info");
  REQUIRE(info);
  CHECK(info->extra.at("future_top") == Json{{"a", 1}});
  CHECK(info->config.extra.at("future_cfg") == "x");
  CHECK(info->config.cpus->extra.at("future_cpu_knob") == true);
  CHECK((*info->config.disks)[0].extra.at("future_disk") == Json::array({1, 2}));
  CHECK(info->config.payload.extra.contains("future_payload"));
  const Json out = *info;
  CHECK(out["config"]["cpus"]["future_cpu_knob"] == true);
  CHECK(out["config"]["disks"][0]["future_disk"] == Json::array({1, 2}));
  CHECK(out["config"]["payload"].contains("future_payload"));  // even a null unknown
  CHECK(out["config"]["serial"]["future_serial"] == 7);
  CHECK(strip_nulls(out) == strip_nulls(in));
}

TEST_CASE("a VmConfig built in C++ serializes only what was set") {
  VmConfig c;
  c.payload.kernel = "/k";
  c.payload.cmdline = "console=ttyS0";
  c.cpus = CpusConfig{};
  c.cpus->boot_vcpus = 2;
  c.cpus->max_vcpus = 4;
  c.cpus->topology = CpuTopology{};
  c.cpus->topology->threads_per_core = 1;
  c.cpus->topology->cores_per_die = 2;
  c.cpus->topology->dies_per_package = 1;
  c.cpus->topology->packages = 2;
  c.cpus->affinity = std::vector<CpuAffinity>{CpuAffinity{0, {2, 3}, Json::object()}};
  c.memory = MemoryConfig{};
  c.memory->size = 1ull << 30;
  c.memory->hugepages = true;
  c.memory->hugepage_size = 2ull << 20;
  MemoryZoneConfig z;
  z.id = "mem0";
  z.size = 1ull << 30;
  z.host_numa_node = 0;
  c.memory->zones = std::vector<MemoryZoneConfig>{z};
  DiskConfig d;
  d.path = "/disk.raw";
  d.readonly = true;
  d.id = "rootdisk";
  c.disks = std::vector<DiskConfig>{d};
  NetConfig n;
  n.mac = "52:54:00:00:00:01";
  n.num_queues = 2;
  c.net = std::vector<NetConfig>{n};
  c.rng = RngConfig{};
  FsConfig f;
  f.tag = "share";
  f.socket = "/run/vfs.sock";
  c.fs = std::vector<FsConfig>{f};
  c.vsock = VsockConfig{};
  c.vsock->cid = 42;
  c.vsock->socket = "/run/vsock";
  DeviceConfig dev;
  dev.path = "/sys/bus/pci/devices/0000:01:00.0";
  c.devices = std::vector<DeviceConfig>{dev};
  NumaConfig numa;
  numa.guest_numa_id = 0;
  numa.cpus = std::vector<std::uint32_t>{0, 1};
  numa.distances = std::vector<NumaDistance>{NumaDistance{1, 20, Json::object()}};
  numa.memory_zones = std::vector<std::string>{"mem0"};
  c.numa = std::vector<NumaConfig>{numa};
  c.serial = SerialConfig{ConsoleMode::Pty, std::nullopt, std::nullopt, Json::object()};
  c.console = ConsoleConfig{};
  c.platform = PlatformConfig{};
  c.platform->system_uuid = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
  c.platform->oem_strings = std::vector<std::string>{"a", "b"};
  c.pvpanic = true;
  c.extra["rate_limit_groups"] = Json::array();  // a raw field we do not model

  const Json j = c;
  CHECK(j["payload"] == Json{{"kernel", "/k"}, {"cmdline", "console=ttyS0"}});
  CHECK(j["cpus"]["topology"]["packages"] == 2);
  CHECK(j["cpus"]["affinity"][0]["host_cpus"] == Json::array({2, 3}));
  CHECK_FALSE(j["cpus"].contains("kvm_hyperv"));  // never "null": CH rejects null bools
  CHECK(j["memory"]["zones"][0]["host_numa_node"] == 0);
  CHECK(j["disks"][0] == Json{{"path", "/disk.raw"}, {"readonly", true}, {"id", "rootdisk"}});
  CHECK(j["net"][0]["num_queues"] == 2);
  CHECK(j["rng"] == Json{{"src", "/dev/urandom"}});
  CHECK(
      j["fs"][0] ==
      Json{{"tag", "share"}, {"socket", "/run/vfs.sock"}, {"num_queues", 1}, {"queue_size", 1024}});
  CHECK(j["vsock"] == Json{{"cid", 42}, {"socket", "/run/vsock"}});
  CHECK(j["numa"][0]["distances"][0] == Json{{"destination", 1}, {"distance", 20}});
  CHECK(j["serial"] == Json{{"mode", "Pty"}});
  CHECK(j["console"] == Json{{"mode", "Off"}});
  CHECK(j["platform"]["oem_strings"] == Json::array({"a", "b"}));
  CHECK(j["pvpanic"] == true);
  CHECK(j["rate_limit_groups"] == Json::array());
  for (const char* absent : {"balloon", "pmem", "watchdog", "iommu", "debug_console"}) {
    CHECK_MESSAGE(!j.contains(absent), absent);
  }
  // Back again: equal.
  auto back = from_json_value<VmConfig>(j, "VmConfig");
  REQUIRE(back);
  CHECK(Json(*back) == j);
}

TEST_CASE("an empty optional overrides the same key in extra") {
  auto c = parse_vm_config(R"({"payload":{},"pvpanic":null,"watchdog":true})");
  REQUIRE(c);
  CHECK_FALSE(c->pvpanic);
  CHECK(c->watchdog == true);
  c->watchdog.reset();
  const Json j = *c;
  CHECK_FALSE(j.contains("watchdog"));
  CHECK_FALSE(j.contains("pvpanic"));
}

TEST_CASE("vm.counters with u64-max latencies parse as unsigned 64-bit") {
  const std::string body = R"({"disk1":{"write_latency_avg":1844674407370955,"read_bytes":0,)"
                           R"("read_latency_min":18446744073709551615,"write_ops":3},)"
                           R"("_net2":{"rx_bytes":1234,"tx_frames":5}})";
  auto c = parse_vm_counters(body);
  REQUIRE_MESSAGE(c, (c ? "" : c.error().message()));
  CHECK(c->at("disk1").at("read_latency_min") == std::numeric_limits<std::uint64_t>::max());
  CHECK(c->at("disk1").at("write_latency_avg") == 1844674407370955ull);
  CHECK(c->at("disk1").at("write_ops") == 3u);
  CHECK(c->at("_net2").at("rx_bytes") == 1234u);
}

TEST_CASE("ping, PciDeviceInfo and request bodies round-trip") {
  auto p = parse_vmm_ping(
      R"({"build_version":"v52.0.0","version":"52.0.0","pid":4242,"features":["io_uring","kvm"]})");
  REQUIRE(p);
  CHECK(p->version == "52.0.0");
  CHECK(p->build_version == "v52.0.0");
  CHECK(p->pid == 4242);
  CHECK(p->features == std::vector<std::string>{"io_uring", "kvm"});

  auto dev = parse_pci_device_info(R"({"id":"disk2","bdf":"0000:00:04.0"})");
  REQUIRE(dev);
  CHECK(dev->id == "disk2");
  CHECK(dev->bdf == "0000:00:04.0");

  VmResize r;
  r.desired_vcpus = 2;
  CHECK(to_json_text(r) == R"({"desired_vcpus":2})");
  CHECK(to_json_text(VmSnapshotConfig{"file:///snap", Json::object()}) ==
        R"({"destination_url":"file:///snap"})");
  RestoreConfig rc;
  rc.source_url = "file:///snap";
  rc.resume = false;
  CHECK(to_json_text(rc) == R"({"resume":false,"source_url":"file:///snap"})");
  CHECK(to_json_text(VmRemoveDevice{"disk2", Json::object()}) == R"({"id":"disk2"})");
  ReceiveMigrationData rx;
  rx.receiver_url = "unix:/tmp/mig.sock";
  CHECK(to_json_text(rx) == R"({"receiver_url":"unix:/tmp/mig.sock"})");
  SendMigrationData tx;
  tx.destination_url = "unix:/tmp/mig.sock";
  tx.memory_mode = "MemFDs";
  CHECK(to_json_text(tx) == R"({"destination_url":"unix:/tmp/mig.sock","memory_mode":"MemFDs"})");
}

TEST_CASE("bad input is an error naming what was wrong, never an exception") {
  auto not_json = parse_vm_info("{nope");
  REQUIRE_FALSE(not_json);
  CHECK(not_json.error().message().find("not valid JSON") != std::string::npos);

  auto wrong_type = parse_vm_config(R"({"payload":{},"cpus":{"boot_vcpus":"two","max_vcpus":2}})");
  REQUIRE_FALSE(wrong_type);
  CHECK(wrong_type.error().message().find("VmConfig") != std::string::npos);

  auto missing = parse_vm_config(R"({"payload":{},"memory":{}})");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message().find("size") != std::string::npos);

  auto bad_state = parse_vm_info(R"({"config":{"payload":{}},"state":"Dancing"})");
  REQUIRE_FALSE(bad_state);
  CHECK(bad_state.error().message().find("Dancing") != std::string::npos);

  auto not_object = parse_vm_config("[1,2]");
  REQUIRE_FALSE(not_object);
  CHECK(not_object.error().message().find("object") != std::string::npos);
}

TEST_CASE("designated initializers build configs warning-free and serialize as set") {
  VmConfig c{.payload = {.kernel = "/k"},
             .cpus = CpusConfig{.boot_vcpus = 2, .max_vcpus = 4},
             .memory = MemoryConfig{.size = 1ull << 30, .hugepages = true},
             .serial = SerialConfig{.mode = ConsoleMode::Pty}};
  const Json j = c;
  CHECK(j ==
        Json::parse(R"({"payload":{"kernel":"/k"},"cpus":{"boot_vcpus":2,"max_vcpus":4},)"
                    R"("memory":{"size":1073741824,"hugepages":true},"serial":{"mode":"Pty"}})"));
}

// fuzz_http (regress-float-in-integer-field): a number that does not fit an integer field was
// static_cast by nlohmann (undefined for 1.28e75). Now it is a parse error naming the field.
TEST_CASE("types: a fraction, a huge number or a negative one in an integer field is an error naming it") {
  for (const char* bad : {"1.28e75", "2.5", "4294967296", "-1"}) {
    CAPTURE(bad);
    auto r = from_json_text<DiskConfig>(std::string(R"({"path": "/d.img", "num_queues": )") + bad + "}", "disk");
    REQUIRE_FALSE(r);
    CHECK_MESSAGE(r.error().message().find("field 'num_queues'") != std::string::npos, r.error().message());
  }
  auto ok = from_json_text<DiskConfig>(R"({"path": "/d.img", "num_queues": 4294967295})", "disk");
  REQUIRE(ok);
  CHECK(ok->num_queues == 4294967295u);
}

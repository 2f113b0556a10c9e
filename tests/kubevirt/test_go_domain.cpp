// The virt-handler stand-in's reading of domain documents (go_domain.hpp) against KubeVirt's
// own: the real virt-launcher's recorded documents decode and read cleanly, and every read the
// contract marks CRASH, and every silent misreport it names, fails — so that a launcher
// regressing to one of them fails our tests as it would take down a node's virt-handler.
#include <doctest/doctest.h>

#include <fstream>

#include "kubevirt/domain_json.hpp"
#include "tests/kubevirt/go_domain.hpp"
#include "tests/support/test_support.hpp"

namespace {

using chl::test::decode_and_read;
using chl::test::go_decode_domain;
using chl::test::HandlerVmi;
using nlohmann::json;

json golden(const std::string& name) {
  std::ifstream in(chl::test::source_dir() / "tests/kubevirt/golden" / name);
  REQUIRE_MESSAGE(in.good(), "missing golden file " << name);
  return json::parse(in);
}

// The VMI of the recorded masquerade run (vmi-masquerade.yaml as virt-handler had it), with the
// pod-interface cache virt-handler's phase 1 wrote there (Docker's eth0, 172.17.0.2).
HandlerVmi recorded_vmi() {
  HandlerVmi h;
  h.name = "kvh-probe";
  h.namespace_ = "ns1";
  h.uid = "5b0c2a41-9e3d-4f1a-8b7c-6d5e4f3a2b10";
  h.interfaces = {"default"};
  h.guest_macs = {{"default", "02:42:ac:11:00:02"}};
  h.termination_grace_period_seconds = 3;
  h.pod_ips = {{"default", {"172.17.0.2"}}};
  return h;
}

// `failures` has one naming `needle` (the KubeVirt file:line or the contract row).
bool names(const std::vector<std::string>& failures, const std::string& needle) {
  for (const auto& f : failures)
    if (f.find(needle) != std::string::npos) return true;
  return false;
}

std::string all(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& f : v) s += "\n  " + f;
  return s;
}

}  // namespace

TEST_CASE(
    "go domain: every recorded document of KubeVirt's own virt-launcher decodes and reads "
    "cleanly") {
  for (const char* file :
       {"masquerade-00-ADDED-Shutoff.json", "masquerade-02-MODIFIED-Paused.json",
        "masquerade-04-MODIFIED-Running.json", "masquerade-06-MODIFIED-Paused.json",
        "masquerade-09-MODIFIED-Running.json", "masquerade-10-MODIFIED-ShuttingDown.json",
        "masquerade-11-MODIFIED-Shutoff.json", "masquerade-12-MODIFIED-NoState.json"}) {
    CAPTURE(file);
    const auto r = decode_and_read(golden(file).dump(), recorded_vmi());
    CHECK_MESSAGE(r.failures.empty(), all(r.failures));
  }
  // The ADDED event's 3 placeholder interfaces have Alias null: safe only because its UID is ""
  // (a stale domain: sync never runs on it).
  const auto added =
      decode_and_read(golden("masquerade-00-ADDED-Shutoff.json").dump(), recorded_vmi());
  CHECK_FALSE(added.status.synced);
  // Running: what virt-handler writes into the VMI's status.
  const auto running =
      decode_and_read(golden("masquerade-09-MODIFIED-Running.json").dump(), recorded_vmi());
  REQUIRE(running.status.synced);
  REQUIRE(running.status.interfaces.size() == 1);
  CHECK(running.status.interfaces[0].name == "default");
  CHECK(running.status.interfaces[0].mac == "02:42:ac:11:00:02");
  CHECK(running.status.interfaces[0].ip == "172.17.0.2");  // from the pod cache, keyed by the alias
  CHECK(running.status.interfaces[0].queue_count == 1);
  CHECK(running.status.interfaces[0].link_state == "up");
  CHECK(running.status.machine == "pc-q35-10.0");
  CHECK(running.status.guest_current == std::optional<std::string>("64Mi"));
  CHECK_FALSE(running.status.agent_connected);  // "disconnected"
  // The final event: deletionTimestamp, the domain counts as absent.
  const auto gone =
      decode_and_read(golden("masquerade-12-MODIFIED-NoState.json").dump(), recorded_vmi());
  CHECK_FALSE(gone.status.synced);
}

TEST_CASE("go domain: our documents decode, with every key type-checked") {
  chl::kubevirt::DomainDocument d;
  d.vmi_name = "kvh-probe";
  d.vmi_namespace = "ns1";
  d.vmi_uid = "5b0c2a41-9e3d-4f1a-8b7c-6d5e4f3a2b10";
  d.grace_period_seconds = 3;
  d.machine = "q35";
  d.memory_kib = 65536;
  d.state = chl::events::DomainState::Running;
  d.reason = chl::events::StateReason::Booted;
  d.grace_period_start = std::chrono::system_clock::now();
  d.interfaces.push_back({.name = "default",
                          .mac = "02:42:ac:11:00:02",
                          .target_device = "tap0",
                          .mtu = 1500,
                          .queues = 2});
  d.disks.push_back({.name = "hp1",
                     .source = "/dev/hp1",
                     .block_device = true,
                     .target_device = "sda",
                     .bus = "scsi",
                     .read_only = true});
  d.agent_channel_path = "/var/run/kubevirt-private/x/org.qemu.guest_agent.0";
  d.sriov_interfaces = {"fast"};
  d.filesystems.push_back({"data", "/var/run/kubevirt/virtiofs-containers/data.sock"});
  d.panic = chl::kubevirt::GuestPanic{"hyper-v", {1, 2, 3, 4, 5}};
  const auto decoded = go_decode_domain(chl::kubevirt::to_domain_json(d).dump());
  CHECK(decoded.error.empty());
  CHECK_MESSAGE(decoded.unmodelled.empty(), all(decoded.unmodelled));
  CHECK(decoded.value["Spec"]["Devices"]["Interfaces"][0]["Driver"]["Queues"] == 2);
  // The NoState document too.
  d.state = chl::events::DomainState::NoState;
  d.deletion_timestamp = std::chrono::system_clock::now();
  CHECK(go_decode_domain(chl::kubevirt::to_domain_json(d).dump()).error.empty());
}

TEST_CASE(
    "go domain: decoding as Go's encoding/json does — wrong types fail, unknown keys are ignored, "
    "null leaves a field") {
  const json ref = golden("masquerade-09-MODIFIED-Running.json");
  auto with = [&ref](const std::string& pointer, const json& value) {
    json j = ref;
    j[json::json_pointer(pointer)] = value;
    return go_decode_domain(j.dump());
  };
  // A wrong JSON type for a field is an UnmarshalTypeError: the event is dropped.
  CHECK_FALSE(with("/Spec/Devices/Interfaces/0/MAC/MAC", 5).error.empty());
  CHECK_FALSE(with("/Spec/Devices/Interfaces/0/MAC", "02:42:ac:11:00:02")
                  .error.empty());  // a struct, not a string
  CHECK_FALSE(
      with("/Spec/Devices/Interfaces/0/Alias", "default").error.empty());  // Alias's UnmarshalJSON
  CHECK_FALSE(with("/Status/PanicCount", "1").error.empty());
  CHECK_FALSE(with("/Spec/CurrentMemory/Value", -1).error.empty());  // uint64
  CHECK_FALSE(with("/Spec/CurrentMemory/Value", 1.5).error.empty());
  CHECK_FALSE(
      with("/Spec/Metadata/KubeVirt/GracePeriod/DeletionGracePeriodSeconds", "3").error.empty());
  CHECK_FALSE(with("/Spec/Metadata/KubeVirt/GracePeriod/DeletionTimestamp", "yesterday")
                  .error.empty());  // metav1.Time
  CHECK_FALSE(
      with("/Spec/Metadata/KubeVirt/GracePeriod/MarkedForGracefulShutdown", "true").error.empty());
  CHECK_FALSE(with("/Spec/Devices/Disks", json::object()).error.empty());  // a slice
  CHECK_FALSE(with("/ObjectMeta/deletionTimestamp", 1).error.empty());
  CHECK_FALSE(go_decode_domain("{not json").error.empty());
  // Unknown keys are ignored; keys match case-insensitively; null leaves a non-pointer as it is
  // and makes a pointer nil.
  CHECK(with("/Spec/NoSuchField", json::array({1, 2})).error.empty());
  const auto folded = go_decode_domain(
      R"({"objectmeta": {"NAME": "x"}, "spec": {"devices": {"interfaces": [{"mac": {"mac": "02:00:00:00:00:01"}}]}}})");
  REQUIRE(folded.error.empty());
  CHECK(folded.value["ObjectMeta"]["name"] == "x");
  CHECK(folded.value["Spec"]["Devices"]["Interfaces"][0]["MAC"]["MAC"] == "02:00:00:00:00:01");
  CHECK(
      folded.value["Spec"]["Devices"]["Interfaces"][0]["Alias"].is_null());  // absent pointer: nil
  const auto nulls = with("/Spec/Name", nullptr);
  REQUIRE(nulls.error.empty());
  CHECK(nulls.value["Spec"]["Name"] == "");                                    // zero, untouched
  CHECK(with("/Spec/Features", nullptr).value["Spec"]["Features"].is_null());  // pointer: nil
  CHECK(with("/Spec/Features/ACPI", json::object()).value["Spec"]["Features"]["ACPI"] ==
        json::object());
}

TEST_CASE("go domain: each read the contract marks CRASH fails, naming KubeVirt's line") {
  const json ref = golden("masquerade-09-MODIFIED-Running.json");
  auto read = [&ref](const std::string& pointer, const json& value,
                     HandlerVmi vmi = recorded_vmi()) {
    json j = ref;
    j[json::json_pointer(pointer)] = value;
    return decode_and_read(j.dump(), vmi).failures;
  };
  // pkg/network/setup/netstat.go:282-283: Alias.GetName() and MAC.MAC on nil pointers.
  auto f = read("/Spec/Devices/Interfaces/0/MAC", nullptr);
  CHECK_MESSAGE((names(f, "CRASH") && names(f, "netstat.go:283")), all(f));
  f = read("/Spec/Devices/Interfaces/0/Alias", nullptr);
  CHECK_MESSAGE((names(f, "CRASH") && names(f, "netstat.go:282")), all(f));
  // Our old document: every interface's MAC null (issue 29's first defect).
  chl::kubevirt::DomainDocument old;
  old.vmi_name = "kvh-probe";
  old.vmi_namespace = "ns1";
  old.vmi_uid = recorded_vmi().uid;
  old.grace_period_seconds = 3;
  old.state = chl::events::DomainState::Running;
  old.interfaces.emplace_back();
  old.interfaces.back().name = "default";  // no MAC: null
  f = decode_and_read(chl::kubevirt::to_domain_json(old).dump(), recorded_vmi()).failures;
  CHECK_MESSAGE(names(f, "netstat.go:283"), all(f));
  // vm.go:537: a disk with a source and no alias, once the VMI has volume statuses.
  HandlerVmi with_volumes = recorded_vmi();
  with_volumes.volumes = {"rootdisk"};
  with_volumes.volume_status = {{"rootdisk", false, ""}};
  const json disk = {{"Device", "disk"},
                     {"Type", "file"},
                     {"Source", {{"File", "/disk.img"}}},
                     {"Target", {{"Bus", "virtio"}, {"Device", "vda"}}},
                     {"Alias", nullptr}};
  f = read("/Spec/Devices/Disks", json::array({disk}), with_volumes);
  CHECK_MESSAGE((names(f, "CRASH") && names(f, "vm.go:537")), all(f));
  // …but an empty CD-ROM (no source) without an alias is skipped.
  json cdrom = disk;
  cdrom["Source"] = json::object();
  CHECK(read("/Spec/Devices/Disks", json::array({cdrom}), with_volumes).empty());
  // …and without volume statuses virt-handler returns before the loop (vm.go:527).
  CHECK(read("/Spec/Devices/Disks", json::array({disk})).empty());
}

TEST_CASE("go domain: each silent misreport the contract names fails") {
  const json ref = golden("masquerade-09-MODIFIED-Running.json");
  auto read = [&ref](const std::string& pointer, const json& value,
                     HandlerVmi vmi = recorded_vmi()) {
    json j = ref;
    j[json::json_pointer(pointer)] = value;
    return decode_and_read(j.dump(), vmi).failures;
  };
  // The UID of another VMI (vm.go:362-385), or "" on a running domain.
  CHECK(names(read("/Spec/Metadata/KubeVirt/UID", "another"), "vm.go:362-385"));
  CHECK(names(read("/Spec/Metadata/KubeVirt/UID", ""), "vm.go:362-385"));
  // The informer key (vm.go:2304-2309).
  CHECK(names(read("/ObjectMeta/namespace", "default"), "vm.go:2304-2309"));
  CHECK(names(read("/ObjectMeta/name", "other"), "vm.go:2304-2309"));
  // The alias must be the VMI's interface name: "ua-default" leaves no IP in the status.
  CHECK(names(
      read("/Spec/Devices/Interfaces/0/Alias", {{"Name", "ua-default"}, {"UserDefined", true}}),
      "netstat.go:215-231"));
  // The MAC: lowercase, the guest NIC's.
  CHECK(names(read("/Spec/Devices/Interfaces/0/MAC/MAC", "02:42:AC:11:00:02"), "interface.go:95"));
  CHECK(names(read("/Spec/Devices/Interfaces/0/MAC/MAC", "02:42:ac:11:00:99"),
              "not the guest NIC's"));
  // No interface for the VMI's.
  CHECK(names(read("/Spec/Devices/Interfaces", nullptr), "is not in the domain"));
  // The grace period (vm.go:2212-2216): nil or 0 is a Kill at once; another length a misreport.
  CHECK(names(read("/Spec/Metadata/KubeVirt/GracePeriod", nullptr), "vm.go:2212-2216"));
  CHECK(names(read("/Spec/Metadata/KubeVirt/GracePeriod/DeletionGracePeriodSeconds", 0),
              "vm.go:2215"));
  CHECK(names(read("/Spec/Metadata/KubeVirt/GracePeriod/DeletionGracePeriodSeconds", 30),
              "vm.go:1582-1585"));
  // ACPI (vm.go:2218-2223).
  CHECK(names(read("/Spec/Features/ACPI", nullptr), "vm.go:2218-2223"));
  // A launcher never sends LifeCycle "Unknown" (vm.go:1340-1343).
  CHECK(names(read("/Status/Status", "Unknown"), "vm.go:1340-1343"));
  // A hotplug volume attached with no Target.Device is never Ready (vm.go:488-520).
  HandlerVmi hot = recorded_vmi();
  hot.volumes = {"hp1"};
  hot.volume_status = {{"hp1", true, "HotplugVolumeMounted"}};
  json disk = {{"Device", "disk"},
               {"Type", "file"},
               {"Source", {{"File", "/var/run/kubevirt/hotplug-disks/hp1.img"}}},
               {"Target", {{"Bus", "scsi"}}},
               {"Alias", {{"Name", "hp1"}, {"UserDefined", true}}}};
  CHECK(names(read("/Spec/Devices/Disks", json::array({disk}), hot), "vm.go:488-520"));
  disk["Target"]["Device"] = "sda";
  json j = ref;
  j["Spec"]["Devices"]["Disks"] = json::array({disk});
  const auto ready = decode_and_read(j.dump(), hot);
  CHECK_MESSAGE(ready.failures.empty(), all(ready.failures));
  REQUIRE(ready.status.volume("hp1"));
  CHECK(ready.status.volume("hp1")->target == "sda");
  CHECK(ready.status.volume("hp1")->phase == "Ready");
  // A disk alias that names no volume leaves its target blank.
  disk["Alias"]["Name"] = "ua-hp1";
  CHECK(names(read("/Spec/Devices/Disks", json::array({disk}), hot), "names no VMI volume"));
}

TEST_CASE("go domain: the guest agent channel, connected, sets AgentConnected") {
  json j = golden("masquerade-09-MODIFIED-Running.json");
  j["Spec"]["Devices"]["Channels"][0]["Target"]["State"] = "connected";
  CHECK(decode_and_read(j.dump(), recorded_vmi()).status.agent_connected);
}

TEST_CASE("go domain: libvirt quantities as virt-handler parses them") {
  CHECK(chl::test::libvirt_quantity(65536, "KiB") == std::optional<std::string>("64Mi"));
  CHECK(chl::test::libvirt_quantity(1, "b") == std::optional<std::string>("1"));
  CHECK(chl::test::libvirt_quantity(2, "GB") == std::optional<std::string>("2G"));
  CHECK_FALSE(chl::test::libvirt_quantity(1, "parsecs"));
}

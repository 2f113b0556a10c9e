// The api.Domain document against what KubeVirt's own virt-launcher sent for the same VMI
// (golden/, copied from ../shared/reference/kubevirt-observed-launcher): every key we write is
// in the recorded document with the same value, and Status is the same object.
#include <doctest/doctest.h>

#include <ctime>
#include <fstream>

#include "kubevirt/domain_json.hpp"
#include "tests/support/test_support.hpp"

namespace {

using chl::kubevirt::DomainDocument;
using nlohmann::json;
using S = chl::events::DomainState;
using R = chl::events::StateReason;

json golden(const std::string& name) {
  std::ifstream in(chl::test::source_dir() / "tests/kubevirt/golden" / name);
  REQUIRE_MESSAGE(in.good(), "missing golden file " << name);
  return json::parse(in);
}

chl::kubevirt::Timestamp parse_time(const std::string& rfc3339) {
  std::tm tm{};
  REQUIRE(strptime(rfc3339.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm) != nullptr);
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

// The VMI of the recordings (vmi.yaml / vmi-masquerade.yaml after KubeVirt's defaulting).
DomainDocument recorded_vmi(bool masquerade) {
  DomainDocument d;
  d.vmi_name = "kvh-probe";
  d.vmi_namespace = "ns1";
  d.vmi_uid = "5b0c2a41-9e3d-4f1a-8b7c-6d5e4f3a2b10";
  d.uuid = "d7901662-86da-450a-a7f8-552214e3288c";
  d.grace_period_seconds = 3;
  d.machine = "pc-q35-10.0";
  d.memory_kib = 65536;
  d.vcpus = 4;
  if (masquerade)
    d.interfaces.push_back({.name = "default",
                            .mac = "02:42:ac:11:00:02",
                            .type = "ethernet",
                            .target_device = "tap0",
                            .model = "virtio-non-transitional",
                            .mtu = 1500});
  return d;
}

// What the recorded launcher could not know yet in its first events (the VMI's UID and grace
// period arrive with the first Sync's metadata); we know them from the start.
bool known_only_to_us(const std::string& path) {
  return path == "/ObjectMeta/uid" || path == "/Spec/Metadata/KubeVirt/UID" ||
         path == "/Spec/Metadata/KubeVirt/GracePeriod";
}

// Where we differ on purpose: the guest-agent channel's socket path (libvirt's
// /run/libvirt/qemu/channel/<id>-<domain>/…, none of ours yet) and its state on the ADDED event
// (virt-launcher's is "" with no source before libvirt starts QEMU; ours "disconnected" from the
// start: virt-handler reads both as "agent not connected", vm.go:665-674), and no migration
// record (virt-launcher writes an empty one, only an EndTimestamp, once a graceful shutdown
// starts; this launcher never migrates).
bool different_by_design(const std::string& path) {
  return path.starts_with("/Spec/Devices/Channels/0/Source") ||
         path == "/Spec/Devices/Channels/0/Target/State" ||
         path == "/Spec/Metadata/KubeVirt/Migration";
}

// Every key of `ours` is in `ref` with the same value (objects recursively, arrays element by
// element); returns the first difference, empty when none.
std::string first_difference(const json& ours, const json& ref, const std::string& path = "") {
  if (ours.is_object() && ref.is_object()) {
    for (const auto& [k, v] : ours.items()) {
      const std::string p = path + "/" + k;
      if (!ref.contains(k)) {
        if (known_only_to_us(p)) continue;
        return p + ": not in the recorded document";
      }
      if (auto d = first_difference(v, ref[k], p); !d.empty()) return d;
    }
    return {};
  }
  if (ours.is_array() && ref.is_array()) {
    if (ours.size() > ref.size()) return path + ": more elements than recorded";
    for (std::size_t i = 0; i < ours.size(); ++i)
      if (auto d = first_difference(ours[i], ref[i], path + "/" + std::to_string(i)); !d.empty())
        return d;
    return {};
  }
  if (ours != ref) {
    if (different_by_design(path)) return {};
    if (known_only_to_us(path) && (ref.is_null() || ref == "")) return {};
    return path + ": ours " + ours.dump() + ", recorded " + ref.dump();
  }
  return {};
}

struct Case {
  const char* file;
  S state;
  R reason;
  const char* grace_start = nullptr;  // GracePeriod.DeletionTimestamp, as recorded
  const char* deleted = nullptr;      // ObjectMeta.deletionTimestamp, as recorded
};

}  // namespace

TEST_CASE(
    "domain json: each recorded event of a real virt-launcher, rebuilt from our description") {
  // The states as the launcher knows them (libvirt's vocabulary); the document must carry
  // KubeVirt's translation exactly as recorded (Running's reason is "Unknown", not "Booted").
  const Case cases[] = {
      {"masquerade-00-ADDED-Shutoff.json", S::Shutoff, R::Unknown},
      {"masquerade-02-MODIFIED-Paused.json", S::Paused, R::StartingUp},
      {"masquerade-04-MODIFIED-Running.json", S::Running, R::Booted},
      {"masquerade-06-MODIFIED-Paused.json", S::Paused, R::User},
      {"masquerade-09-MODIFIED-Running.json", S::Running, R::Unpaused, "2026-11-24T18:58:51Z"},
      {"masquerade-10-MODIFIED-ShuttingDown.json", S::ShuttingDown, R::Unknown,
       "2026-11-24T18:58:51Z"},
      {"masquerade-11-MODIFIED-Shutoff.json", S::Shutoff, R::Shutdown, "2026-11-24T18:58:51Z"},
      {"masquerade-12-MODIFIED-NoState.json", S::NoState, R::NonExistent, nullptr,
       "2026-11-24T18:58:52Z"},
      {"plain-03-MODIFIED-Running.json", S::Running, R::Booted},
      {"plain-09-MODIFIED-Shutoff.json", S::Shutoff, R::Destroyed, "2026-11-24T18:47:43Z"},
  };
  for (const Case& c : cases) {
    const std::string file = c.file;
    CAPTURE(file);
    const json ref = golden(c.file);
    DomainDocument d = recorded_vmi(file.starts_with("masquerade"));
    if (file.starts_with("plain")) d.uuid = "46c734c6-3184-4962-b141-17e8f0b2ac69";  // its own run
    d.state = c.state;
    d.reason = c.reason;
    if (c.grace_start) d.grace_period_start = parse_time(c.grace_start);
    if (c.deleted) d.deletion_timestamp = parse_time(c.deleted);
    if (c.deleted) REQUIRE(ref["ObjectMeta"]["deletionTimestamp"] == c.deleted);
    const json ours = chl::kubevirt::to_domain_json(d);

    CHECK(ours["Status"] == ref["Status"]);  // the whole status, zero values included
    const std::string diff = first_difference(ours, ref);
    CHECK_MESSAGE(diff.empty(), diff);
    // The identity virt-handler matches on.
    CHECK(ours["ObjectMeta"]["name"] == "kvh-probe");
    CHECK(ours["ObjectMeta"]["namespace"] == "ns1");
    CHECK(ours["ObjectMeta"]["uid"] == d.vmi_uid);
    CHECK(ours["Spec"]["Metadata"]["KubeVirt"]["UID"] == d.vmi_uid);
    CHECK(ours.contains("/ObjectMeta/deletionTimestamp"_json_pointer) == (c.deleted != nullptr));
  }
}

TEST_CASE("domain json: the fields virt-handler reads are present while the domain exists") {
  DomainDocument d = recorded_vmi(true);
  d.state = S::Running;
  d.disks.push_back({.name = "rootdisk",
                     .source = "/var/run/kubevirt/container-disks/disk_0.img",
                     .target_device = "vda"});
  d.disks.push_back({.name = "hp1",
                     .device = "disk",
                     .source = "/dev/hp1",
                     .block_device = true,
                     .target_device = "sda",
                     .bus = "scsi",
                     .read_only = true});
  const json j = chl::kubevirt::to_domain_json(d);
  CHECK(j["kind"] == "Domain");
  CHECK(j["Spec"]["Name"] == "ns1_kvh-probe");
  CHECK(j["Spec"]["UUID"] == "d7901662-86da-450a-a7f8-552214e3288c");
  CHECK(j["Spec"]["Type"] == "kvm");  // "qemu" would make virt-handler think of emulation
  CHECK(j["Spec"]["CurrentMemory"] == json{{"Value", 65536}, {"Unit", "KiB"}});
  CHECK(j["Spec"]["OS"]["Type"]["Machine"] == "pc-q35-10.0");
  CHECK(j["Spec"]["Features"]["ACPI"] == json::object());  // graceful shutdown through ACPI
  CHECK(j["Spec"]["Metadata"]["KubeVirt"]["GracePeriod"]["DeletionGracePeriodSeconds"] == 3);
  CHECK(j["Spec"]["Metadata"]["KubeVirt"]["GracePeriod"]["DeletionTimestamp"].is_null());
  // Interfaces: MAC and the user alias, which KubeVirt's JSON writes without the "ua-" prefix.
  CHECK(j["Spec"]["Devices"]["Interfaces"][0]["MAC"]["MAC"] == "02:42:ac:11:00:02");
  CHECK(j["Spec"]["Devices"]["Interfaces"][0]["Alias"] ==
        json{{"Name", "default"}, {"UserDefined", true}});
  // Disks: virt-handler maps volumes to targets by alias and skips those without a source.
  const json& disks = j["Spec"]["Devices"]["Disks"];
  REQUIRE(disks.size() == 2);
  CHECK(disks[0]["Alias"]["Name"] == "rootdisk");
  CHECK(disks[0]["Source"] == json{{"File", "/var/run/kubevirt/container-disks/disk_0.img"}});
  CHECK(disks[0]["Target"] == json{{"Bus", "virtio"}, {"Device", "vda"}});
  CHECK(disks[0]["ReadOnly"].is_null());
  CHECK(disks[1]["Type"] == "block");
  CHECK(disks[1]["Source"] == json{{"Dev", "/dev/hp1"}});
  CHECK(disks[1]["ReadOnly"] == json::object());
  // No ACPI: no Features, so virt-handler does not wait for a guest shutdown that cannot come.
  d.acpi = false;
  CHECK(chl::kubevirt::to_domain_json(d)["Spec"]["Features"].is_null());
}

TEST_CASE("domain json: a guest panic sets GuestPanicInfo and PanicCount") {
  DomainDocument d = recorded_vmi(false);
  d.state = S::Crashed;
  d.reason = R::Panicked;
  d.panic = chl::kubevirt::GuestPanic{"hyper-v", {0x7e, 1, 2, 3, 4}};
  d.panic_count = 2;
  const json s = chl::kubevirt::to_domain_json(d)["Status"];
  CHECK(s["Status"] == "Crashed");
  CHECK(s["Reason"] == "Panicked");
  CHECK(s["PanicCount"] == 2);
  CHECK(
      s["GuestPanicInfo"] ==
      json{
          {"Type", "hyper-v"}, {"Arg1", 0x7e}, {"Arg2", 1}, {"Arg3", 2}, {"Arg4", 3}, {"Arg5", 4}});
}

TEST_CASE("domain json: names and Kubernetes times") {
  CHECK(chl::kubevirt::domain_name("default", "vm1") == "default_vm1");
  CHECK(chl::kubevirt::kubernetes_time(parse_time("2026-11-24T18:47:53Z")) ==
        "2026-11-24T18:47:53Z");
  // Sub-second parts are dropped, as metav1.Time's JSON does.
  CHECK(chl::kubevirt::kubernetes_time(std::chrono::system_clock::from_time_t(0) +
                                       std::chrono::milliseconds(999)) == "1970-01-01T00:00:00Z");
}

TEST_CASE("domain json: virtiofs filesystems as KubeVirt's converter writes them (api.FilesystemDevice)") {
  DomainDocument d = recorded_vmi(true);
  CHECK(chl::kubevirt::to_domain_json(d)["Spec"]["Devices"]["Filesystems"].is_null());  // a nil slice
  d.filesystems.push_back({"data", "/var/run/kubevirt/virtiofs-containers/data.sock"});
  const json fs = chl::kubevirt::to_domain_json(d)["Spec"]["Devices"]["Filesystems"];
  REQUIRE(fs.is_array());
  REQUIRE(fs.size() == 1);
  // converter/storage/virtiofs.go; Go's field names (no json tags), Source.Dir without omitempty.
  CHECK(fs[0] == json::parse(R"({"Type":"mount","AccessMode":"passthrough",
      "Source":{"Dir":"","Socket":"/var/run/kubevirt/virtiofs-containers/data.sock"},
      "Target":{"Dir":"data"},"Driver":{"Type":"virtiofs","Queue":"1024"},"Binary":null})"));
}

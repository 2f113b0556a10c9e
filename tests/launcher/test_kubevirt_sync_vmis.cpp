// KubeVirt's own defaulting, as golden tests (issue 21). ../shared/reference/kubevirt-sync-vmis/
// holds manifests (NAME.yaml) beside what KubeVirt's virt-api defaulting made of them
// (NAME.sync.json, the VMI as SyncVirtualMachine carries it). Each defaulted VMI must be accepted
// on both hypervisors, and must launch the same VM as its manifest, which check_vmi defaults the
// same way: the same vm.create body on Cloud Hypervisor, the same domain XML on qemu-kvm. Where
// the two differ the test names the difference:
//   - firmware.uuid: KubeVirt gives a bare VMI a random UUID (uuid.NewString()), we derive one;
//   - an explicit `sata` bus (every defaulted disk has one) is served as virtio-blk on Cloud
//     Hypervisor with a warning; the manifest's defaulted bus is served the same, silently.
#include <doctest/doctest.h>

#include <filesystem>
#include <regex>

#include "drivers/cloud_hypervisor/translate.hpp"
#include "drivers/libvirt/domain_xml.hpp"
#include "launcher/plan.hpp"
#include "tests/support/test_support.hpp"
#include "vmi/defaults.hpp"
#include "vmi/parser.hpp"
#include "vmi/validator.hpp"

using namespace chl::vmi;
using chl::launcher::LaunchPlan;
using chl::launcher::PlanInputs;
namespace fs = std::filesystem;

namespace {

fs::path reference_dir() { return chl::test::source_dir() / ".." / "shared" / "reference" / "kubevirt-sync-vmis"; }

std::vector<std::string> sync_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(reference_dir(), ec)) {
    const std::string f = e.path().filename().string();
    const std::string suffix = ".sync.json";
    if (f.size() > suffix.size() && f.compare(f.size() - suffix.size(), suffix.size(), suffix) == 0)
      names.push_back(f.substr(0, f.size() - suffix.size()));
  }
  std::sort(names.begin(), names.end());
  return names;
}

CheckedVmi checked(const fs::path& file, const char* hypervisor) {
  auto text = read_manifest(file.string());
  REQUIRE_MESSAGE(text.has_value(), file.string());
  auto c = check_vmi(*text, hypervisor);
  if (!c) FAIL(file.filename().string() << " on " << hypervisor << ":\n" << format_violations(c.error(), ""));
  return std::move(*c);
}

LaunchPlan plan_of(const CheckedVmi& c) {
  PlanInputs in;
  in.pod_layout = true;  // KubeVirt's pod paths, as in a virt-launcher pod
  in.state_dir = "/run/ch-launcher/test/vm";
  in.cpu_set = std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5, 6, 7};
  auto p = chl::launcher::plan_launch(c.vmi, *c.caps, in);
  if (!p) FAIL("plan: " << format_violations(p.error(), ""));
  return std::move(*p);
}

// The vm.create body without what KubeVirt makes random (the firmware UUID).
std::string ch_body(const CheckedVmi& c) {
  nlohmann::json j = chl::cloud_hypervisor::ch_plan_json(plan_of(c));
  auto strip = [](nlohmann::json& body) {
    if (!body.contains("platform")) return;
    body["platform"].erase("uuid");
    if (body["platform"].empty()) body.erase("platform");
  };
  if (j.contains("vm_create")) strip(j["vm_create"]);
  strip(j);
  return j.dump(2);
}

std::string domain_xml(const CheckedVmi& c) {
  chl::libvirt::DomainXmlOptions xo;
  xo.accel = chl::libvirt::Accel::Tcg;
  xo.run_as = std::make_pair(uid_t{0}, gid_t{0});
  xo.state_dir = "/run/ch-launcher/test/vm";
  std::string xml = chl::libvirt::to_domain_xml(c.vmi, plan_of(c), xo);
  xml = std::regex_replace(xml, std::regex("<uuid>[^<]*</uuid>"), "<uuid>UUID</uuid>");
  return std::regex_replace(xml, std::regex("<entry name='uuid'>[^<]*</entry>"), "<entry name='uuid'>UUID</entry>");
}

bool has_warning(const Violations& w, const std::string& path, const std::string& part) {
  for (const auto& x : w)
    if (x.path == path && x.message.find(part) != std::string::npos) return true;
  return false;
}

std::string dump(const Violations& w) { return format_violations(w, "warning"); }

}  // namespace

TEST_CASE("KubeVirt's defaulted VMIs: accepted on both hypervisors, the same VM as their manifests") {
  const auto names = sync_names();
  if (names.empty()) {
    MESSAGE("SKIPPED: no KubeVirt sync VMIs at " << reference_dir().string()
                                                 << " (the shared/ reference data is not beside this checkout)");
    return;
  }
  CHECK(names.size() >= 4);
  for (const auto& name : names) {
    CAPTURE(name);
    const fs::path json = reference_dir() / (name + ".sync.json");
    const fs::path yaml = reference_dir() / (name + ".yaml");
    REQUIRE(fs::exists(yaml));
    // Cloud Hypervisor: host-model served as the host CPU, sata served as virtio-blk.
    auto ch_json = checked(json, "cloud-hypervisor");
    auto ch_yaml = checked(yaml, "cloud-hypervisor");
    CHECK(ch_json.vmi.spec.domain.cpu.model == "host-model");
    CHECK(ch_yaml.vmi.spec.domain.cpu.model == "host-model");
    CHECK_MESSAGE(ch_body(ch_json) == ch_body(ch_yaml), name << ": vm.create bodies differ");
    // The difference, named: each explicit sata disk of the synced VMI warns; the manifest's
    // defaulted buses do not.
    const auto& disks = ch_json.vmi.spec.domain.devices.disks;
    std::size_t sata = 0;
    for (std::size_t i = 0; i < disks.size(); ++i) {
      if (disks[i].bus != "sata") continue;
      ++sata;
      const std::string dev = disks[i].device == DiskDevice::Cdrom ? "cdrom" : "disk";
      CHECK_MESSAGE(has_warning(ch_json.warnings, "spec.domain.devices.disks[" + std::to_string(i) + "]." + dev + ".bus",
                                "served as virtio-blk"),
                    dump(ch_json.warnings));
    }
    CHECK(ch_json.warnings.size() == sata);
    CHECK_MESSAGE(ch_yaml.warnings.empty(), dump(ch_yaml.warnings));
    // qemu-kvm: the same domain XML (KubeVirt's sata is a real SATA disk there).
    auto q_json = checked(json, "qemu-kvm");
    auto q_yaml = checked(yaml, "qemu-kvm");
    CHECK(q_json.warnings.empty());
    CHECK_MESSAGE(domain_xml(q_json) == domain_xml(q_yaml), name << ": domain XML differs");
  }
}

TEST_CASE("defaulting a manifest: what KubeVirt's virt-api adds, and nothing once it is there") {
  const char* manifest = R"(
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: d, namespace: ns, uid: 11111111-2222-3333-4444-555555555555}
spec:
  domain:
    resources: {requests: {memory: 2Gi}, limits: {cpu: "2"}}
    devices:
      disks: [{name: root}, {name: fast, disk: {bus: virtio}}]
  volumes:
  - {name: root, containerDisk: {image: example/root:1}}
  - {name: fast, emptyDisk: {capacity: 1Gi}}
  - {name: extra, emptyDisk: {capacity: 1Gi}}
)";
  auto parsed = parse_vmi(manifest);
  REQUIRE(parsed.problems.empty());
  Vmi v = parsed.vmi;
  apply_kubevirt_defaults(v);
  const auto& s = v.spec;
  CHECK(s.architecture == "amd64");
  CHECK(s.domain.machine_type == "q35");
  CHECK(s.domain.cpu.model == "host-model");
  CHECK(s.domain.cpu.sockets == 2);  // from the CPU limit
  CHECK(s.domain.cpu.cores == 1);
  CHECK(s.domain.cpu.threads == 1);
  CHECK(s.domain.cpu.max_sockets == 8);  // 4 x sockets: CPU hotplug headroom
  REQUIRE(s.domain.memory.guest);
  CHECK(s.domain.memory.guest->value == (std::int64_t{2} << 30));
  REQUIRE(s.domain.memory.max_guest);
  CHECK(s.domain.memory.max_guest->text == "8Gi");  // 4 x guest, ≥ 1Gi and 2Mi-aligned
  REQUIRE(s.domain.devices.disks.size() == 3);  // "extra" had no disk: it gets one
  CHECK(s.domain.devices.disks[0].bus == "sata");
  CHECK(s.domain.devices.disks[0].bus_defaulted);
  CHECK(s.domain.devices.disks[1].bus == "virtio");
  CHECK_FALSE(s.domain.devices.disks[1].bus_defaulted);
  CHECK(s.domain.devices.disks[2].name == "extra");
  CHECK(s.domain.devices.disks[2].bus == "sata");
  REQUIRE(s.domain.devices.interfaces.size() == 1);  // the default pod interface, bridge
  CHECK(s.domain.devices.interfaces[0].name == "default");
  CHECK(s.domain.devices.interfaces[0].binding == Binding::Bridge);
  REQUIRE(s.networks.size() == 1);
  CHECK(s.networks[0].kind == NetworkKind::Pod);
  // Idempotent.
  Vmi again = v;
  apply_kubevirt_defaults(again);
  CHECK(again.spec.domain.cpu.max_sockets == 8);
  CHECK(again.spec.domain.memory.max_guest->text == "8Gi");
  CHECK(again.spec.domain.devices.disks.size() == 3);
  CHECK(again.spec.domain.devices.interfaces.size() == 1);

  // No memory hotplug under 1Gi, none for a non-amd64 architecture, none without autoattach.
  auto small = parse_vmi(R"(
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: s}
spec:
  domain:
    memory: {guest: 512Mi}
    devices: {autoattachPodInterface: false}
)");
  Vmi sv = small.vmi;
  apply_kubevirt_defaults(sv);
  CHECK_FALSE(sv.spec.domain.memory.max_guest);
  CHECK(sv.spec.domain.cpu.max_sockets == 4);
  CHECK(sv.spec.domain.devices.interfaces.empty());
}

TEST_CASE("hotplug headroom is lowered to what the hypervisor has, with a warning, never refused") {
  const char* big = R"(
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: big}
spec:
  domain:
    cpu: {sockets: 64, cores: 1, threads: 1, maxSockets: 256}
    memory: {guest: 1Gi}
    devices: {autoattachPodInterface: false}
)";
  auto c = check_vmi(big, "cloud-hypervisor");
  REQUIRE_MESSAGE(c.has_value(), format_violations(c ? Violations{} : c.error(), ""));
  CHECK(c->vmi.spec.domain.cpu.max_sockets == 254);
  CHECK(has_warning(c->warnings, "spec.domain.cpu.maxSockets", "lowered to 254"));
  // The boot topology is still checked.
  auto too_many = check_vmi(R"(
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: big}
spec:
  domain:
    cpu: {sockets: 255}
    memory: {guest: 1Gi}
    devices: {autoattachPodInterface: false}
)", "cloud-hypervisor");
  CHECK_FALSE(too_many.has_value());
}

TEST_CASE("Cloud Hypervisor: sata named in a manifest warns, a named CPU model is still refused") {
  auto c = check_vmi(R"(
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: w}
spec:
  domain:
    memory: {guest: 256Mi}
    devices:
      disks: [{name: root, disk: {bus: sata}}]
      autoattachPodInterface: false
  volumes: [{name: root, containerDisk: {image: example/root:1}}]
)", "cloud-hypervisor");
  REQUIRE(c.has_value());
  CHECK(has_warning(c->warnings, "spec.domain.devices.disks[0].disk.bus", "the guest needs virtio-blk drivers"));
  auto named = check_vmi(R"(
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: w}
spec:
  domain:
    cpu: {model: Skylake-Client}
    memory: {guest: 256Mi}
    devices: {autoattachPodInterface: false}
)", "cloud-hypervisor");
  REQUIRE_FALSE(named.has_value());
  CHECK(named.error()[0].path == "spec.domain.cpu.model");
}

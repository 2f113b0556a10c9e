// Launch plans and their Cloud Hypervisor translation: golden vm.create bodies for VMIs in the
// style of KubeVirt's examples, and the planning rules one by one.
// CHL_UPDATE_GOLDEN=1 rewrites tests/golden/*.json from the current code (review
// the diff by hand before committing).
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include "drivers/cloud_hypervisor/translate.hpp"
#include "launcher/plan.hpp"
#include "vmi/validator.hpp"
#include "vmi/parser.hpp"
#include "tests/support/test_support.hpp"

using namespace chl::cloud_hypervisor; using namespace chl::launcher; using namespace chl::vmi;
using chl::test::read_file;
using chl::test::source_dir;

namespace {

std::filesystem::path vmis() { return source_dir() / "tests/vmis"; }
std::filesystem::path goldens() { return source_dir() / "tests/golden"; }

CheckedVmi load(const std::string& file, const char* hypervisor = "cloud-hypervisor") {
  auto text = read_manifest((vmis() / file).string());
  REQUIRE_MESSAGE(text.has_value(), file);
  auto checked = check_vmi(*text, hypervisor);
  if (!checked) {
    std::string all;
    for (const auto& v : checked.error()) all += to_string(v) + "\n";
    FAIL(file << " does not validate:\n" << all);
  }
  return std::move(*checked);
}

LaunchPlan plan_of(const CheckedVmi& c, const PlanInputs& in) {
  auto p = plan_launch(c.vmi, *c.caps, in);
  if (!p) {
    std::string all;
    for (const auto& v : p.error()) all += to_string(v) + "\n";
    FAIL("plan failed:\n" << all);
  }
  return std::move(*p);
}

struct Golden {
  const char* vmi;
  const char* golden;
  std::vector<std::pair<std::string, std::string>> volumes;
  const char* cpu_set = "";
  bool pod_layout = false;
};

const std::vector<Golden>& golden_cases() {
  static const std::vector<Golden> cases = {
      {"containerdisk-cloudinit.yaml",
       "containerdisk-cloudinit.json",
       {{"containerdisk", "/images/fedora-40.qcow2"}}},
      {"masquerade.yaml", "masquerade-pod-layout.json", {}, "", true},
      {"ephemeral.yaml", "ephemeral.json", {{"containerdisk", "/images/cirros.img"}}},
      {"empty-disk.yaml", "empty-disk.json", {{"containerdisk", "/images/ubuntu-24.04.qcow2"}}},
      {"host-disk.yaml", "host-disk.json", {}},
      {"pvc.json", "pvc-pod-layout.json", {}, "", true},
      {"kernel-boot.yaml",
       "kernel-boot.json",
       {{"containerdisk", "/images/alpine.img"}, {"kernel-boot", "/kernel-root"}}},
      {"efi.yaml", "efi.json", {{"containerdisk", "/images/alpine.img"}}},
      {"hugepages.yaml", "hugepages.json", {{"containerdisk", "/images/fedora-40.qcow2"}}},
      {"dedicated-cpus.yaml",
       "dedicated-cpus.json",
       {{"containerdisk", "/images/fedora-40.qcow2"}},
       "4-7"},
      {"multi-disk-nic.yaml",
       "multi-disk-nic.json",
       {{"data", "/pvc/data/disk.img"},
        {"root", "/images/debian-12.qcow2"},
        {"app-config", "/configmaps/app-settings"}}},
      {"virtiofs.yaml", "virtiofs.json", {{"containerdisk", "/images/fedora-40.qcow2"}}},
      {"virtiofs-pvc-hugepages.yaml", "virtiofs-pvc-hugepages.json", {{"containerdisk", "/images/fedora-40.qcow2"}}},
  };
  return cases;
}

}  // namespace

TEST_CASE("golden: each example VMI renders exactly its expected plan and vm.create body") {
  const bool update =
      std::getenv("CHL_UPDATE_GOLDEN") && std::string(std::getenv("CHL_UPDATE_GOLDEN")) == "1";
  for (const auto& g : golden_cases()) {
    CAPTURE(g.vmi);
    CheckedVmi c = load(g.vmi);
    PlanInputs in;
    for (const auto& [k, v] : g.volumes) in.volume_paths[k] = v;
    in.pod_layout = g.pod_layout;
    if (*g.cpu_set) in.cpu_set = parse_cpu_list(g.cpu_set);
    nlohmann::json got = ch_plan_json(plan_of(c, in));
    const auto path = goldens() / g.golden;
    if (update) {
      chl::test::write_file(path, got.dump(2) + "\n");
      continue;
    }
    REQUIRE_MESSAGE(std::filesystem::exists(path), path.string()
                                                       << " missing; run with CHL_UPDATE_GOLDEN=1");
    nlohmann::json want = nlohmann::json::parse(read_file(path));
    CHECK_MESSAGE(got == want, g.golden << " differs:\n"
                                        << nlohmann::json::diff(want, got).dump(2));
    // The body is valid for the typed API both ways (what the client will send).
    auto typed = chl::vmm_api::parse_vm_config(got["vm_create"].dump());
    REQUIRE(typed.has_value());
    CHECK(nlohmann::json(*typed) == got["vm_create"]);
  }
}

TEST_CASE("disks: ids are volume names, boot order first, then spec order") {
  CheckedVmi c = load("multi-disk-nic.yaml");
  PlanInputs in;
  in.volume_paths = {{"data", "/d"}, {"root", "/r"}, {"app-config", "/c"}};
  LaunchPlan p = plan_of(c, in);
  REQUIRE(p.disks.size() == 4);
  CHECK(p.disks[0].name == "root");
  CHECK(p.disks[1].name == "data");
  CHECK(p.disks[2].name == "seed");
  CHECK(p.disks[3].name == "app-config");
  CHECK(p.disks[0].direct);    // cache: none
  CHECK(!p.disks[1].direct);   // cache: writeback
  CHECK(p.disks[2].readonly);  // disk.readonly
  CHECK(p.disks[0].serial == "ROOT-DISK");
  CHECK(p.disks[0].num_queues == 2);  // blockMultiQueue: one queue per vCPU
}

TEST_CASE("read-only PVCs stay read-only, pod layout paths follow KubeVirt") {
  CheckedVmi c = load("pvc.json");
  PlanInputs in;
  in.pod_layout = true;
  in.volume_paths["reference"] = "/override/ref.img";
  LaunchPlan p = plan_of(c, in);
  REQUIRE(p.disks.size() == 3);
  CHECK(p.disks[0].path == "/var/run/kubevirt-private/vmi-disks/root/disk.img");
  CHECK(p.disks[1].path == "/override/ref.img");  // --volume wins over the pod layout
  CHECK(p.disks[1].readonly);
  CHECK(p.disks[2].readonly);         // persistentVolumeClaim.readOnly
  CHECK(p.preparations.size() == 1);  // only the firmware
  CHECK(p.preparations[0].kind == PreparationKind::FindFirmware);
}

TEST_CASE(
    "container disks in pod layout are disk_<volume index>.img and get converted into the state "
    "dir") {
  CheckedVmi c = load("masquerade.yaml");
  PlanInputs in;
  in.pod_layout = true;
  in.state_dir = "/state/vm1/";
  LaunchPlan p = plan_of(c, in);
  CHECK(p.state_dir == "/state/vm1");
  bool found = false;
  for (const auto& prep : p.preparations) {
    if (prep.kind != PreparationKind::ConvertContainerDisk) continue;
    found = true;
    CHECK(prep.source == "/var/run/kubevirt/container-disks/disk_0.img");
    CHECK(prep.target == "/state/vm1/container-disks/containerdisk.img");
  }
  CHECK(found);
  CHECK(p.disks[0].path == "/state/vm1/container-disks/containerdisk.img");
  CHECK(!p.disks[0].readonly);  // KubeVirt's container disks are writable (ephemeral)
}

TEST_CASE("a volume without a file is a problem naming the --volume to pass") {
  CheckedVmi c = load("containerdisk-cloudinit.yaml");
  auto p = plan_launch(c.vmi, *c.caps, PlanInputs{});
  REQUIRE(!p.has_value());
  REQUIRE(p.error().size() == 1);
  CHECK(p.error()[0].path == "spec.volumes[0]");
  CHECK(p.error()[0].message.find("pass --volume containerdisk=PATH") != std::string::npos);
}

TEST_CASE("NICs: KubeVirt tap names, stable generated MACs, multiqueue 2 x vCPUs") {
  CheckedVmi c = load("multi-disk-nic.yaml");
  PlanInputs in;
  in.volume_paths = {{"data", "/d"}, {"root", "/r"}, {"app-config", "/c"}};
  LaunchPlan p = plan_of(c, in);
  REQUIRE(p.nics.size() == 3);
  CHECK(p.nics[0].pod_interface == "eth0");
  CHECK(p.nics[0].tap == "tap0");
  CHECK(p.nics[0].mac == "02:ab:cd:00:00:01");  // from the spec, normalized
  CHECK(!p.nics[0].mac_generated);
  CHECK(p.nics[1].pod_interface == "net1");
  CHECK(p.nics[1].tap == "tap1");
  CHECK(p.nics[2].tap == "tap2");
  CHECK(p.nics[0].num_queues == 4);
  std::set<std::string> macs;
  for (const auto& n : p.nics) {
    unsigned char b[6];
    REQUIRE(parse_mac(n.mac, b));
    CHECK((b[0] & 1) == 0);                       // unicast
    if (n.mac_generated) CHECK((b[0] & 2) == 2);  // locally administered
    macs.insert(n.mac);
  }
  CHECK(macs.size() == 3);
  // Stable: the same VMI gives the same MACs; another uid gives others.
  CHECK(generated_mac(c.vmi, "storage") == p.nics[1].mac);
  Vmi other = c.vmi;
  other.metadata.uid = "another-uid";
  CHECK(generated_mac(other, "storage") != p.nics[1].mac);
}

TEST_CASE("no interfaces and no networks: KubeVirt's default pod network with a bridge") {
  CheckedVmi c = load("ephemeral.yaml");
  PlanInputs in;
  in.volume_paths["containerdisk"] = "/i";
  LaunchPlan p = plan_of(c, in);
  REQUIRE(p.nics.size() == 1);
  CHECK(p.nics[0].name == "default");
  CHECK(p.nics[0].binding == Binding::Bridge);
  CHECK(p.nics[0].tap == "tap0");
  CheckedVmi k = load("kernel-boot.yaml");  // autoattachPodInterface: false
  PlanInputs kin;
  kin.volume_paths = {{"containerdisk", "/i"}, {"kernel-boot", "/k"}};
  CHECK(plan_of(k, kin).nics.empty());
}

TEST_CASE("dedicated CPUs: pinned one to one onto the CPU set, which must be large enough") {
  CheckedVmi c = load("dedicated-cpus.yaml");
  PlanInputs in;
  in.volume_paths["containerdisk"] = "/i";
  in.cpu_set = parse_cpu_list("2,4-6,9");
  LaunchPlan p = plan_of(c, in);
  CHECK(p.cpus.pinning == std::vector<std::uint32_t>{2, 4, 5, 6});
  CHECK(p.cpus.kvm_hyperv);
  in.cpu_set = parse_cpu_list("0-2");
  auto small = plan_launch(c.vmi, *c.caps, in);
  REQUIRE(!small.has_value());
  CHECK(small.error()[0].path == "spec.domain.cpu.dedicatedCpuPlacement");
  CHECK(small.error()[0].message == "needs 4 dedicated CPUs but the pod's CPU set has 3");
  in.cpu_set.reset();
  auto none = plan_launch(c.vmi, *c.caps, in);
  REQUIRE(!none.has_value());
  CHECK(none.error()[0].message.find("--cpu-set") != std::string::npos);
}

TEST_CASE("isolateEmulatorThread: the CPU after the vCPUs' holds every other thread, two with even parity") {
  CheckedVmi c = load("dedicated-cpus.yaml");  // 4 vCPUs
  c.vmi.spec.domain.cpu.isolate_emulator_thread = true;
  PlanInputs in;
  in.volume_paths["containerdisk"] = "/i";
  // KubeVirt's pod has the vCPUs' CPUs plus one (renderresources.go); the converter pins the
  // emulator to the next free one (vcpu.go FormatEmulatorThreadPin).
  in.cpu_set = parse_cpu_list("2,4-6,9");
  LaunchPlan p = plan_of(c, in);
  CHECK(p.cpus.pinning == std::vector<std::uint32_t>{2, 4, 5, 6});
  CHECK(p.cpus.emulator_cpus == std::vector<std::uint32_t>{9});
  // alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity with an even vCPU count: two CPUs.
  c.vmi.metadata.annotations["alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity"] = "";
  in.cpu_set = parse_cpu_list("2,4-6,9-10");
  CHECK(plan_of(c, in).cpus.emulator_cpus == std::vector<std::uint32_t>{9, 10});
  in.cpu_set = parse_cpu_list("2,4-6,9");
  auto small = plan_launch(c.vmi, *c.caps, in);
  REQUIRE(!small.has_value());
  CHECK(small.error()[0].path == "spec.domain.cpu.dedicatedCpuPlacement");
  CHECK(small.error()[0].message ==
        "needs 6 dedicated CPUs (4 vCPUs and 2 for isolateEmulatorThread) but the pod's CPU set has 5");
  // Without isolateEmulatorThread nothing is reserved.
  c.vmi.spec.domain.cpu.isolate_emulator_thread = false;
  CHECK(plan_of(c, in).cpus.emulator_cpus.empty());
}

TEST_CASE("host devices and GPUs: VFIO devices by sysfs path with KubeVirt's aliases, memlock checked") {
  CheckedVmi c = load("dedicated-cpus.yaml");  // 4Gi of guest memory
  c.vmi.spec.domain.devices.host_devices.push_back({"nic", "intel.com/qat", false, {}, "", ""});
  c.vmi.spec.domain.devices.host_devices.push_back({"gpu1", "nvidia.com/GP102GL", true, {}, "", ""});
  PlanInputs in;
  in.volume_paths["containerdisk"] = "/i";
  in.cpu_set = parse_cpu_list("0-3");
  in.device_env = {{"PCI_RESOURCE_INTEL_COM_QAT", "0000:3d:01.0"}, {"PCI_RESOURCE_NVIDIA_COM_GP102GL", "0000:81:00.0"}};
  LaunchPlan p = plan_of(c, in);
  REQUIRE(p.host_devices.size() == 2);
  const auto cfg = to_ch_vm_config(p);
  REQUIRE(cfg.devices);
  REQUIRE(cfg.devices->size() == 2);
  CHECK((*cfg.devices)[0].path == "/sys/bus/pci/devices/0000:3d:01.0/");
  CHECK((*cfg.devices)[0].id == "hostdevice-nic");
  CHECK((*cfg.devices)[1].path == "/sys/bus/pci/devices/0000:81:00.0/");
  CHECK((*cfg.devices)[1].id == "gpu-gpu1");
  // A memory-lock limit below guest memory: refused before anything starts, naming the field.
  in.memlock_limit = std::uint64_t{8} << 20;
  auto low = plan_launch(c.vmi, *c.caps, in);
  REQUIRE_FALSE(low);
  CHECK(low.error()[0].path == "spec.domain.devices.hostDevices");
  CHECK(low.error()[0].message.find("RLIMIT_MEMLOCK) is 8192 KiB") != std::string::npos);
  in.memlock_limit = std::uint64_t{64} << 30;  // above guest memory with its hotplug headroom
  CHECK(plan_launch(c.vmi, *c.caps, in).has_value());
  // No address for a device: refused naming it and KubeVirt's variable.
  in.device_env.erase("PCI_RESOURCE_NVIDIA_COM_GP102GL");
  auto missing = plan_launch(c.vmi, *c.caps, in);
  REQUIRE_FALSE(missing);
  CHECK(missing.error()[0].path == "spec.domain.devices.gpus[0]");
  CHECK(missing.error()[0].message.find("PCI_RESOURCE_NVIDIA_COM_GP102GL") != std::string::npos);
}

TEST_CASE("kernel boot paths resolve inside the kernel-boot directory, symlinks included") {
  chl::test::TempDir dir("chl-kb");
  std::filesystem::create_directories(dir.path() / "root/boot");
  chl::test::write_file(dir.path() / "root/boot/vmlinuz-virt", "kernel");
  chl::test::write_file(dir.path() / "secret", "outside");
  std::filesystem::create_symlink(dir.path() / "secret", dir.path() / "root/boot/initramfs-virt");
  CheckedVmi c = load("kernel-boot.yaml");
  PlanInputs in;
  in.volume_paths = {{"containerdisk", "/i"}, {"kernel-boot", (dir.path() / "root").string()}};
  auto p = plan_launch(c.vmi, *c.caps, in);
  REQUIRE(!p.has_value());
  REQUIRE(p.error().size() == 1);
  CHECK(p.error()[0].path == "spec.domain.firmware.kernelBoot.container.initrdPath");
  CHECK(p.error()[0].message.find("resolves outside the kernel-boot directory") !=
        std::string::npos);
  std::filesystem::remove(dir.path() / "root/boot/initramfs-virt");
  chl::test::write_file(dir.path() / "root/boot/initramfs-virt", "initrd");
  LaunchPlan ok = plan_of(c, in);
  CHECK(ok.payload.kernel == (dir.path() / "root/boot/vmlinuz-virt").string());
  CHECK(ok.payload.initramfs == (dir.path() / "root/boot/initramfs-virt").string());
  CHECK(ok.payload.cmdline == "console=ttyS0 root=/dev/vda rw");
  CHECK(ok.payload.firmware.empty());
}

TEST_CASE("cloud-hypervisor device ids must be distinct across disks and NICs") {
  auto text = read_manifest((vmis() / "ephemeral.yaml").string());
  REQUIRE(text);
  std::string t = *text;
  // Rename the disk/volume to "default", the name of KubeVirt's default interface.
  for (std::size_t pos; (pos = t.find("name: containerdisk")) != std::string::npos;)
    t.replace(pos, 19, "name: default");
  auto c = check_vmi(t, "cloud-hypervisor");
  REQUIRE(c.has_value());
  PlanInputs in;
  in.volume_paths["default"] = "/i";
  auto p = plan_launch(c->vmi, *c->caps, in);
  REQUIRE(!p.has_value());
  CHECK(p.error()[0].path == "spec.domain.devices.interfaces[0].name");
  CHECK(p.error()[0].message.find("is also the name of a disk") != std::string::npos);
}

TEST_CASE("CPU lists parse like the kernel's") {
  CHECK(parse_cpu_list("0-3,8").value() == std::vector<std::uint32_t>{0, 1, 2, 3, 8});
  CHECK(parse_cpu_list("5\n").value() == std::vector<std::uint32_t>{5});
  CHECK(parse_cpu_list("").value().empty());
  CHECK(!parse_cpu_list("3-1"));
  CHECK(!parse_cpu_list("a"));
  CHECK(!parse_cpu_list("1,"));
  CHECK(!parse_cpu_list("1--2"));
}

TEST_CASE("serial console Pty unless autoattachSerialConsole is false, console Off, pvpanic on") {
  CheckedVmi c = load("host-disk.yaml");
  nlohmann::json j = to_ch_vm_config(plan_of(c, PlanInputs{}));
  CHECK(j["serial"]["mode"] == "Pty");
  CHECK(j["console"]["mode"] == "Off");
  CHECK(j["pvpanic"] == true);
  CHECK(!j.contains("rng"));
  c.vmi.spec.domain.devices.autoattach_serial_console = false;
  nlohmann::json off = to_ch_vm_config(plan_of(c, PlanInputs{}));
  CHECK(off["serial"]["mode"] == "Off");
}

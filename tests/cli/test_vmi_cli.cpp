// The VMI commands through the built binary: validate, render, overhead — exit codes and output.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tests/support/test_support.hpp"

using chl::test::launcher_binary;
using chl::test::run_command;
using chl::test::source_dir;

namespace {

std::string vmi(const std::string& name) {
  return (source_dir() / "tests/vmis" / name).string();
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("validate: a valid VMI exits 0 with a one-line summary") {
  auto r = run_command({launcher_binary(), "validate", "--vmi", vmi("multi-disk-nic.yaml")});
  CHECK(r.exit_code == 0);
  CHECK(r.output ==
        "ok: lab/vmi-multi on cloud-hypervisor: 2 vCPUs, 3Gi memory, 4 disks, 3 interfaces, boot "
        "bios\n");
}

TEST_CASE("validate and render: virtiofs filesystems in the summary, the socket waits and the fs devices") {
  auto r = run_command({launcher_binary(), "validate", "--vmi", vmi("virtiofs-pvc-hugepages.yaml")});
  CHECK(r.exit_code == 0);
  CHECK(r.output ==
        "ok: default/vmi-virtiofs-pvc on cloud-hypervisor: 2 vCPUs, 1Gi memory, 1 disk, 1 interface, "
        "2 filesystems (virtiofs: data, credentials), boot bios\n");
  // render: each filesystem waits for its virtiofs container's socket, then is an fs device on it.
  auto p = run_command({launcher_binary(), "render", "--vmi", vmi("virtiofs-pvc-hugepages.yaml"), "--volume",
                        "containerdisk=/images/fedora-40.qcow2", "--plan"});
  CHECK_MESSAGE(p.exit_code == 0, p.output);
  CHECK_MESSAGE(contains(p.output, "wait-virtiofs-socket"), p.output);
  CHECK_MESSAGE(contains(p.output, "/var/run/kubevirt/virtiofs-containers/credentials.sock"), p.output);
}

TEST_CASE("validate: refusals exit 2 listing every violation, one a line") {
  chl::test::TempDir dir("chl-cli");
  const auto file = dir / "bad.yaml";
  chl::test::write_file(file, R"(apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: bad
spec:
  domain:
    devices:
      autoattachGraphicsDevice: true
      disks:
      - name: root
        disk: {bus: virtio}
      - name: iso
        cdrom: {bus: sata}
    resources:
      requests:
        memory: 1Gi
  volumes:
  - name: root
    containerDisk: {image: x}
  - name: iso
    containerDisk: {image: y}
)");
  auto r = run_command({launcher_binary(), "validate", "--vmi", file.string()});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.output,
                 file.string() + ": spec.domain.devices.disks[1].cdrom: cloud-hypervisor has no "
                                 "CD-ROM device; attach the volume as a disk with bus virtio\n"));
  // cdrom.bus sata is not refused (Cloud Hypervisor serves SATA as virtio-blk, with a warning):
  // the cdrom itself is.
  CHECK_FALSE(contains(r.output, "disks[1].cdrom.bus"));
  CHECK(contains(
      r.output,
      "spec.domain.devices.autoattachGraphicsDevice: cloud-hypervisor has no graphics device"));
  // The same VMI is fine for QEMU/KVM.
  auto q = run_command(
      {launcher_binary(), "validate", "--vmi", file.string(), "--hypervisor", "qemu-kvm"});
  CHECK(q.exit_code == 0);
  CHECK(contains(q.output, "on qemu-kvm"));
}

TEST_CASE("validate: unreadable file, malformed input and bad usage") {
  auto missing = run_command({launcher_binary(), "validate", "--vmi", "/nonexistent/vmi.yaml"});
  CHECK(missing.exit_code == 2);
  CHECK(contains(missing.output, "reading /nonexistent/vmi.yaml: No such file or directory"));
  auto stdin_bad = run_command({launcher_binary(), "validate", "--vmi", "-"}, "kind: [\n");
  CHECK(stdin_bad.exit_code == 2);
  CHECK(contains(stdin_bad.output, "<stdin>: not valid YAML or JSON: line "));
  auto no_vmi = run_command({launcher_binary(), "validate"});
  CHECK(no_vmi.exit_code == 2);
  CHECK(contains(no_vmi.output, "--vmi FILE is required"));
  auto bad_hv = run_command(
      {launcher_binary(), "validate", "--vmi", vmi("efi.yaml"), "--hypervisor", "bhyve"});
  CHECK(bad_hv.exit_code == 2);
  CHECK(contains(bad_hv.output, "--hypervisor: unknown hypervisor \"bhyve\""));
}

TEST_CASE("render: prints exactly the golden vm.create body and writes nothing") {
  chl::test::TempDir state("chl-render");
  auto r =
      run_command({launcher_binary(), "render", "--vmi", vmi("multi-disk-nic.yaml"), "--volume",
                   "data=/pvc/data/disk.img", "--volume", "root=/images/debian-12.qcow2",
                   "--volume", "app-config=/configmaps/app-settings"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  auto golden = nlohmann::json::parse(
      chl::test::read_file(source_dir() / "tests/golden/multi-disk-nic.json"));
  CHECK(nlohmann::json::parse(r.output) == golden["vm_create"]);
  auto plan =
      run_command({launcher_binary(), "render", "--plan", "--state-dir", state.path().string(),
                   "--vmi", vmi("empty-disk.yaml"), "--volume", "containerdisk=/images/u.img"});
  REQUIRE(plan.exit_code == 0);
  auto j = nlohmann::json::parse(plan.output);
  CHECK(j["state_dir"] == state.path().string());
  CHECK(j["preparations"].size() == 3);
  CHECK(std::filesystem::is_empty(state.path()));  // nothing written
}

TEST_CASE("render: missing volume file and bad arguments exit 2, qemu-kvm prints domain XML") {
  auto r = run_command({launcher_binary(), "render", "--vmi", vmi("containerdisk-cloudinit.yaml")});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.output,
                 "spec.volumes[0]: no file for volume \"containerdisk\" (containerDisk): pass "
                 "--volume containerdisk=PATH"));
  auto bad =
      run_command({launcher_binary(), "render", "--vmi", vmi("efi.yaml"), "--volume", "novalue"});
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.output, "--volume takes NAME=PATH"));
  auto cpus =
      run_command({launcher_binary(), "render", "--vmi", vmi("efi.yaml"), "--cpu-set", "x"});
  CHECK(cpus.exit_code == 2);
  auto q = run_command({launcher_binary(), "render", "--vmi", vmi("efi.yaml"), "--hypervisor",
                        "qemu-kvm", "--volume", "containerdisk=/images/alpine.img"});
  CHECK_MESSAGE(q.exit_code == 0, q.output);
  CHECK(contains(q.output, "<loader readonly='yes'"));  // EFI: OVMF (docs/qemu/daemon.md)
}

TEST_CASE("render: dedicated CPUs take --cpu-set") {
  auto r = run_command({launcher_binary(), "render", "--vmi", vmi("dedicated-cpus.yaml"),
                        "--volume", "containerdisk=/i.img", "--cpu-set", "10-13"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  auto j = nlohmann::json::parse(r.output);
  REQUIRE(j["cpus"]["affinity"].size() == 4);
  CHECK(j["cpus"]["affinity"][3]["host_cpus"] == nlohmann::json::array({13}));
  auto small = run_command({launcher_binary(), "render", "--vmi", vmi("dedicated-cpus.yaml"),
                            "--volume", "containerdisk=/i.img", "--cpu-set", "1"});
  CHECK(small.exit_code == 2);
  CHECK(contains(small.output, "needs 4 dedicated CPUs but the pod's CPU set has 1"));
}

TEST_CASE("overhead: itemized in Kubernetes quantities, per hypervisor") {
  auto r = run_command({launcher_binary(), "overhead", "--vmi", vmi("dedicated-cpus.yaml")});
  REQUIRE(r.exit_code == 0);
  // 30Mi launcher + 20Mi VMM + 4Gi/512 = 8Mi page tables + 16 x 8Mi vCPUs (4 boot vCPUs and
  // the hotplug headroom KubeVirt's defaulting gives them: maxSockets = 4 x sockets) = 186Mi
  CHECK(contains(r.output, "memory overhead of default/vmi-dedicated on cloud-hypervisor: 186Mi\n"));
  CHECK(contains(r.output, "page tables"));
  CHECK(contains(r.output, "8Mi"));
  auto q = run_command({launcher_binary(), "overhead", "--vmi", vmi("dedicated-cpus.yaml"),
                        "--hypervisor", "qemu-kvm", "--json"});
  REQUIRE(q.exit_code == 0);
  auto j = nlohmann::json::parse(q.output);
  // 30 + 25 + 40 + 30 + 8 + 128 (16 vCPUs) + 32 (video RAM: graphics attached by default) = 293Mi
  CHECK(j["total"] == "293Mi");
  auto bad = run_command({launcher_binary(), "overhead", "--vmi", "/nonexistent.yaml"});
  CHECK(bad.exit_code == 2);
}

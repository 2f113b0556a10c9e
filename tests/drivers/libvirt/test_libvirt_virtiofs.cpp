// virtio-fs on the qemu-kvm path, end to end (lane qemu): `ch-launcher run` with QEMU (TCG)
// through libvirt, the Linux test guest (Debian's cloud kernel, virtiofs.ko) booted directly,
// and Debian's real virtiofsd started by the test as KubeVirt's virtiofs-<name> containers start
// it (tests/support/virtiofsd.hpp), on directories standing for a PVC and a ConfigMap. The guest
// mounts each tag (tests/guests/linux/init, chl.virtiofs=): it reads the file the test wrote and
// writes one the test then reads on the host (the PVC), and reads the ConfigMap-shaped directory
// mounted read-only, where a write is refused.
#include "tests/support/linux_guest.hpp"
#include "tests/support/qemu_harness.hpp"
#include "tests/support/virtiofsd.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;

TEST_CASE(
    "qemu-kvm virtiofs: the guest mounts a PVC (reads, writes back) and a ConfigMap (read-only) by "
    "their names") {
  if (!chl::test::libvirt_runnable()) return;
  std::string why;
  auto guest = chl::test::find_linux_guest(&why);
  if (!guest) {
    chl::test::skip(why);
    return;
  }
  auto bin = chl::test::find_virtiofsd(&why);
  if (!bin) {
    chl::test::skip(why);
    return;
  }
  chl::test::QemuRun r;
  const fs::path kdir = r.dir.path() / "kernel";
  fs::create_directories(kdir);
  fs::copy_file(guest->kernel, kdir / "vmlinuz");
  fs::copy_file(guest->initramfs, kdir / "initrd.cpio.gz");

  // The PVC: a file from the host. The ConfigMap as the kubelet lays it out: the data in a
  // timestamped directory, ..data pointing at it, each key a symlink through ..data.
  const fs::path pvc = r.dir.path() / "pvc", cm = r.dir.path() / "config-map";
  fs::create_directories(pvc);
  chl::test::write_file(pvc / "hello.txt", "written by the test on the host\n");
  fs::create_directories(cm / "..2026_11_26_13_00_00.000000001");
  chl::test::write_file(cm / "..2026_11_26_13_00_00.000000001" / "app.properties", "color=blue\n");
  fs::create_directory_symlink("..2026_11_26_13_00_00.000000001", cm / "..data");
  fs::create_symlink("..data/app.properties", cm / "app.properties");

  const fs::path socks = r.dir.path() / "virtiofs-containers";
  fs::create_directories(socks);
  auto d_pvc =
      chl::test::start_virtiofsd(*bin, socks / "data.sock", pvc, r.dir.path() / "vfs-data.log");
  auto d_cm = chl::test::start_virtiofsd(*bin, socks / "settings.sock", cm,
                                         r.dir.path() / "vfs-settings.log");

  std::ofstream(r.vmi_file()) << R"(apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: testvm, namespace: default, uid: 7e2d4b1a-0000-4000-8000-0000000000f5}
spec:
  hypervisor: qemu-kvm
  terminationGracePeriodSeconds: 5
  domain:
    memory: {guest: 256Mi}
    firmware:
      kernelBoot:
        kernelArgs: "console=ttyS0 quiet panic=-1 chl.virtiofs=data:rw,settings:ro poweroff"
        container: {image: kernel-boot:latest, kernelPath: /vmlinuz, initrdPath: /initrd.cpio.gz}
    devices:
      autoattachGraphicsDevice: false
      autoattachPodInterface: false
      filesystems:
      - {name: data, virtiofs: {}}
      - {name: settings, virtiofs: {}}
  volumes:
  - {name: data, persistentVolumeClaim: {claimName: data}}
  - {name: settings, configMap: {name: app-settings}}
)";
  r.go({"--virtiofs-dir", socks.string(), "--virtiofs-wait", "10"});
  // The guest prints what it found and powers off: the launcher ends.
  auto exit = r.wait_exit(chl::test::kQemuStart);
  const std::string console = chl::test::read_file(r.state_dir() / "virt-serial0-log");
  REQUIRE_MESSAGE(exit, "launcher:\n" << r.output() << "\nguest:\n" << console);
  CHECK_MESSAGE(exit->code == 0, r.output());
  INFO("guest console:\n" << console << "\nlauncher:\n" << r.output());

  // The PVC: the host's file read in the guest, the guest's file on the host.
  CHECK(console.find("chl-guest: virtiofs data mounted (rw)") != std::string::npos);
  CHECK(console.find("----- chl-guest: file hello.txt (32 bytes) -----") != std::string::npos);
  CHECK(console.find("written by the test on the host") != std::string::npos);
  CHECK(console.find("chl-guest: virtiofs data: wrote from-guest.txt") != std::string::npos);
  CHECK(chl::test::read_file(pvc / "from-guest.txt") == "written by the guest through data\n");
  // The ConfigMap: its data read through the kubelet's layout, mounted read-only, not written.
  CHECK(console.find("chl-guest: virtiofs settings mounted (ro)") != std::string::npos);
  CHECK(console.find("..2026_11_26_13_00_00.000000001/app.properties (11 bytes)") !=
        std::string::npos);
  CHECK(console.find("color=blue") != std::string::npos);
  CHECK(console.find("chl-guest: virtiofs settings: write refused") != std::string::npos);
  CHECK_FALSE(fs::exists(cm / "from-guest.txt"));
  // The VM is gone, so are its vhost-user connections: both daemons end.
  CHECK(chl::test::wait_until(
      20s, [&] { return !d_pvc.running() && !d_cm.running(); }, 50ms));
}

// Fault-matrix rows against real QEMU through libvirt (lane qemu), for the rows the lifecycle
// tests (test_libvirt_lifecycle.cpp) do not already cover: the launcher SIGKILLed (libvirt's
// AUTODESTROY must end QEMU; a new launcher recovers the directory) and missing firmware.
// docs/reliability.md ("Against real QEMU") maps every matrix row to its real-QEMU test.
#include <signal.h>

#include <fstream>
#include <sstream>

#include "tests/ch_launcher/qemu_harness.hpp"

using chl::test::QemuRun;
using namespace std::chrono_literals;

namespace {

// An EFI VMI (no Secure Boot) with one 1 MiB raw root disk; returns the disk's path.
std::filesystem::path write_efi_vmi(chl::test::QemuRun& r) {
  const auto disk = r.dir.path() / "disk" / "root.img";
  std::filesystem::create_directories(disk.parent_path());
  chl::test::write_file(disk, std::string(1 << 20, '\0'));
  chl::test::write_file(
      r.vmi_file(),
      "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata:\n  name: testvm\n"
      "  namespace: default\n  uid: 6a1f3c2e-0000-4000-8000-00000000abcd\n"
      "spec:\n  hypervisor: qemu-kvm\n  domain:\n    cpu:\n      cores: 1\n"
      "    memory:\n      guest: 64Mi\n    firmware:\n      bootloader:\n        efi:\n"
      "          secureBoot: false\n    devices:\n      autoattachPodInterface: false\n"
      "      autoattachGraphicsDevice: false\n"
      "      disks:\n      - name: rootdisk\n        disk:\n          bus: virtio\n"
      "  volumes:\n  - name: rootdisk\n    containerDisk:\n      image: demo/rootdisk:latest\n");
  return disk;
}

}  // namespace

TEST_CASE("qemu-kvm fault: missing OVMF is refused before libvirt or QEMU is involved, exit 1") {
  if (!chl::test::libvirt_runnable()) return;
  QemuRun r;
  const auto fw = r.dir.path() / "firmware";
  std::filesystem::create_directories(fw);
  const auto disk = write_efi_vmi(r);
  r.go({"--firmware-dir", fw.string(), "--volume", "rootdisk=" + disk.string()});
  auto exit = r.wait_exit(60s);
  REQUIRE_MESSAGE(exit, r.output());
  CHECK_MESSAGE(exit->code == 1, r.output());
  const std::string out = r.output();
  for (const char* text :
       {"UEFI firmware (OVMF) for qemu-kvm not found", "OVMF_CODE_4M.fd", "--firmware-dir"})
    CHECK_MESSAGE(out.find(text) != std::string::npos, text << " in:\n" << out);
  // Nothing was started: no domain, no libvirt driver message, no VM files.
  CHECK(out.find("launching ") == std::string::npos);
  CHECK(QemuRun::domain_gone());
  r.check_clean_qemu(-1);
}

TEST_CASE(
    "qemu-kvm fault: launcher SIGKILLed - AUTODESTROY ends QEMU, a new launcher recovers, nothing "
    "left") {
  if (!chl::test::libvirt_runnable()) return;
  QemuRun r;
  r.write_vmi("console=ttyS0");
  {
    // With the graphics device (KubeVirt's default): QEMU's VNC socket in the state directory.
    std::stringstream in;
    in << std::ifstream(r.vmi_file()).rdbuf();
    std::string text = in.str();
    const std::string off = "      autoattachGraphicsDevice: false\n";
    REQUIRE(text.find(off) != std::string::npos);
    text.erase(text.find(off), off.size());
    chl::test::write_file(r.vmi_file(), text);
  }
  r.go();
  REQUIRE(r.running());
  const long pid = r.qemu_pid();
  REQUIRE(pid > 0);
  CHECK(std::filesystem::exists(r.state_dir() / "virt-vnc"));
  REQUIRE(r.child.signal(SIGKILL));
  auto killed = r.wait_exit(30s);
  REQUIRE(killed);
  CHECK(killed->signal == SIGKILL);
  // The launcher's libvirt connection closed: libvirtd destroys the AUTODESTROY domain.
  CHECK_MESSAGE(chl::test::wait_until(
                    60s, [&] { return !chl::core::process_alive(static_cast<pid_t>(pid)); }),
                "QEMU pid " << pid << " outlived its launcher");
  CHECK(chl::test::wait_until(30s, [] { return QemuRun::domain_gone(); }));
  CHECK(
      std::filesystem::exists(r.state_dir() / "vmm.pid"));  // the dead launcher's, for the next one

  // A new launcher on the same directory recovers it and runs the VM again.
  r.go();
  REQUIRE(r.running());
  const long pid2 = r.qemu_pid();
  CHECK(r.output().find("recovered state directory") != std::string::npos);
  CHECK(r.console("", "ready", 60s).find("ready") != std::string::npos);
  auto s = r.cli({"stop"});
  CHECK_MESSAGE(s.exit_code == 0, s.output);
  auto exit = r.wait_exit(120s);
  REQUIRE_MESSAGE(exit, r.output());
  CHECK_MESSAGE(exit->code == 0, r.output());
  r.check_clean_qemu(pid2);  // no virt-vnc either
}

TEST_CASE(
    "qemu-kvm: an EFI VMI starts on the OVMF found (code and its variable store), kill ends it") {
  if (!chl::test::libvirt_runnable()) return;
  if (!std::filesystem::exists("/usr/share/OVMF/OVMF_CODE_4M.fd") &&
      !std::filesystem::exists("/usr/share/OVMF/OVMF_CODE.fd"))
    return chl::test::skip("no OVMF in /usr/share/OVMF (Debian package ovmf)");
  QemuRun r;
  const auto disk = write_efi_vmi(r);
  r.go({"--volume", "rootdisk=" + disk.string()});
  REQUIRE(r.running());  // OVMF runs (no bootable disk: it stays in its boot manager)
  const long pid = r.qemu_pid();
  const std::string out = r.output();
  // The code flash and the variable store are a matching pair from the same search.
  const bool four_mib = out.find("OVMF_CODE_4M.fd") != std::string::npos;
  CHECK(out.find(four_mib ? "OVMF_VARS_4M.fd" : "OVMF_VARS.fd") != std::string::npos);
  auto k = r.cli({"kill"});
  CHECK_MESSAGE(k.exit_code == 0, k.output);
  auto exit = r.wait_exit(120s);
  REQUIRE_MESSAGE(exit, r.output());
  CHECK_MESSAGE(exit->code == 4, r.output());
  CHECK(std::filesystem::exists(r.state_dir() / "efi-vars.fd"));  // the VM's NVRAM, kept
  r.check_clean_qemu(pid, {"efi-vars.fd", "container-disks"});
}

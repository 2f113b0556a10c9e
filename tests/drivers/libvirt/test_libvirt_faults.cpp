// Fault-matrix rows against real QEMU through libvirt (lane qemu), for the rows the lifecycle
// tests (test_libvirt_lifecycle.cpp) do not already cover: the launcher SIGKILLed (libvirt's
// AUTODESTROY must end QEMU; a new launcher recovers the directory) and missing firmware.
// docs/reliability.md ("Against real QEMU") maps every matrix row to its real-QEMU test.
#include <signal.h>

#include <fstream>
#include <sstream>

#include "tests/support/qemu_harness.hpp"

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
                    60s, [&] { return !chl::libvirt::process_alive(static_cast<pid_t>(pid)); }),
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

TEST_CASE(
    "qemu-kvm fault: a domain of the VMI's name run by another live launcher, or not started by "
    "ch-launcher, is left alone: exit 1 naming it") {
  if (!chl::test::libvirt_runnable()) return;
  QemuRun a;
  a.write_vmi("console=ttyS0");
  a.go();
  REQUIRE(a.running());
  const long pid = a.qemu_pid();
  REQUIRE(pid > 0);

  // A second launcher for the same VMI in another state directory (its lock does not stop it).
  QemuRun b;
  b.write_vmi("console=ttyS0");
  b.go();
  auto b_exit = b.wait_exit(120s);
  REQUIRE_MESSAGE(b_exit, b.output());
  CHECK_MESSAGE(b_exit->code == 1, b.output());
  CHECK_MESSAGE(b.output().find("a domain default_testvm is run by another live launcher (state "
                                "directory " + a.state_dir().string() + ")") != std::string::npos,
                b.output());
  CHECK(a.domain().value("state", "") == "Running");
  CHECK(chl::libvirt::process_alive(static_cast<pid_t>(pid)));

  // A domain of the name someone else started (no ch-launcher metadata): never destroyed.
  const auto foreign = a.dir.path() / "foreign.xml";
  chl::test::write_file(foreign,
                        "<domain type='qemu'><name>default_othervm</name>"
                        "<memory unit='MiB'>32</memory>"
                        "<os><type arch='x86_64' machine='q35'>hvm</type></os></domain>\n");
  auto created = chl::test::run_command({"virsh", "-c", "qemu:///system", "create", foreign.string()});
  REQUIRE_MESSAGE(created.exit_code == 0, created.output);
  QemuRun c;
  c.write_vmi("console=ttyS0", 30, "othervm");
  c.go();
  auto c_exit = c.wait_exit(120s);
  REQUIRE_MESSAGE(c_exit, c.output());
  CHECK_MESSAGE(c_exit->code == 1, c.output());
  CHECK_MESSAGE(c.output().find("a domain default_othervm exists that ch-launcher did not start") !=
                    std::string::npos,
                c.output());
  auto state = chl::test::run_command({"virsh", "-c", "qemu:///system", "domstate", "default_othervm"});
  CHECK_MESSAGE(state.output.find("running") != std::string::npos, state.output);
  auto destroyed =
      chl::test::run_command({"virsh", "-c", "qemu:///system", "destroy", "default_othervm"});
  CHECK_MESSAGE(destroyed.exit_code == 0, destroyed.output);

  auto s = a.cli({"stop"});
  CHECK_MESSAGE(s.exit_code == 0, s.output);
  auto a_exit = a.wait_exit(120s);
  REQUIRE_MESSAGE(a_exit, a.output());
  CHECK_MESSAGE(a_exit->code == 0, a.output());
  a.check_clean_qemu(pid);
}

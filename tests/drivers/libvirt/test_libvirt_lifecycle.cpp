// ch-launcher run on qemu-kvm, end to end through its CLI: real QEMU through a real libvirtd
// (started by the launcher when none answers), the project's PVH guest under TCG (KVM here is
// nested PVM: accel_probe.hpp). The same contract as the Cloud Hypervisor lifecycle tests
// (test_launcher_lifecycle.cpp): states and reasons, console, exit codes, nothing left behind.
// No timing assertions: libvirtd's first start probes QEMU (tens of seconds on a busy machine).
#include <signal.h>
#include <unistd.h>

#include "tests/support/qemu_harness.hpp"

using chl::test::libvirt_runnable;
using chl::test::QemuRun;
using nlohmann::json;
using namespace std::chrono_literals;

TEST_CASE(
    "qemu-kvm run: lifecycle through the CLI, console banner and echo, ends Shutoff with exit 0") {
  if (!libvirt_runnable()) return;
  QemuRun r;
  r.write_vmi("console=ttyS0");
  r.go();
  REQUIRE(r.running());
  json d = r.domain();
  CHECK(d["reason"] == "Booted");
  CHECK(d["hypervisor"] == "qemu-kvm");
  CHECK(d["vmm"]["accel"] == "tcg");
  long pid = r.qemu_pid();
  CHECK(pid > 0);
  // The launcher confined itself with its qemu-kvm policy (the common list plus the libvirt
  // additions), and the kernel agrees (Seccomp: 2, filter mode). Everything below runs under it.
  CHECK(d["seccomp"] == "enforce");
  auto sj = r.cli({"status", "--json"});
  CHECK(sj.exit_code == 0);
  CHECK_MESSAGE(json::parse(sj.output, nullptr, false).value("seccomp", "") == "enforce", sj.output);
  {
    auto text = chl::test::read_file("/proc/" + std::to_string(r.child.pid()) + "/status");
    auto at = text.find("Seccomp:");
    REQUIRE(at != std::string::npos);
    CHECK(text.substr(at + 8, text.find('\n', at) - at - 8).find('2') != std::string::npos);
  }
  CHECK(r.output().find("seccomp: launcher confined (enforce, libvirt policy") != std::string::npos);

  auto st = r.cli({"status"});
  CHECK(st.exit_code == 0);
  CHECK_MESSAGE(st.output.find("default/testvm on qemu-kvm: Running (Booted)") != std::string::npos,
                st.output);

  // The banner is in the scrollback (the guest's first lines were not lost before the bridge
  // attached), and typed input is echoed.
  CHECK(r.console("", "ready", 60s).find("ready") != std::string::npos);
  auto first = r.console("hello-qemu\r", "hello-qemu", 30s);
  CHECK_MESSAGE(first.find("ch-launcher PVH test guest: hello from COM1") != std::string::npos,
                first);
  CHECK_MESSAGE(first.find("cmdline: console=ttyS0") != std::string::npos, first);
  CHECK(first.find("hello-qemu") != std::string::npos);

  auto p = r.cli({"pause"});
  CHECK_MESSAGE(p.exit_code == 0, p.output);
  CHECK(r.wait_state("Paused", 60s));
  CHECK(r.domain()["reason"] == "User");
  auto again = r.cli({"pause"});
  CHECK(again.exit_code == 1);
  CHECK(again.output.find("cannot pause: the VM is Paused, not Running") != std::string::npos);

  CHECK(r.cli({"resume"}).exit_code == 0);
  CHECK(r.wait_state("Running", 60s));
  CHECK(r.domain()["reason"] == "Unpaused");

  // Reboot (a reset): the guest boots again on the same console.
  CHECK(r.cli({"reboot"}).exit_code == 0);
  CHECK(chl::test::wait_until(
      60s,
      [&] {
        auto log = chl::test::read_file(r.state_dir() / "virt-serial0-log");
        std::size_t n = 0;
        for (auto pos = log.find("hello from COM1"); pos != std::string::npos;
             pos = log.find("hello from COM1", pos + 1))
          ++n;
        return n >= 2;
      },
      100ms));
  CHECK(r.wait_state("Running", 60s));
  std::string after;
  CHECK(chl::test::wait_until(
      60s,
      [&] {
        after = r.console("hello-after\r", "hello-after", 1s);
        return after.find("hello-after") != std::string::npos;
      },
      100ms));

  // Unsupported operations say so, and change nothing.
  auto snap = r.cli({"snapshot", "--dir", (r.dir.path() / "snap").string()});
  CHECK(snap.exit_code != 0);
  CHECK_MESSAGE(snap.output.find("not supported by qemu-kvm") != std::string::npos, snap.output);
  CHECK(r.domain()["state"] == "Running");

  auto stop = r.cli({"stop", "--grace-period", "60"});
  CHECK_MESSAGE(stop.exit_code == 0, stop.output);
  auto exit = r.wait_exit(120s);
  REQUIRE(exit);
  CHECK_MESSAGE(exit->exited, r.output());
  CHECK_MESSAGE(exit->code == 0, r.output());
  CHECK(r.output().find("VM ended: state Shutoff reason Shutdown") != std::string::npos);
  r.check_clean_qemu(pid);
}

TEST_CASE("qemu-kvm run: the guest powering itself off ends the launcher with exit 0") {
  if (!libvirt_runnable()) return;
  QemuRun r;
  r.write_vmi("console=ttyS0 poweroff");
  r.go();
  auto exit = r.wait_exit(chl::test::kQemuStart);
  REQUIRE_MESSAGE(exit, r.output());
  CHECK_MESSAGE(exit->code == 0, r.output());
  CHECK(r.output().find("VM ended: state Shutoff reason Shutdown") != std::string::npos);
  r.check_clean_qemu(-1);
}

TEST_CASE("qemu-kvm run: a guest panic is reported Crashed (Panicked), exit 3") {
  if (!libvirt_runnable()) return;
  QemuRun r;
  r.write_vmi("console=ttyS0");
  r.go();
  REQUIRE(r.running());
  long pid = r.qemu_pid();
  CHECK(r.console("", "ready", 60s).find("ready") != std::string::npos);
  r.console("panic\r", "panic", 5s);
  auto exit = r.wait_exit(120s);
  REQUIRE_MESSAGE(exit, r.output());
  CHECK_MESSAGE(exit->code == 3, r.output());
  CHECK_MESSAGE(r.output().find("VM ended: state Crashed reason Panicked") != std::string::npos,
                r.output());
  r.check_clean_qemu(pid);
}

TEST_CASE("qemu-kvm run: QEMU killed from outside is Crashed, exit 3") {
  if (!libvirt_runnable()) return;
  QemuRun r;
  r.write_vmi("console=ttyS0");
  r.go();
  REQUIRE(r.running());
  long pid = r.qemu_pid();
  REQUIRE(pid > 0);
  REQUIRE(::kill(static_cast<pid_t>(pid), SIGKILL) == 0);
  auto exit = r.wait_exit(120s);
  REQUIRE_MESSAGE(exit, r.output());
  CHECK_MESSAGE(exit->code == 3, r.output());
  CHECK_MESSAGE(r.output().find("VM ended: state Crashed reason Unknown") != std::string::npos,
                r.output());
  r.check_clean_qemu(pid);
}

TEST_CASE("qemu-kvm run: SIGTERM presses the power button and a cooperative guest stops cleanly") {
  if (!libvirt_runnable()) return;
  QemuRun r;
  r.write_vmi("console=ttyS0");
  r.go();
  REQUIRE(r.running());
  long pid = r.qemu_pid();
  CHECK(r.console("", "ready", 60s).find("ready") != std::string::npos);
  REQUIRE(r.child.signal(SIGTERM));
  auto exit = r.wait_exit(120s);
  REQUIRE_MESSAGE(exit, r.output());
  CHECK_MESSAGE(exit->code == 0, r.output());
  CHECK(chl::test::read_file(r.state_dir() / "virt-serial0-log").find("ACPI power button") !=
        std::string::npos);
  r.check_clean_qemu(pid);
}

TEST_CASE(
    "qemu-kvm run: SIGTERM with a guest that ignores the power button forces it off after the "
    "grace period") {
  if (!libvirt_runnable()) return;
  QemuRun r;
  r.write_vmi("console=ttyS0 ignore-acpi", 3);
  r.go();
  REQUIRE(r.running());
  long pid = r.qemu_pid();
  CHECK(r.console("", "ready", 60s).find("ready") != std::string::npos);
  REQUIRE(r.child.signal(SIGTERM));
  auto exit = r.wait_exit(120s);
  REQUIRE_MESSAGE(exit, r.output());
  CHECK_MESSAGE(exit->code == 4, r.output());
  CHECK(r.output().find("the guest did not power off within the grace period") !=
        std::string::npos);
  CHECK(r.output().find("VM ended: state Shutoff reason Destroyed") != std::string::npos);
  CHECK(
      chl::test::read_file(r.state_dir() / "virt-serial0-log").find("ignoring the power button") !=
      std::string::npos);
  r.check_clean_qemu(pid);
}

TEST_CASE("qemu-kvm run: kill forces the VM off at once, exit 4") {
  if (!libvirt_runnable()) return;
  QemuRun r;
  r.write_vmi("console=ttyS0");
  r.go();
  REQUIRE(r.running());
  long pid = r.qemu_pid();
  auto k = r.cli({"kill"});
  CHECK_MESSAGE(k.exit_code == 0, k.output);
  auto exit = r.wait_exit(120s);
  REQUIRE_MESSAGE(exit, r.output());
  CHECK_MESSAGE(exit->code == 4, r.output());
  CHECK(r.output().find("VM ended: state Shutoff reason Destroyed") != std::string::npos);
  r.check_clean_qemu(pid);
}

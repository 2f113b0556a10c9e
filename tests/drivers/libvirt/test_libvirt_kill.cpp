// ch-launcher run on qemu-kvm (real libvirtd and QEMU, the PVH guest under TCG): Kill is final
// and SIGTERM bounded whatever is pending, and the libvirt daemons a SIGKILLed launcher started
// end by themselves (issue #34). The scenarios are shared with Cloud Hypervisor
// (tests/support/kill_scenarios.hpp, tests/launcher/test_launcher_kill.cpp).
#include <sys/file.h>

#include "tests/support/kill_scenarios.hpp"
#include "tests/support/qemu_harness.hpp"

using chl::test::QemuRun;
namespace ks = chl::test::kill_scenarios;
using namespace std::chrono_literals;

namespace {
// The deaf guest running; QEMU's pid.
long up(QemuRun& r) {
  r.write_vmi("console=ttyS0 ignore-acpi");
  r.go();
  REQUIRE(r.running());
  return r.qemu_pid();
}
}  // namespace

TEST_CASE(
    "qemu-kvm run kill: stop, then kill before the grace period ends: destroyed at once, exit 4") {
  if (!chl::test::libvirt_runnable()) return;
  QemuRun r;
  const long pid = up(r);
  ks::shutdown_then_kill(r, pid);
  r.check_clean_qemu(pid);
}

TEST_CASE("qemu-kvm run kill: kill twice, exit 4") {
  if (!chl::test::libvirt_runnable()) return;
  QemuRun r;
  const long pid = up(r);
  ks::kill_twice(r, pid);
  r.check_clean_qemu(pid);
}

TEST_CASE("qemu-kvm run kill: kill, then SIGTERM, exit 4") {
  if (!chl::test::libvirt_runnable()) return;
  QemuRun r;
  const long pid = up(r);
  ks::kill_then_sigterm(r, pid);
  r.check_clean_qemu(pid);
}

TEST_CASE("qemu-kvm run kill: SIGTERM during a pending graceful stop forces it, exit 4") {
  if (!chl::test::libvirt_runnable()) return;
  QemuRun r;
  const long pid = up(r);
  ks::sigterm_during_graceful_stop(r, pid);
  r.check_clean_qemu(pid);
}

TEST_CASE(
    "qemu-kvm run kill: the launcher SIGKILLed: QEMU, libvirtd and virtlogd it started all end") {
  if (!chl::test::libvirt_runnable()) return;
  QemuRun r;
  const long pid = up(r);
  const std::filesystem::path run_dir = "/run/ch-launcher/libvirt";
  if (r.output().find("started by this launcher") == std::string::npos)
    return chl::test::skip(
        "the libvirt daemons were not started by this launcher (another one runs them)");
  const auto libvirtd = chl::libvirt::live_pid_from_file(run_dir / "libvirtd.pid");
  const auto virtlogd = chl::libvirt::live_pid_from_file(run_dir / "virtlogd.pid");
  REQUIRE(libvirtd);
  REQUIRE(virtlogd);
  REQUIRE(r.child.signal(SIGKILL));
  auto killed = r.wait_exit(30s);
  REQUIRE(killed);
  CHECK(killed->signal == SIGKILL);
  // Another launcher on these daemons (a test run beside this one) keeps them, rightly.
  {
    chl::common::UniqueFd lock(::open((run_dir / "daemons.lock").c_str(), O_RDWR | O_CLOEXEC));
    if (lock && ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
      CHECK(chl::test::wait_until(
          60s, [&] { return !chl::libvirt::process_alive(static_cast<pid_t>(pid)); }));
      return chl::test::skip("other launchers use the libvirt daemons: they rightly stay");
    }
  }
  // AUTODESTROY ends QEMU when the launcher's connection closes; the daemons, idle, end by
  // themselves (--timeout 5).
  for (auto [p, what] : {std::pair{static_cast<pid_t>(pid), "QEMU"},
                         std::pair{*libvirtd, "libvirtd"}, std::pair{*virtlogd, "virtlogd"}})
    CHECK_MESSAGE(chl::test::wait_until(60s, [p = p] { return !chl::libvirt::process_alive(p); }),
                  what << " (pid " << p << ") outlived the SIGKILLed launcher");
  CHECK(QemuRun::domain_gone());
}

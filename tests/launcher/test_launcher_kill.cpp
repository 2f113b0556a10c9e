// ch-launcher run on Cloud Hypervisor (the VMM double, or a real cloud-hypervisor): Kill is
// final and SIGTERM bounded whatever is pending (issue #34); the scenarios are shared with the
// libvirt path (tests/support/kill_scenarios.hpp, tests/drivers/libvirt/test_libvirt_kill.cpp).
#include "tests/support/kill_scenarios.hpp"

using chl::test::LauncherRun;
namespace ks = chl::test::kill_scenarios;

namespace {
// The deaf guest running; its VMM's pid.
long up(LauncherRun& r) {
  r.write_vmi("console=ttyS0 ignore-acpi");
  r.start();
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  auto d = r.domain();
  return d.contains("vmm") && d["vmm"].contains("pid") ? d["vmm"]["pid"].get<long>() : -1;
}
}  // namespace

TEST_CASE("run kill: stop, then kill before the grace period ends: forced off at once, exit 4") {
  LauncherRun r;
  const long pid = up(r);
  ks::shutdown_then_kill(r, pid);
  r.check_clean(pid);
}

TEST_CASE("run kill: kill twice, exit 4") {
  LauncherRun r;
  const long pid = up(r);
  ks::kill_twice(r, pid);
  r.check_clean(pid);
}

TEST_CASE("run kill: kill, then SIGTERM, exit 4") {
  LauncherRun r;
  const long pid = up(r);
  ks::kill_then_sigterm(r, pid);
  r.check_clean(pid);
}

TEST_CASE("run kill: SIGTERM during a pending graceful stop forces it, exit 4") {
  LauncherRun r;
  const long pid = up(r);
  ks::sigterm_during_graceful_stop(r, pid);
  r.check_clean(pid);
}

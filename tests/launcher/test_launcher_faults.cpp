// The launcher under a VMM's faults: each ends in the right state and reason, with the right
// exit code, no orphan VMM and no socket left. Against the VMM double the faults are its
// injections (docs/vmm-double.md); against a real cloud-hypervisor (CLOUD_HYPERVISOR_BIN) each
// fault is caused for real (a kernel CH cannot load, SIGKILL of the VMM process, SIGKILL of the
// launcher). The faults a real CH v52 never produces, or whose window cannot be hit from outside
// it, are in test_launcher_injected_faults.cpp (lane double: the double's knobs only).
#include <signal.h>

#include "tests/support/launcher_harness.hpp"

using chl::test::LauncherRun;
using nlohmann::json;

namespace {
long vmm_pid(const json& d) { return d.contains("vmm") && d["vmm"].contains("pid") ? d["vmm"]["pid"].get<long>() : -1; }
// The real VMM's pid from the launcher's domain (Running), killed by `sig`.
long kill_real_vmm(LauncherRun& r, int sig) {
  const long pid = vmm_pid(r.domain());
  REQUIRE(pid > 0);
  REQUIRE(::kill(static_cast<pid_t>(pid), sig) == 0);
  return pid;
}
}  // namespace

TEST_CASE("fault: 500 on vm.boot fails the launch with CH's message, exit 1") {
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  if (chl::test::using_real_vmm()) {
    // A real CH answers 500 on vm.boot for a kernel it cannot load: vm.create only stores the
    // config (vmm/src/lib.rs vm_create), vm.boot loads the kernel (Vm::new, load_kernel) and
    // fails with ApiError::VmBoot, "The VM could not boot" (vmm/src/api/mod.rs).
    chl::test::write_file(r.dir.path() / "kernel" / "guest.elf", std::string(4096, 'x'));
    r.start();
  } else {
    r.start({}, r.vmm_with_env({{"VMM_DOUBLE_FAIL", "vm.boot"}}));
  }
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK(exit->code == 1);
  CHECK(r.output().find("booting the VM: PUT vm.boot: HTTP 500: Error from API: The VM could not boot") != std::string::npos);
  r.check_clean(-1);
}

TEST_CASE("fault: the VMM dying while running is Crashed, exit 3") {
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  if (chl::test::using_real_vmm()) {
    r.start();
    REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
    kill_real_vmm(r, SIGKILL);
  } else {
    r.start({}, r.vmm_with_env({{"VMM_DOUBLE_CRASH_AT", "running"}, {"VMM_DOUBLE_PHASE_DELAY_MS", "300"}}));
  }
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK_MESSAGE(exit->code == 3, r.output());
  CHECK(r.output().find("VM ended: state Crashed") != std::string::npos);
  r.check_clean(-1);
}

TEST_CASE("fault: the VMM dying while paused is Crashed, exit 3") {
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  const bool real = chl::test::using_real_vmm();
  if (real)
    r.start();
  else
    r.start({}, r.vmm_with_env({{"VMM_DOUBLE_CRASH_AT", "paused"}, {"VMM_DOUBLE_PHASE_DELAY_MS", "200"}}));
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  CHECK(r.cli({"pause"}).exit_code == 0);
  if (real) {
    REQUIRE_MESSAGE(r.wait_state("Paused"), r.output());
    kill_real_vmm(r, SIGKILL);
  }
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK_MESSAGE(exit->code == 3, r.output());
  r.check_clean(-1);
}

TEST_CASE("fault: SIGKILL of the launcher takes the VMM with it, and a new launcher recovers the directory") {
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  r.start();
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  long pid = vmm_pid(r.domain());
  REQUIRE(pid > 0);
  REQUIRE(r.child.signal(SIGKILL));
  r.wait_exit();
  // PR_SET_PDEATHSIG: the VMM dies with its launcher.
  CHECK(chl::test::wait_until(std::chrono::seconds(5), [&] { return ::kill(static_cast<pid_t>(pid), 0) != 0; }));
  CHECK(std::filesystem::exists(r.state_dir() / "vmm.pid"));  // left behind by the dead launcher
  LauncherRun again;
  // Same state directory and VMI: start the second launcher on r's files.
  r.start();
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  CHECK(r.output().find("recovered state directory") != std::string::npos);
  CHECK(r.cli({"stop"}).exit_code == 0);
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK(exit->code == 0);
}


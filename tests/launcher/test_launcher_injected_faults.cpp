// The launcher under the faults only the VMM double can give (lane double, beside vmm in
// scripts/test.sh's vmm lane; never run against a real Cloud Hypervisor): a real CH v52 never
// produces them, or their window cannot be hit from outside it (each case says which, its CH
// source cited). Each still ends in the right state and reason, with the right exit code, no
// orphan VMM and no socket left. The faults a real CH can be given are test_launcher_faults.cpp.
#include <signal.h>

#include "tests/support/launcher_harness.hpp"

using chl::test::LauncherRun;
using nlohmann::json;

namespace {
long vmm_pid(const json& d) { return d.contains("vmm") && d["vmm"].contains("pid") ? d["vmm"]["pid"].get<long>() : -1; }
}  // namespace

TEST_CASE("fault: the VMM crashing after create fails the launch, exit 1") {
  // The double's only: the window between the launcher's vm.create and its vm.boot cannot be hit
  // from outside a real Cloud Hypervisor (no hook between the two calls): the VMM killed while
  // running is test_launcher_faults.cpp's.
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  r.start({}, r.vmm_with_env({{"VMM_DOUBLE_CRASH_AT", "create"}}));
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK(exit->code == 1);
  CHECK(r.output().find("creating the VM") != std::string::npos);
  r.check_clean(-1);
}

TEST_CASE("fault: a hung vm.create times out, the VMM is stopped, exit 1") {
  // The double's only: a real Cloud Hypervisor cannot be made to hang on vm.create alone from
  // outside it (SIGSTOP would hang its vmm.ping first).
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  r.start({}, r.vmm_with_env({{"VMM_DOUBLE_HANG", "vm.create"}}));
  auto exit = r.wait_exit(std::chrono::seconds(90));
  REQUIRE(exit);
  CHECK(exit->code == 1);
  CHECK(r.output().find("creating the VM") != std::string::npos);
  r.check_clean(-1);
}

TEST_CASE("fault: garbage in the event stream is skipped, states still right") {
  // The double's only: Cloud Hypervisor v52 writes only serde JSON events to its monitor
  // (event_monitor/src/lib.rs event_log, serde_json::to_string_pretty): garbage there is a fault of
  // the double only.
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  r.start({}, r.vmm_with_env({{"VMM_DOUBLE_GARBAGE_EVENTS", "1"}}));
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  CHECK(r.cli({"pause"}).exit_code == 0);
  CHECK(r.wait_state("Paused"));
  CHECK(r.cli({"resume"}).exit_code == 0);
  CHECK(r.wait_state("Running"));
  CHECK(r.cli({"stop"}).exit_code == 0);
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK(exit->code == 0);
}

TEST_CASE("fault: the VMM exiting 0 without any event is a clean shutdown (CH's lost event tail), exit 0") {
  // A real Cloud Hypervisor v52 does this under load: it exits 0 through vmm_shutdown, whose events
  // its unjoined monitor thread never wrote (cloud-hypervisor/src/main.rs); seen once in the
  // real-ch lane under a CPU hog. It cannot be provoked on demand there. The double's only: a real
  // Cloud Hypervisor loses its event tail at exit only by chance, under load
  // (cloud-hypervisor/src/main.rs does not join its event-monitor thread): the double's
  // VMM_DOUBLE_EXIT_WITHOUT_EVENTS does it every time.
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  r.start({}, r.vmm_with_env({{"VMM_DOUBLE_EXIT_WITHOUT_EVENTS", "running"}, {"VMM_DOUBLE_PHASE_DELAY_MS", "300"}}));
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK_MESSAGE(exit->code == 0, r.output());
  CHECK_MESSAGE(r.output().find("without its shutdown events") != std::string::npos, r.output());
  r.check_clean(-1);
}

TEST_CASE("fault: the event monitor closing under a live VMM ends the VMM, Shutoff/Failed, exit 3") {
  // The double's only: Cloud Hypervisor v52 keeps its event monitor's file open until it exits
  // (event_monitor/src/lib.rs set_monitor): it cannot be closed under a live VMM from outside it.
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  r.start({}, r.vmm_with_env({{"VMM_DOUBLE_CLOSE_EVENTS_AT", "running"}, {"VMM_DOUBLE_PHASE_DELAY_MS", "300"}}));
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  long pid = vmm_pid(r.domain());
  REQUIRE(pid > 0);
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK_MESSAGE(exit->code == 3, r.output());
  const std::string out = r.output();
  // The double closed its monitor and ran on; the launcher noticed, said why, and ended it.
  CHECK(chl::test::read_file(r.state_dir() / "vmm.log").find("VMM_DOUBLE_CLOSE_EVENTS_AT=running") != std::string::npos);
  CHECK_MESSAGE(out.find("the event monitor closed while VMM pid " + std::to_string(pid) + " still runs") != std::string::npos, out);
  CHECK_MESSAGE(out.find("launcher/event-monitor-lost") != std::string::npos, out);
  CHECK_MESSAGE(out.find("killing VMM pid " + std::to_string(pid)) != std::string::npos, out);
  CHECK_MESSAGE(out.find("VM ended: state Shutoff reason Failed, launcher exits 3") != std::string::npos, out);
  r.check_clean(pid);
}

TEST_CASE("fault: a stop between the VMM's booted event and its boot answer still presses the power button") {
  // The double's only: a real Cloud Hypervisor answers vm.boot right after writing vm/booted
  // (vmm/src/lib.rs vm_boot): that window cannot be widened from outside it.
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  // Running is reported from vm/booted at once; the answer to vm.boot comes 1.5 s later.
  r.start({}, r.vmm_with_env({{"VMM_DOUBLE_BOOT_ANSWER_DELAY_MS", "1500"}}));
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  const long pid = vmm_pid(r.domain());
  REQUIRE(r.child.signal(SIGTERM));
  auto exit = r.wait_exit();
  REQUIRE(exit);
  // The guest was asked, not forced: it powered off, Shutoff (Shutdown), exit 0.
  CHECK_MESSAGE(exit->code == 0, r.output());
  CHECK(r.output().find("pressing the ACPI power button") != std::string::npos);
  CHECK_MESSAGE(r.output().find("VM ended: state Shutoff reason Shutdown") != std::string::npos, r.output());
  r.check_clean(pid);
}

TEST_CASE("fault: the VMM's events lagging its answers: pause and resume answer in the state they caused") {
  // The double's only, as a fault: Cloud Hypervisor v52 answers vm.pause/vm.resume before its
  // event-monitor thread writes vm/paused/vm/resumed (event_monitor/src/lib.rs: event_log() sends
  // on a channel), a gap the real CH shows only by chance, under load (the real-ch lane in CI saw
  // "reboot" right after "resume" refused with the VM still Paused). The double holds every event
  // 400 ms: each answer must still come with the state it caused, as libvirt's do.
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  r.start({}, r.vmm_with_env({{"VMM_DOUBLE_EVENT_LAG_MS", "400"}}));
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  auto p = r.cli({"pause"});
  CHECK_MESSAGE(p.exit_code == 0, p.output);
  auto st = r.cli({"status"});
  CHECK_MESSAGE(st.output.find(": Paused (User)") != std::string::npos, st.output);
  auto again = r.cli({"pause"});
  CHECK(again.exit_code == 1);
  CHECK(again.output.find("the VM is Paused, not Running") != std::string::npos);
  CHECK(r.cli({"resume"}).exit_code == 0);
  auto reboot = r.cli({"reboot"});  // at once: the VM must be Running for it
  CHECK_MESSAGE(reboot.exit_code == 0, reboot.output);
  CHECK(r.wait_state("Running"));
  auto stop = r.cli({"stop"});
  CHECK_MESSAGE(stop.output.find("Shutoff (Shutdown)") != std::string::npos, stop.output);
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK_MESSAGE(exit->code == 0, r.output());
  CHECK(r.output().find("\"level\":\"error\"") == std::string::npos);
}

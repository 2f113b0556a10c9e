#pragma once
// `ch-launcher run` and Kill/SIGTERM, whatever is pending (issue #34): the scenarios shared by
// tests/launcher/test_launcher_kill.cpp (Cloud Hypervisor) and
// tests/drivers/libvirt/test_libvirt_kill.cpp (QEMU through libvirt). The guest ignores the
// power button (`ignore-acpi`), so only a forced stop ends it. Each ends with `run`'s documented
// exit 4 (forced off, docs/launcher.md), Shutoff (Destroyed) as the last state, a bounded exit
// and the VMM gone.
#include <signal.h>

#include <chrono>
#include <thread>

#include "control/command_client.hpp"
#include "tests/support/launcher_harness.hpp"

namespace chl::test::kill_scenarios {

using namespace std::chrono_literals;

// PUT a lifecycle command on the command socket (not the CLI, which follows the events until
// the VM is down): the HTTP status, or -1 when the socket did not answer.
inline int put(const LauncherRun& r, const std::string& what, const std::string& body = {}) {
  auto resp = control::command_request(r.socket(), "PUT", "/v1/" + what, body, 10s);
  return resp ? resp->status : -1;
}

// A process that exists and is not a zombie.
inline bool pid_alive(long pid) {
  if (pid <= 0) return false;
  const std::string text = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z' &&
         text[close + 2] != 'X';
}

// Exits 4 within `bound` with Shutoff (Destroyed), the VMM (`vmm_pid`) gone.
inline void ends_forced_off(LauncherRun& r, long vmm_pid, std::chrono::seconds bound) {
  auto exit = r.wait_exit(bound);
  REQUIRE_MESSAGE(exit, "the launcher still runs " << bound.count() << " s later:\n" << r.output());
  CHECK_MESSAGE(exit->exited, exit->describe());
  CHECK_MESSAGE(exit->code == 4, r.output());
  CHECK_MESSAGE(r.output().find("VM ended: state Shutoff reason Destroyed") != std::string::npos,
                r.output());
  if (vmm_pid > 0)
    CHECK_MESSAGE(wait_until(10s, [vmm_pid] { return !pid_alive(vmm_pid); }),
                  "VMM pid " << vmm_pid << " outlived the launcher");
}

// The stop (grace 60 s: far beyond the test), then a Kill a second later: off at once.
inline void shutdown_then_kill(LauncherRun& r, long vmm_pid) {
  CHECK(put(r, "shutdown", R"({"grace_period_seconds":60})") == 200);
  std::this_thread::sleep_for(1s);
  CHECK(put(r, "kill") == 200);
  ends_forced_off(r, vmm_pid, 15s);
}

// Two Kills back to back: both accepted; the second kills the VMM at once.
inline void kill_twice(LauncherRun& r, long vmm_pid) {
  CHECK(put(r, "kill") == 200);
  const int second = put(r, "kill");
  CHECK_MESSAGE((second == 200 || second == -1),
                "second kill: HTTP " << second);  // -1: already gone
  ends_forced_off(r, vmm_pid, 15s);
}

inline void kill_then_sigterm(LauncherRun& r, long vmm_pid) {
  CHECK(put(r, "kill") == 200);
  REQUIRE(r.child.signal(SIGTERM));
  ends_forced_off(r, vmm_pid, 15s);
}

// SIGTERM while the stop's power button waits (grace 60 s): the second stop request forces it.
inline void sigterm_during_graceful_stop(LauncherRun& r, long vmm_pid) {
  CHECK(put(r, "shutdown", R"({"grace_period_seconds":60})") == 200);
  std::this_thread::sleep_for(1s);
  REQUIRE(r.child.signal(SIGTERM));
  ends_forced_off(r, vmm_pid, 15s);
}

}  // namespace chl::test::kill_scenarios

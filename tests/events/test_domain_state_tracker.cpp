// DomainStateTracker scenarios: the sequences real CH v52 produced, and the launcher's inputs
// (VMM exit status, user stop requests).
#include <doctest/doctest.h>

#include <csignal>

#include "events/domain_state_tracker.hpp"
#include "events/event_stream_parser.hpp"
#include "tests/events/event_fixtures.hpp"

using namespace chl::events;
namespace fx = chl::events::fixtures;

namespace {
struct Run {
  DomainStateTracker t;
  std::vector<DomainEvent> all;
  std::vector<DomainEvent> feed(const char* source, const char* event, nlohmann::json props = nullptr) {
    auto out = t.on_vmm_event(fx::ev(0, 0, source, event, std::move(props)));
    all.insert(all.end(), out.begin(), out.end());
    return out;
  }
  std::vector<DomainEvent> exit(int status) {
    auto out = t.on_vmm_exited(VmmExit::from_wait_status(status));
    all.insert(all.end(), out.begin(), out.end());
    return out;
  }
  void expect(DomainState s, StateReason r) {
    CHECK(to_string(t.state()) == to_string(s));
    CHECK(to_string(t.reason()) == to_string(r));
  }
};
int exited(int code) { return (code & 0xff) << 8; }  // a waitpid status for exit(code)
int killed(int sig) { return sig & 0x7f; }            // a waitpid status for death by signal
}  // namespace

TEST_CASE("VmmExit decodes waitpid statuses") {
  auto e = VmmExit::from_wait_status(exited(3));
  CHECK_FALSE(e.signaled);
  CHECK(e.code == 3);
  CHECK(e.describe() == "exit status 3");
  auto k = VmmExit::from_wait_status(killed(SIGKILL));
  CHECK(k.signaled);
  CHECK(k.code == SIGKILL);
  CHECK(k.describe().find("signal 9") != std::string::npos);
}

TEST_CASE("boot - pause - resume - reboot - shutdown") {
  Run r;
  r.feed("vmm", "starting");
  r.expect(DomainState::NoState, StateReason::Unknown);
  CHECK(r.feed("vm", "booting").empty());
  CHECK(r.t.pending() == std::optional<std::string>("vm/booting"));
  r.expect(DomainState::NoState, StateReason::Unknown);
  auto ev = r.feed("vm", "booted");
  REQUIRE(ev.size() == 1);
  CHECK(ev[0].type == DomainEventType::Started);
  CHECK(ev[0].detail == EventDetail::Booted);
  CHECK_FALSE(r.t.pending().has_value());
  r.expect(DomainState::Running, StateReason::Booted);
  r.feed("vm", "pausing");
  r.expect(DomainState::Running, StateReason::Booted);
  ev = r.feed("vm", "paused");
  REQUIRE(ev.size() == 1);
  CHECK(ev[0].type == DomainEventType::Suspended);
  r.expect(DomainState::Paused, StateReason::User);
  r.feed("vm", "resuming");
  r.expect(DomainState::Paused, StateReason::User);
  ev = r.feed("vm", "resumed");
  CHECK(ev.at(0).type == DomainEventType::Resumed);
  r.expect(DomainState::Running, StateReason::Unpaused);
  r.feed("vm", "rebooting");
  r.expect(DomainState::Running, StateReason::Unpaused);
  ev = r.feed("vm", "rebooted");
  CHECK(ev.at(0).type == DomainEventType::Reboot);
  r.expect(DomainState::Running, StateReason::Booted);
  ev = r.feed("vm", "shutdown");
  CHECK(ev.at(0).type == DomainEventType::Stopped);
  r.expect(DomainState::Shutoff, StateReason::Shutdown);
  CHECK(r.t.finished());
}

TEST_CASE("refused transitions emit -ing events alone and change nothing") {
  Run r;
  r.feed("vm", "booting");  // no VM: refused
  r.expect(DomainState::NoState, StateReason::Unknown);
  r.feed("vm", "booting");
  r.feed("vm", "booted");
  r.expect(DomainState::Running, StateReason::Booted);
  for (const char* ing : {"booting", "resuming", "snapshotting", "rebooting", "pausing"}) {
    CAPTURE(ing);
    CHECK(r.feed("vm", ing).empty());
    r.expect(DomainState::Running, StateReason::Booted);
    CHECK(r.t.pending() == std::optional<std::string>(std::string("vm/") + ing));
  }
  r.feed("vm", "paused");
  CHECK_FALSE(r.t.pending().has_value());
  r.feed("vm", "pausing");   // pause while paused: refused
  r.feed("vm", "snapshotting");  // snapshot fails (nested KVM)
  r.expect(DomainState::Paused, StateReason::User);
  CHECK(r.all.size() == 2);  // Started, Suspended
}

TEST_CASE("the whole observed session - parsed from CH's bytes") {
  const std::string stream = fx::stream_of(fx::observed_session());
  EventStreamParser p;
  DomainStateTracker t;
  std::vector<std::string> seen;  // "cause -> type/detail state/reason"
  p.feed(stream, [&](VmmEvent&& e) {
    for (const auto& d : t.on_vmm_event(e))
      seen.push_back(d.cause + " " + std::string(to_string(d.type)) + "/" + std::string(to_string(d.detail)) +
                     " " + std::string(to_string(d.state)) + "/" + std::string(to_string(d.reason)));
  });
  auto out = t.on_vmm_exited(VmmExit::from_wait_status(exited(0)));
  CHECK(out.empty());
  const std::vector<std::string> want = {
      "vm/deleted Undefined/Removed NoState/Unknown",
      "vm/booted Started/Booted Running/Booted",
      "vm/paused Suspended/Paused Paused/User",
      "vm/resumed Resumed/Unpaused Running/Unpaused",
      "vm/resized Defined/Updated Running/Unpaused",
      "vm/rebooted Reboot/Booted Running/Booted",
      "vm/shutdown Stopped/Shutdown Shutoff/Shutdown",
      "vm/booted Started/Booted Running/Booted",
      "vm/shutdown Stopped/Shutdown Shutoff/Shutdown",
      "vm/deleted Undefined/Removed Shutoff/Shutdown",
  };
  CHECK(seen == want);
  CHECK(t.state() == DomainState::Shutoff);
  CHECK(t.reason() == StateReason::Shutdown);
  CHECK(t.vmm_shutdown_seen());
  CHECK_FALSE(t.vm_defined());
}

TEST_CASE("guest power-off: vm/shutdown - vm/deleted - vmm/shutdown - exit 0 is Shutoff/Shutdown") {
  Run r;
  r.feed("vmm", "starting");
  r.feed("vm", "booting");
  r.feed("vm", "booted");
  r.feed("vm", "shutdown");
  r.feed("vm", "deleted");
  r.feed("vmm", "shutdown");
  CHECK(r.exit(exited(0)).empty());
  r.expect(DomainState::Shutoff, StateReason::Shutdown);
  REQUIRE(r.all.size() == 3);
  CHECK(r.all[1].type == DomainEventType::Stopped);
  CHECK(r.all[1].detail == EventDetail::Shutdown);
  CHECK(r.all[2].type == DomainEventType::Undefined);
}

TEST_CASE("a graceful stop request still ends as Shutoff/Shutdown when the guest powers off") {
  Run r;
  r.feed("vm", "booted");
  r.t.on_stop_requested(StopRequest::Graceful);
  r.feed("vm", "shutdown");
  r.expect(DomainState::Shutoff, StateReason::Shutdown);
}

TEST_CASE("VMM SIGKILLed while running - nobody asked: Crashed") {
  Run r;
  r.feed("vmm", "starting");
  r.feed("vm", "booting");
  r.feed("vm", "booted");
  auto out = r.exit(killed(SIGKILL));
  REQUIRE(out.size() == 1);
  CHECK(out[0].type == DomainEventType::Stopped);
  CHECK(out[0].detail == EventDetail::Failed);
  CHECK(out[0].cause == "launcher/vmm-exited-unexpectedly");
  CHECK(out[0].properties["signal"] == SIGKILL);
  r.expect(DomainState::Crashed, StateReason::Unknown);
  CHECK(r.t.finished());
  // Events arriving after the exit (a late read of the pipe) change nothing.
  CHECK(r.feed("vm", "shutdown").empty());
  r.expect(DomainState::Crashed, StateReason::Unknown);
  // A second exit report changes nothing either.
  CHECK(r.exit(exited(0)).empty());
}

TEST_CASE("VMM exits 0 while running - its event tail lost: Shutoff/Shutdown, not Crashed") {
  // Cloud Hypervisor v52 exits 0 only through vmm_shutdown; its unjoined monitor thread can lose
  // vm/shutdown, vm/deleted and vmm/shutdown (cloud-hypervisor/src/main.rs).
  Run r;
  r.feed("vm", "booted");
  auto out = r.exit(exited(0));
  REQUIRE(out.size() == 1);
  CHECK(out[0].cause == "launcher/vmm-exited-clean");
  r.expect(DomainState::Shutoff, StateReason::Shutdown);
}

TEST_CASE("VMM exits non-zero while paused - without a shutdown event: Crashed") {
  Run r;
  r.feed("vm", "booted");
  r.feed("vm", "paused");
  auto out = r.exit(exited(1));
  REQUIRE(out.size() == 1);
  CHECK(out[0].properties["exit_code"] == 1);
  r.expect(DomainState::Crashed, StateReason::Unknown);
}

TEST_CASE("VMM killed by the launcher after a forced stop: Shutoff/Destroyed") {
  Run r;
  r.feed("vm", "booted");
  r.t.on_stop_requested(StopRequest::Graceful);
  r.t.on_stop_requested(StopRequest::Forced);
  r.t.on_stop_requested(StopRequest::Graceful);  // does not downgrade
  CHECK(r.t.stop_requested() == StopRequest::Forced);
  auto out = r.exit(killed(SIGKILL));
  REQUIRE(out.size() == 1);
  CHECK(out[0].detail == EventDetail::Destroyed);
  r.expect(DomainState::Shutoff, StateReason::Destroyed);
}

TEST_CASE("forced stop through the API: vm/shutdown is Destroyed - the clean exit adds nothing") {
  Run r;
  r.feed("vm", "booted");
  r.t.on_stop_requested(StopRequest::Forced);
  r.feed("vm", "shutdown");
  r.feed("vm", "deleted");
  r.feed("vmm", "shutdown");
  CHECK(r.exit(exited(0)).empty());
  r.expect(DomainState::Shutoff, StateReason::Destroyed);
}

TEST_CASE("guest panic: Crashed/Panicked - kept when the VMM dies afterwards") {
  Run r;
  r.feed("vm", "booted");
  auto out = r.feed("guest", "panic", {{"event", "panic"}});
  REQUIRE(out.size() == 1);
  CHECK(out[0].type == DomainEventType::Crashed);
  CHECK(out[0].detail == EventDetail::Panicked);
  r.expect(DomainState::Crashed, StateReason::Panicked);
  out = r.exit(killed(SIGKILL));
  REQUIRE(out.size() == 1);
  r.expect(DomainState::Crashed, StateReason::Panicked);
  CHECK(out[0].reason == StateReason::Panicked);
}

TEST_CASE("crash_loaded: the guest runs its crash kernel - still Running") {
  Run r;
  r.feed("vm", "booted");
  auto out = r.feed("guest", "panic", {{"event", "crash_loaded"}});
  REQUIRE(out.size() == 1);
  CHECK(out[0].detail == EventDetail::CrashLoaded);
  r.expect(DomainState::Running, StateReason::Booted);
}

TEST_CASE("panic then reboot: running again") {
  Run r;
  r.feed("vm", "booted");
  r.feed("guest", "panic", {{"event", "panic"}});
  r.feed("vm", "rebooting");
  r.feed("vm", "rebooted");
  r.expect(DomainState::Running, StateReason::Booted);
}

TEST_CASE("outgoing migration: paused for migration - then Shutoff/Migrated through the exit") {
  Run r;
  r.feed("vm", "booted");
  r.feed("vm", "migration-started");
  CHECK(r.t.migrating());
  r.feed("vm", "migration-memory-iteration", {{"id", "0"}});
  r.feed("vm", "migration-memory-iteration", {{"id", "1"}});
  r.expect(DomainState::Running, StateReason::Booted);
  r.feed("vm", "pausing");
  auto out = r.feed("vm", "paused");
  CHECK(out.at(0).detail == EventDetail::Migrated);
  r.expect(DomainState::Paused, StateReason::Migration);
  r.feed("vm", "migration-finished");
  CHECK_FALSE(r.t.migrating());
  r.expect(DomainState::Shutoff, StateReason::Migrated);
  CHECK(r.feed("vm", "shutdown").empty());  // vmm_shutdown → vm_delete → vm_shutdown
  r.feed("vm", "deleted");
  r.feed("vmm", "shutdown");
  CHECK(r.exit(exited(0)).empty());
  r.expect(DomainState::Shutoff, StateReason::Migrated);
}

TEST_CASE("outgoing migration that fails: running again") {
  Run r;
  r.feed("vm", "booted");
  r.feed("vm", "migration-started");
  r.feed("vm", "paused");
  r.feed("vm", "migration-failed");
  r.feed("vm", "resuming");
  r.feed("vm", "resumed");
  r.expect(DomainState::Running, StateReason::Unpaused);
  CHECK_FALSE(r.t.migrating());
}

TEST_CASE("incoming migration: Paused/Migration until received - then Running/Migrated") {
  Run r;
  r.feed("vmm", "starting");
  r.feed("vm", "migration-receive-started");
  r.expect(DomainState::Paused, StateReason::Migration);
  r.feed("vm", "restoring");
  CHECK(r.feed("vm", "restored").empty());
  r.expect(DomainState::Paused, StateReason::Migration);
  r.feed("vm", "resuming");
  r.feed("vm", "resumed");
  auto out = r.feed("vm", "migration-receive-finished");
  CHECK(out.at(0).type == DomainEventType::Started);
  CHECK(out.at(0).detail == EventDetail::Migrated);
  r.expect(DomainState::Running, StateReason::Migrated);
}

TEST_CASE("incoming migration of a paused VM (CompletePaused): no vm/resumed - it stays Paused/User") {
  Run r;
  r.feed("vmm", "starting");
  r.feed("vm", "migration-receive-started");
  r.feed("vm", "restoring");
  r.feed("vm", "restored");
  r.expect(DomainState::Paused, StateReason::Migration);
  auto out = r.feed("vm", "migration-receive-finished");
  REQUIRE(out.size() == 1);
  CHECK(out.at(0).type == DomainEventType::Started);
  CHECK(out.at(0).detail == EventDetail::Migrated);
  r.expect(DomainState::Paused, StateReason::User);
}

TEST_CASE("restore from a snapshot: Paused/FromSnapshot - then resumed") {
  Run r;
  r.feed("vm", "restoring");
  r.feed("vm", "restored");
  r.expect(DomainState::Paused, StateReason::FromSnapshot);
  r.feed("vm", "resuming");
  r.feed("vm", "resumed");
  r.expect(DomainState::Running, StateReason::Unpaused);
}

TEST_CASE("hotplug removal and resize are reported without a state change") {
  Run r;
  r.feed("vm", "booted");
  auto out = r.feed("vm", "device-removed", {{"id", "disk2"}});
  REQUIRE(out.size() == 1);
  CHECK(out[0].type == DomainEventType::DeviceRemoved);
  CHECK(out[0].properties["id"] == "disk2");
  r.feed("vm", "resizing");
  out = r.feed("vm", "resized");
  CHECK(out.at(0).type == DomainEventType::Defined);
  r.expect(DomainState::Running, StateReason::Booted);
}

TEST_CASE("an unknown event is ignored") {
  Run r;
  r.feed("vm", "booted");
  CHECK(r.feed("vm", "disk-mirror-completed", {{"id", "disk0"}}).empty());
  CHECK(r.feed("cpu", "hotplugged").empty());
  r.expect(DomainState::Running, StateReason::Booted);
}

TEST_CASE("a VMM that exits before any VM was created") {
  Run r;
  r.feed("vmm", "starting");
  auto out = r.exit(exited(1));
  REQUIRE(out.size() == 1);
  r.expect(DomainState::Crashed, StateReason::Unknown);
}

TEST_CASE("tracker JSON snapshot") {
  Run r;
  r.feed("vm", "booted");
  r.feed("vm", "pausing");
  auto j = r.t.to_json();
  CHECK(j["state"] == "Running");
  CHECK(j["reason"] == "Booted");
  CHECK(j["pending"] == "vm/pausing");
  CHECK(j["vmm_exited"] == false);
  CHECK(j["stop_requested"] == "None");
}

TEST_CASE("a reboot that emits vm/shutdown inside it (older CH) never reports Shutoff") {
  Run r;
  r.feed("vm", "booted");
  r.feed("vm", "rebooting");
  CHECK(r.feed("vm", "shutdown").empty());  // from Vm::shutdown inside vm_reboot
  r.expect(DomainState::Running, StateReason::Booted);
  r.feed("vm", "booting");
  r.feed("vm", "booted");
  auto out = r.feed("vm", "rebooted");
  CHECK(out.at(0).type == DomainEventType::Reboot);
  r.expect(DomainState::Running, StateReason::Booted);
  CHECK_FALSE(r.t.finished());
  // A real shutdown afterwards still stops the domain.
  r.feed("vm", "shutdown");
  r.expect(DomainState::Shutoff, StateReason::Shutdown);
}

TEST_CASE("event monitor lost while running - Shutoff/Failed, the later SIGKILL adds nothing") {
  Run r;
  r.feed("vmm", "starting");
  r.feed("vm", "booting");
  r.feed("vm", "booted");
  auto ev = r.t.on_event_monitor_lost();
  REQUIRE(ev.size() == 1);
  CHECK(ev[0].type == DomainEventType::Stopped);
  CHECK(ev[0].detail == EventDetail::Failed);
  CHECK(ev[0].cause == "launcher/event-monitor-lost");
  r.expect(DomainState::Shutoff, StateReason::Failed);
  CHECK(r.t.event_monitor_lost());
  CHECK(r.t.to_json()["event_monitor_lost"] == true);
  CHECK(r.t.on_event_monitor_lost().empty());  // once
  CHECK(r.exit(killed(SIGKILL)).empty());       // the launcher's kill: still Shutoff/Failed
  r.expect(DomainState::Shutoff, StateReason::Failed);
  CHECK(r.t.finished());
}

TEST_CASE("event monitor lost before boot or while paused - Shutoff/Failed too") {
  Run before;
  before.feed("vmm", "starting");
  REQUIRE(before.t.on_event_monitor_lost().size() == 1);
  before.expect(DomainState::Shutoff, StateReason::Failed);
  Run paused;
  paused.feed("vm", "booted");
  paused.feed("vm", "paused");
  REQUIRE(paused.t.on_event_monitor_lost().size() == 1);
  paused.expect(DomainState::Shutoff, StateReason::Failed);
}

TEST_CASE("event monitor lost while the VM already goes down - the state stands") {
  SUBCASE("guest powered off (Shutoff/Shutdown)") {
    Run r;
    r.feed("vm", "booted");
    r.feed("vm", "shutdown");
    CHECK(r.t.on_event_monitor_lost().empty());
    CHECK(r.exit(killed(SIGKILL)).empty());
    r.expect(DomainState::Shutoff, StateReason::Shutdown);
  }
  SUBCASE("vmm/shutdown seen") {
    Run r;
    r.feed("vmm", "shutdown");
    CHECK(r.t.on_event_monitor_lost().empty());
    r.exit(exited(0));
    r.expect(DomainState::Shutoff, StateReason::Shutdown);
  }
  SUBCASE("forced stop under way (being destroyed)") {
    Run r;
    r.feed("vm", "booted");
    r.t.on_stop_requested(StopRequest::Forced);
    CHECK(r.t.on_event_monitor_lost().empty());
    r.exit(killed(SIGKILL));
    r.expect(DomainState::Shutoff, StateReason::Destroyed);
  }
  SUBCASE("guest panicked") {
    Run r;
    r.feed("vm", "booted");
    r.feed("guest", "panic", {{"event", "panic"}});
    CHECK(r.t.on_event_monitor_lost().empty());
    r.exit(killed(SIGKILL));
    r.expect(DomainState::Crashed, StateReason::Panicked);
  }
  SUBCASE("a graceful stop (power button) does not count: Shutoff/Failed") {
    Run r;
    r.feed("vm", "booted");
    r.t.on_stop_requested(StopRequest::Graceful);
    CHECK(r.t.on_event_monitor_lost().size() == 1);
    r.expect(DomainState::Shutoff, StateReason::Failed);
  }
  SUBCASE("after the VMM exited: nothing") {
    Run r;
    r.feed("vm", "booted");
    r.exit(killed(SIGKILL));
    CHECK(r.t.on_event_monitor_lost().empty());
    r.expect(DomainState::Crashed, StateReason::Unknown);
  }
}

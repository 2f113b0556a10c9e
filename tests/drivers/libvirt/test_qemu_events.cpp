// libvirt's domain events -> the launcher's domain events (libvirt_events.hpp), and the KVM/TCG
// probe (accel_probe.hpp). The event sequences are the ones observed from libvirt 9.0 with QEMU
// 7.2 running the PVH test guest (docs/qemu/lifecycle.md). No daemon, no QEMU.
#include <doctest/doctest.h>
#include <libvirt/libvirt.h>

#include "drivers/libvirt/accel_probe.hpp"
#include "drivers/libvirt/events.hpp"
#include "tests/support/test_support.hpp"

using namespace chl::libvirt;
using chl::events::DomainEventType;
using chl::events::DomainState;
using chl::events::StateReason;
using chl::events::StopRequest;

namespace {

// Feed (event, detail) pairs; returns every domain event emitted.
std::vector<chl::events::DomainEvent> feed(LibvirtEventTracker& t,
                                           std::initializer_list<std::pair<int, int>> evs) {
  std::vector<chl::events::DomainEvent> out;
  for (auto [e, d] : evs) {
    auto got = t.on_lifecycle(e, d);
    out.insert(out.end(), got.begin(), got.end());
  }
  return out;
}

void booted(LibvirtEventTracker& t) {
  t.expect_paused_start();
  auto evs = feed(t, {{VIR_DOMAIN_EVENT_STARTED, VIR_DOMAIN_EVENT_STARTED_BOOTED},
                      {VIR_DOMAIN_EVENT_SUSPENDED, VIR_DOMAIN_EVENT_SUSPENDED_PAUSED},
                      {VIR_DOMAIN_EVENT_RESUMED, VIR_DOMAIN_EVENT_RESUMED_UNPAUSED}});
  REQUIRE(evs.size() == 1);
  CHECK(evs[0].type == DomainEventType::Started);
  CHECK(evs[0].state == DomainState::Running);
  CHECK(evs[0].reason == StateReason::Booted);
}

}  // namespace

TEST_CASE("libvirt events: a paused start is reported as one Started/Booted when the guest runs") {
  LibvirtEventTracker t;
  booted(t);
  CHECK(t.state() == DomainState::Running);
  CHECK_FALSE(t.finished());
}

TEST_CASE(
    "libvirt events: pause, resume, guest power-off -> ShuttingDown/Unknown, Shutoff/Shutdown, "
    "finished") {
  LibvirtEventTracker t;
  booted(t);
  auto p = feed(t, {{VIR_DOMAIN_EVENT_SUSPENDED, VIR_DOMAIN_EVENT_SUSPENDED_PAUSED}});
  REQUIRE(p.size() == 1);
  CHECK(p[0].state == DomainState::Paused);
  CHECK(p[0].reason == StateReason::User);
  feed(t, {{VIR_DOMAIN_EVENT_RESUMED, VIR_DOMAIN_EVENT_RESUMED_UNPAUSED}});
  CHECK(t.reason() == StateReason::Unpaused);
  auto s = feed(t, {{VIR_DOMAIN_EVENT_SHUTDOWN, VIR_DOMAIN_EVENT_SHUTDOWN_GUEST},
                    {VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN}});
  REQUIRE(s.size() == 2);
  CHECK(s[0].type == DomainEventType::Shutdown);
  CHECK(s[0].detail == chl::events::EventDetail::Guest);
  // libvirt's state is VIR_DOMAIN_SHUTDOWN (reason UNKNOWN) until QEMU is gone: virt-launcher
  // reports ShuttingDown/Unknown, never Running once the guest powered off.
  CHECK(s[0].state == DomainState::ShuttingDown);
  CHECK(s[0].reason == StateReason::Unknown);
  CHECK(s[1].state == DomainState::Shutoff);
  CHECK(s[1].reason == StateReason::Shutdown);
  CHECK(t.finished());
  CHECK(feed(t, {{VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_DESTROYED}}).empty());
}

TEST_CASE(
    "libvirt events: every Shutdown detail is ShuttingDown/Unknown, and only the stop ends it") {
  for (int detail : {VIR_DOMAIN_EVENT_SHUTDOWN_FINISHED, VIR_DOMAIN_EVENT_SHUTDOWN_GUEST,
                     VIR_DOMAIN_EVENT_SHUTDOWN_HOST}) {
    CAPTURE(detail);
    LibvirtEventTracker t;
    booted(t);
    auto s = feed(t, {{VIR_DOMAIN_EVENT_SHUTDOWN, detail}});
    REQUIRE(s.size() == 1);
    CHECK(s[0].state == DomainState::ShuttingDown);
    CHECK(s[0].reason == StateReason::Unknown);
    CHECK_FALSE(t.finished());
    // Whatever QEMU reports before it is gone (a resume, a pause, a reset) is reported, but the
    // domain stays ShuttingDown, as libvirt's own state does.
    auto later = feed(t, {{VIR_DOMAIN_EVENT_RESUMED, VIR_DOMAIN_EVENT_RESUMED_UNPAUSED},
                          {VIR_DOMAIN_EVENT_SUSPENDED, VIR_DOMAIN_EVENT_SUSPENDED_PAUSED}});
    REQUIRE(later.size() == 2);
    auto r = t.on_reboot();
    REQUIRE(r.size() == 1);
    later.push_back(r[0]);
    for (const auto& e : later) {
      CHECK(e.state == DomainState::ShuttingDown);
      CHECK(e.reason == StateReason::Unknown);
    }
    auto stop = feed(t, {{VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN}});
    REQUIRE(stop.size() == 1);
    CHECK(stop[0].state == DomainState::Shutoff);
    CHECK(stop[0].reason == StateReason::Shutdown);
    CHECK(t.finished());
  }
  // A panic while shutting down is still a crash.
  LibvirtEventTracker p;
  booted(p);
  feed(p, {{VIR_DOMAIN_EVENT_SHUTDOWN, VIR_DOMAIN_EVENT_SHUTDOWN_GUEST},
           {VIR_DOMAIN_EVENT_CRASHED, VIR_DOMAIN_EVENT_CRASHED_PANICKED}});
  CHECK(p.state() == DomainState::Crashed);
  CHECK(p.reason() == StateReason::Panicked);
}

TEST_CASE("libvirt states: virDomainGetState's (state, reason) as virt-launcher reports them") {
  struct Case {
    int state, reason;
    DomainState ours;
    StateReason why;
  };
  const Case cases[] = {
      {VIR_DOMAIN_RUNNING, VIR_DOMAIN_RUNNING_BOOTED, DomainState::Running, StateReason::Booted},
      {VIR_DOMAIN_RUNNING, VIR_DOMAIN_RUNNING_UNPAUSED, DomainState::Running,
       StateReason::Unpaused},
      {VIR_DOMAIN_RUNNING, VIR_DOMAIN_RUNNING_UNKNOWN, DomainState::Running, StateReason::Unknown},
      {VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_USER, DomainState::Paused, StateReason::User},
      {VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_IOERROR, DomainState::Paused, StateReason::IOError},
      {VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_SHUTTING_DOWN, DomainState::Paused,
       StateReason::ShuttingDown},
      // What QEMU's domains have while shutting down, and what other drivers set on request.
      {VIR_DOMAIN_SHUTDOWN, VIR_DOMAIN_SHUTDOWN_UNKNOWN, DomainState::ShuttingDown,
       StateReason::Unknown},
      {VIR_DOMAIN_SHUTDOWN, VIR_DOMAIN_SHUTDOWN_USER, DomainState::ShuttingDown, StateReason::User},
      {VIR_DOMAIN_SHUTOFF, VIR_DOMAIN_SHUTOFF_SHUTDOWN, DomainState::Shutoff,
       StateReason::Shutdown},
      {VIR_DOMAIN_SHUTOFF, VIR_DOMAIN_SHUTOFF_DESTROYED, DomainState::Shutoff,
       StateReason::Destroyed},
      {VIR_DOMAIN_SHUTOFF, VIR_DOMAIN_SHUTOFF_FAILED, DomainState::Shutoff, StateReason::Failed},
      {VIR_DOMAIN_CRASHED, VIR_DOMAIN_CRASHED_PANICKED, DomainState::Crashed,
       StateReason::Panicked},
      {VIR_DOMAIN_PMSUSPENDED, 0, DomainState::PMSuspended, StateReason::Unknown},
      {VIR_DOMAIN_NOSTATE, 0, DomainState::NoState, StateReason::Unknown},
      {VIR_DOMAIN_PAUSED, 99, DomainState::Paused, StateReason::Unknown},  // a reason newer than us
      {42, 0, DomainState::NoState, StateReason::Unknown},
  };
  for (const auto& c : cases) {
    CAPTURE(c.state);
    CAPTURE(c.reason);
    auto got = libvirt_domain_state(c.state, c.reason);
    CHECK(got.state == c.ours);
    CHECK(got.reason == c.why);
  }
}

TEST_CASE("libvirt events: a panic stays Crashed/Panicked through QEMU's stop") {
  LibvirtEventTracker t;
  booted(t);
  auto evs = feed(t, {{VIR_DOMAIN_EVENT_SUSPENDED, VIR_DOMAIN_EVENT_SUSPENDED_PAUSED},
                      {VIR_DOMAIN_EVENT_CRASHED, VIR_DOMAIN_EVENT_CRASHED_PANICKED},
                      {VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_CRASHED}});
  REQUIRE(evs.size() == 3);
  CHECK(evs[1].state == DomainState::Crashed);
  CHECK(evs[1].reason == StateReason::Panicked);
  CHECK(t.state() == DomainState::Crashed);
  CHECK(t.reason() == StateReason::Panicked);
  CHECK(t.finished());
}

TEST_CASE("libvirt events: QEMU dying is Crashed, unless the launcher forced the stop") {
  LibvirtEventTracker a;
  booted(a);
  feed(a, {{VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_FAILED}});
  CHECK(a.state() == DomainState::Crashed);
  CHECK(a.reason() == StateReason::Unknown);

  LibvirtEventTracker b;
  booted(b);
  b.on_stop_requested(StopRequest::Forced);
  feed(b, {{VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_FAILED}});
  CHECK(b.state() == DomainState::Shutoff);
  CHECK(b.reason() == StateReason::Destroyed);

  LibvirtEventTracker c;
  booted(c);
  c.on_stop_requested(StopRequest::Graceful);
  feed(c, {{VIR_DOMAIN_EVENT_SHUTDOWN, VIR_DOMAIN_EVENT_SHUTDOWN_HOST},
           {VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_DESTROYED}});
  CHECK(c.state() == DomainState::Shutoff);
  CHECK(c.reason() == StateReason::Destroyed);
}

TEST_CASE("libvirt events: reboot, lost connection, unknown details") {
  LibvirtEventTracker t;
  booted(t);
  auto r = t.on_reboot();
  REQUIRE(r.size() == 1);
  CHECK(r[0].type == DomainEventType::Reboot);
  CHECK(t.state() == DomainState::Running);
  CHECK(feed(t, {{VIR_DOMAIN_EVENT_STOPPED, 999}}).empty());
  CHECK_FALSE(t.finished());
  auto lost = t.on_connection_lost("end of file");
  REQUIRE(lost.size() == 1);
  CHECK(lost[0].state == DomainState::Crashed);
  CHECK(t.finished());
}

TEST_CASE("accel probe: forced choices, no /dev/kvm, nested PVM") {
  chl::test::TempDir dir("chl-accel");
  AccelProbePaths none{dir.path() / "no-kvm", dir.path() / "modules"};
  CHECK(choose_accel(AccelRequest::Tcg, none).accel == Accel::Tcg);
  auto forced = choose_accel(AccelRequest::Kvm, none);
  CHECK(forced.accel == Accel::Kvm);
  CHECK(forced.why.find("cannot be opened") != std::string::npos);
  auto a = choose_accel(AccelRequest::Auto, none);
  CHECK(a.accel == Accel::Tcg);
  CHECK(a.why.find("cannot be opened") != std::string::npos);
  CHECK(accel_request_from_string("auto") == AccelRequest::Auto);
  CHECK_FALSE(accel_request_from_string("fast").has_value());
  // The real host: whatever it picks, it says why.
  auto host = choose_accel(AccelRequest::Auto);
  CHECK_FALSE(host.why.empty());
  if (std::filesystem::exists("/sys/module/kvm_pvm")) {
    CHECK(host.accel == Accel::Tcg);
    MESSAGE("this host: " << host.why);
  }
}

TEST_CASE(
    "libvirt events: a live migration's source - Suspended/Migrated is Paused/Migration, "
    "Stopped/Migrated is Shutoff/Migrated and finishes the domain (as observed, libvirt 9.0)") {
  LibvirtEventTracker t;
  booted(t);
  auto evs = feed(t, {{VIR_DOMAIN_EVENT_SUSPENDED, VIR_DOMAIN_EVENT_SUSPENDED_MIGRATED},
                      {VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_MIGRATED}});
  REQUIRE(evs.size() == 2);
  CHECK(evs[0].state == DomainState::Paused);
  CHECK(evs[0].reason == StateReason::Migration);
  CHECK(evs[1].state == DomainState::Shutoff);
  CHECK(evs[1].reason == StateReason::Migrated);  // not a crash: virt-handler deletes the domain
  CHECK(t.finished());
}

TEST_CASE(
    "libvirt events: a migrated source whose QEMU exit libvirt never reported is Shutoff/Migrated, "
    "once, and libvirt's late Stopped/Migrated changes nothing") {
  LibvirtEventTracker t;
  booted(t);
  feed(t, {{VIR_DOMAIN_EVENT_SUSPENDED, VIR_DOMAIN_EVENT_SUSPENDED_MIGRATED}});
  auto evs = t.on_qemu_gone_migrated("QEMU exited after the migration");
  REQUIRE(evs.size() == 1);
  CHECK(evs[0].type == DomainEventType::Stopped);
  CHECK(evs[0].state == DomainState::Shutoff);
  CHECK(evs[0].reason == StateReason::Migrated);  // not Crashed: the VM runs on the target
  CHECK(t.finished());
  CHECK(t.on_qemu_gone_migrated("again").empty());
  CHECK(feed(t, {{VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_MIGRATED}}).empty());
  CHECK(t.reason() == StateReason::Migrated);
}

TEST_CASE(
    "libvirt events: a live migration's target - Started/Migrated is Paused/Migration until "
    "Resumed/Migrated (Running/Migrated), or Suspended/Paused for a paused VM (Paused/User)") {
  {
    LibvirtEventTracker t;
    t.expect_incoming();
    auto evs = feed(t, {{VIR_DOMAIN_EVENT_STARTED, VIR_DOMAIN_EVENT_STARTED_MIGRATED},
                        {VIR_DOMAIN_EVENT_DEFINED, VIR_DOMAIN_EVENT_DEFINED_ADDED},
                        {VIR_DOMAIN_EVENT_RESUMED, VIR_DOMAIN_EVENT_RESUMED_MIGRATED}});
    REQUIRE(evs.size() == 3);
    CHECK(evs[0].state == DomainState::Paused);
    CHECK(evs[0].reason == StateReason::Migration);
    CHECK(evs[1].state == DomainState::Paused);  // the persistent definition changes no state
    CHECK(evs[2].state == DomainState::Running);
    CHECK(evs[2].reason == StateReason::Migrated);
  }
  {
    LibvirtEventTracker t;
    t.expect_incoming();
    feed(t, {{VIR_DOMAIN_EVENT_STARTED, VIR_DOMAIN_EVENT_STARTED_MIGRATED}});
    auto evs = feed(t, {{VIR_DOMAIN_EVENT_SUSPENDED, VIR_DOMAIN_EVENT_SUSPENDED_PAUSED}});
    REQUIRE(evs.size() == 1);
    CHECK(evs[0].state == DomainState::Paused);
    CHECK(evs[0].reason == StateReason::User);
  }
  {  // the incoming migration failed: QEMU stopped
    LibvirtEventTracker t;
    t.expect_incoming();
    auto evs = feed(t, {{VIR_DOMAIN_EVENT_STARTED, VIR_DOMAIN_EVENT_STARTED_MIGRATED},
                        {VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_FAILED}});
    REQUIRE(evs.size() == 2);
    CHECK(t.finished());
    CHECK(evs[1].state != DomainState::Running);
  }
}

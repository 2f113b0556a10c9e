// libvirt's domain events -> the launcher's domain events (libvirt_events.hpp), and the KVM/TCG
// probe (accel_probe.hpp). The event sequences are the ones observed from libvirt 9.0 with QEMU
// 7.2 running the PVH test guest (docs/qemu.md). No daemon, no QEMU.
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

TEST_CASE("libvirt events: pause, resume, guest power-off -> Shutoff/Shutdown, finished") {
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
  CHECK(s[0].state == DomainState::Running);  // Shutdown changes no state; Stopped does
  CHECK(s[1].state == DomainState::Shutoff);
  CHECK(s[1].reason == StateReason::Shutdown);
  CHECK(t.finished());
  CHECK(feed(t, {{VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_DESTROYED}}).empty());
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

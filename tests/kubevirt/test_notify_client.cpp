// The notify client against a notify server of our own on a temp Unix socket: order, newest-only
// coalescing, a server that is missing and then appears, one that stops mid-way, one that stops
// answering (bounded flush), refused Kubernetes events, the last event over the open connection
// once virt-handler closed the notify pipe, and the last words given up when nothing can reach it.
#include <doctest/doctest.h>

#include "kubevirt/domain_json.hpp"
#include "kubevirt/k8s_event.hpp"
#include "kubevirt/notify_client.hpp"
#include "tests/kubevirt/test_notify_server.hpp"
#include "tests/support/test_support.hpp"

namespace {

using namespace chl::kubevirt;
using chl::test::ReceivedNotification;
using chl::test::TestNotifyServer;
using namespace std::chrono_literals;
using S = chl::events::DomainState;
using R = chl::events::StateReason;

std::string domain(S state, R reason) {
  DomainDocument d;
  d.vmi_name = "vm1";
  d.vmi_namespace = "ns1";
  d.vmi_uid = "uid-1";
  d.state = state;
  d.reason = reason;
  return to_domain_json(d).dump();
}

std::string k8s_event(const std::string& reason) {
  return to_event_json({{"vm1", "ns1", "uid-1"}, "Warning", reason, "something happened"}).dump();
}

NotifyClientOptions options(const chl::test::TempDir& dir) {
  NotifyClientOptions o;
  o.socket_path = (dir / "domain-notify-pipe.sock").string();
  o.initial_backoff = 10ms;
  o.max_backoff = 100ms;
  o.send_timeout = 30s;  // a held RPC outlives every flush deadline below
  return o;
}

// "ADDED Shutoff/Unknown", "k8s GuestPanicked", ...
std::vector<std::string> summary(const std::vector<ReceivedNotification>& rs) {
  std::vector<std::string> out;
  for (const auto& r : rs) {
    if (r.k8s)
      out.push_back("k8s " + r.json["reason"].get<std::string>());
    else
      out.push_back(r.event_type + " " + r.json["Status"]["Status"].get<std::string>() + "/" +
                    r.json["Status"]["Reason"].get<std::string>());
  }
  return out;
}

auto deadline(std::chrono::milliseconds d) { return std::chrono::steady_clock::now() + d; }

}  // namespace

TEST_CASE("notify client: delivers domain states and Kubernetes events in order") {
  chl::test::TempDir dir("kvn");
  TestNotifyServer server(dir / "domain-notify-pipe.sock");
  NotifyClient client(options(dir));
  // Each flushed before the next, so nothing is coalesced: the life of a VM as virt-handler
  // must see it, ending with the NoState/NonExistent that replaces a DELETED event.
  client.send_domain_event(domain(S::Shutoff, R::Unknown), DomainEventType::Added);
  REQUIRE(client.flush(deadline(5s)));
  client.send_domain_event(domain(S::Paused, R::StartingUp), DomainEventType::Modified);
  REQUIRE(client.flush(deadline(5s)));
  client.send_domain_event(domain(S::Running, R::Booted), DomainEventType::Modified);
  client.send_k8s_event(k8s_event("GuestPanicked"));
  REQUIRE(client.flush(deadline(5s)));
  client.send_domain_event(domain(S::Paused, R::User), DomainEventType::Modified);
  REQUIRE(client.flush(deadline(5s)));
  client.send_domain_event(domain(S::Shutoff, R::Destroyed), DomainEventType::Modified);
  REQUIRE(client.flush(deadline(5s)));
  client.send_domain_event(domain(S::NoState, R::NonExistent), DomainEventType::Modified);
  REQUIRE(client.flush(deadline(5s)));

  const std::vector<std::string> expected = {
      "ADDED Shutoff/Unknown",       "MODIFIED Paused/StartingUp", "MODIFIED Running/Unknown",
      "k8s GuestPanicked",           "MODIFIED Paused/User",       "MODIFIED Shutoff/Destroyed",
      "MODIFIED NoState/NonExistent"};
  CHECK(summary(server.received()) == expected);
  const auto received = server.received();
  CHECK(received[3].json["involvedObject"]["uid"] == "uid-1");
  CHECK(received[3].json["involvedObject"]["kind"] == "VirtualMachineInstance");
  CHECK(received[0].json["ObjectMeta"]["uid"] == "uid-1");
  const auto c = client.counters();
  CHECK(c.domain_events_delivered == 6);
  CHECK(c.k8s_events_delivered == 1);
  CHECK(c.domain_events_coalesced == 0);
  CHECK(c.connects == 1);  // one connection for everything
}

TEST_CASE("notify client: only the newest pending domain state is kept, an ADDED stays ADDED") {
  chl::test::TempDir dir("kvn");
  NotifyClient client(options(dir));  // no server yet: everything waits
  client.send_domain_event(domain(S::Shutoff, R::Unknown), DomainEventType::Added);
  client.send_domain_event(domain(S::Paused, R::StartingUp), DomainEventType::Modified);
  client.send_k8s_event(k8s_event("Started"));
  client.send_domain_event(domain(S::Running, R::Booted), DomainEventType::Modified);
  CHECK_FALSE(client.flush(deadline(50ms)));  // nobody to deliver to

  TestNotifyServer server(dir / "domain-notify-pipe.sock");
  REQUIRE(client.flush(deadline(5s)));
  // The event enqueued before the newest state comes first; the three states are one ADDED
  // carrying the newest.
  CHECK(summary(server.received()) ==
        std::vector<std::string>{"k8s Started", "ADDED Running/Unknown"});
  CHECK(client.counters().domain_events_coalesced == 2);
}

TEST_CASE("notify client: a server that is missing at first is reached once it appears") {
  chl::test::TempDir dir("kvn");
  NotifyClient client(options(dir));
  client.send_domain_event(domain(S::Shutoff, R::Unknown), DomainEventType::Added);
  REQUIRE(chl::test::wait_until(5s, [&] { return client.counters().failed_attempts >= 3; }));
  CHECK(client.counters().connects == 0);  // no socket: no connection made

  TestNotifyServer server(dir / "domain-notify-pipe.sock");
  CHECK(server.wait_for(1, 5s));
  CHECK(summary(server.received()) == std::vector<std::string>{"ADDED Shutoff/Unknown"});
  CHECK(client.flush(deadline(5s)));
}

TEST_CASE("notify client: a server stopped mid-way gets the newest state from its successor") {
  chl::test::TempDir dir("kvn");
  const auto socket = dir / "domain-notify-pipe.sock";
  NotifyClient client(options(dir));
  auto first = std::make_unique<TestNotifyServer>(socket);
  client.send_domain_event(domain(S::Running, R::Booted), DomainEventType::Added);
  REQUIRE(client.flush(deadline(5s)));
  first->stop();

  client.send_domain_event(domain(S::Paused, R::User), DomainEventType::Modified);
  REQUIRE(chl::test::wait_until(5s, [&] { return client.counters().failed_attempts >= 1; }));
  client.send_domain_event(domain(S::Running, R::Unpaused), DomainEventType::Modified);
  CHECK(summary(first->received()) == std::vector<std::string>{"ADDED Running/Unknown"});

  TestNotifyServer second(socket);  // virt-handler restarted
  REQUIRE(client.flush(deadline(5s)));
  CHECK(summary(second.received()) == std::vector<std::string>{"MODIFIED Running/Unknown"});
  CHECK(client.counters().connects >= 2);
}

TEST_CASE("notify client: flush is bounded when the server stops answering") {
  chl::test::TempDir dir("kvn");
  TestNotifyServer server(dir / "domain-notify-pipe.sock");
  server.hold();
  auto client = std::make_unique<NotifyClient>(options(dir));
  client->send_domain_event(domain(S::Running, R::Booted), DomainEventType::Added);
  CHECK_FALSE(client->flush(deadline(200ms)));
  // It returned at its own deadline, with the RPC still in flight (held by the server: not yet
  // failed, not yet delivered), not after the RPC's timeout.
  CHECK(client->counters().failed_attempts == 0);
  CHECK(client->counters().domain_events_delivered == 0);
  // The caller never waits on the network: enqueueing while an RPC hangs returns at once.
  for (int i = 0; i < 100; ++i)
    client->send_domain_event(domain(S::Paused, R::User), DomainEventType::Modified);
  // The destructor cancels the hanging RPC rather than waiting for it.
  client.reset();
  server.release();
}

TEST_CASE("notify client: a Kubernetes event virt-handler refuses is given up, not retried") {
  chl::test::TempDir dir("kvn");
  TestNotifyServer server(dir / "domain-notify-pipe.sock");
  server.refuse_k8s_events(true);
  NotifyClient client(options(dir));
  client.send_k8s_event(k8s_event("GuestPanicked"));
  client.send_domain_event(domain(S::Running, R::Booted), DomainEventType::Added);
  REQUIRE(client.flush(deadline(5s)));
  CHECK(summary(server.received()) ==
        std::vector<std::string>{"k8s GuestPanicked", "ADDED Running/Unknown"});
  CHECK(client.counters().k8s_events_dropped == 1);
  CHECK(client.counters().failed_attempts == 0);
}

// virt-handler's processVmDelete closes this VMI's notify pipe (CloseLauncherClient, vm.go:1708):
// the listener closed and the socket file gone, the accepted connections still proxied
// (pipe.go:104-145). The launcher's last event goes over the connection it has, as KubeVirt's
// launcher sends it over its grpc.ClientConn (notify-client/client.go:136-140, 221-229).
TEST_CASE("notify client: after virt-handler closed the notify pipe, the last event goes over the open connection") {
  chl::test::TempDir dir("kvn");
  const auto socket = dir / "domain-notify-pipe.sock";
  TestNotifyServer server(socket);
  NotifyClient client(options(dir));
  client.send_domain_event(domain(S::Shutoff, R::Shutdown), DomainEventType::Added);
  REQUIRE(client.flush(deadline(10s)));
  server.close_pipe();
  CHECK_FALSE(std::filesystem::exists(socket));
  CHECK(server.open_connections() == 1);
  client.send_domain_event(domain(S::NoState, R::NonExistent), DomainEventType::Modified);
  CHECK(client.flush_last(deadline(60s)));
  CHECK(summary(server.received()) ==
        std::vector<std::string>{"ADDED Shutoff/Shutdown", "MODIFIED NoState/NonExistent"});
  CHECK(client.counters().connects == 1);
  CHECK(client.counters().unreachable == 0);
}

// Nothing to deliver over: the pipe closed and its connections ended. flush() keeps retrying (a
// virt-handler that comes back is reached); flush_last() ends as soon as the event cannot be
// delivered — given up as unreachable, which the deadline alone would not count.
TEST_CASE("notify client: the last words end as soon as nothing can reach virt-handler") {
  chl::test::TempDir dir("kvn");
  TestNotifyServer server(dir / "domain-notify-pipe.sock");
  NotifyClient client(options(dir));
  client.send_domain_event(domain(S::Shutoff, R::Shutdown), DomainEventType::Added);
  REQUIRE(client.flush(deadline(10s)));
  server.close_pipe();
  server.end_connections();
  REQUIRE(chl::test::wait_until(10s, [&] { return server.open_connections() == 0; }));
  client.send_domain_event(domain(S::NoState, R::NonExistent), DomainEventType::Modified);
  CHECK_FALSE(client.flush(deadline(100ms)));
  CHECK(client.counters().unreachable == 0);  // retried, not given up
  CHECK_FALSE(client.flush_last(deadline(120s)));
  CHECK(client.counters().unreachable == 1);  // given up because unreachable, not at the deadline
  CHECK(client.counters().domain_events_delivered == 1);
  CHECK(summary(server.received()) == std::vector<std::string>{"ADDED Shutoff/Shutdown"});
}

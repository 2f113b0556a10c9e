// The guest agent client's reconnect schedule (guest_agent/backoff.hpp): on a fake clock, the
// waits a guest without an agent, a guest whose agent comes up late and a guest that reboots
// get; then the client itself on socketpairs, with the schedule scaled down.
#include <doctest/doctest.h>

#include <thread>

#include "guest_agent/backoff.hpp"
#include "tests/guest_agent/agent_test_support.hpp"
#include "tests/support/test_support.hpp"

namespace chl::test {
namespace {

using guest_agent::BackoffOptions;
using guest_agent::ReconnectBackoff;
using std::chrono::milliseconds;
using std::chrono::seconds;
using TimePoint = ReconnectBackoff::Clock::time_point;

// Attempts that all fail, from `t` until `until`: each waits what the schedule says. Returns the
// waits in order; `t` ends at the last attempt.
std::vector<milliseconds> fail_until(ReconnectBackoff& b, TimePoint& t, TimePoint until) {
  std::vector<milliseconds> waits;
  while (t < until) {
    const auto w = b.next(t);
    waits.push_back(w);
    t += w;
  }
  return waits;
}

TEST_CASE("backoff: no agent: 1 s doubling to 10 s for five minutes and then on to one a minute") {
  const TimePoint t0{};
  ReconnectBackoff b(BackoffOptions{}, t0);
  TimePoint t = t0;
  auto waits = fail_until(b, t, t0 + seconds(300));
  REQUIRE(waits.size() >= 5);
  CHECK(waits[0] == seconds(1));
  CHECK(waits[1] == seconds(2));
  CHECK(waits[2] == seconds(4));
  CHECK(waits[3] == seconds(8));
  for (std::size_t i = 4; i < waits.size(); ++i) CHECK(waits[i] == seconds(10));
  // Every attempt in the first five minutes was at most 10 s after the one before.
  CHECK(waits.size() == 33);  // 1+2+4+8 = 15 s, then 29 × 10 s: the 33rd attempt ends at 305 s
  auto later = fail_until(b, t, t0 + seconds(3600));
  REQUIRE(later.size() >= 4);
  CHECK(later[0] == seconds(10));  // decided at 295 s, inside the five minutes
  CHECK(later[1] == seconds(20));
  CHECK(later[2] == seconds(40));
  for (std::size_t i = 3; i < later.size(); ++i) CHECK(later[i] == seconds(60));
  // The hour's cost: 33 attempts in the first five minutes, then one a minute.
  CHECK(later.size() <= 57);
}

TEST_CASE(
    "backoff: an agent that comes up late is found within a minute and the schedule is reset") {
  const TimePoint t0{};
  ReconnectBackoff b(BackoffOptions{}, t0);
  TimePoint t = t0;
  fail_until(b, t, t0 + seconds(20 * 60));
  const TimePoint agent_up = t + milliseconds(1);  // just after an attempt
  fail_until(b, t, agent_up);  // the attempt at `t` is the first after the agent came up
  CHECK(t - agent_up < seconds(60));
  b.answered();                    // it answered the sync
  CHECK(b.next(t) == seconds(1));  // a later failure is retried after 1 s again
}

TEST_CASE(
    "backoff: a guest reboot after hours connected is retried promptly again for five minutes") {
  const TimePoint t0{};
  ReconnectBackoff b(BackoffOptions{}, t0);
  TimePoint t = t0 + seconds(2);
  b.answered();  // connected 2 s after start
  t += std::chrono::hours(3);
  b.lost(t);  // the guest reboots: the connection is lost
  auto waits = fail_until(b, t, t + seconds(300));
  CHECK(waits[0] == seconds(1));
  for (const auto w : waits) CHECK(w <= seconds(10));
  CHECK(fail_until(b, t, t + seconds(200)).back() > seconds(10));  // the agent did not come back
}

TEST_CASE("backoff: an idle_max below max is taken as max (the waits never shorten)") {
  BackoffOptions o;
  o.idle_max = milliseconds(5000);  // below max: ignored, max holds
  const TimePoint t0{};
  ReconnectBackoff b(o, t0);
  TimePoint t = t0;
  auto waits = fail_until(b, t, t0 + seconds(900));
  CHECK(waits.back() == seconds(10));
}

TEST_CASE(
    "agent client: the attempts slow down once the patience is over and are prompt again "
    "after a lost connection") {
  auto shared = std::make_shared<PairConnector::Shared>();
  LoopThread loop;
  guest_agent::ClientOptions o;
  o.sync_timeout = 500ms;
  o.backoff_min = 10ms;
  o.backoff_max = 20ms;
  o.backoff_patience = 500ms;
  o.backoff_idle_max = 30000ms;
  auto client = loop.on_loop([&] {
    auto c = guest_agent::AgentClient::create(loop.io, std::make_unique<PairConnector>(shared), o);
    c->start();
    return c;
  });
  const auto attempts = [&] {
    std::lock_guard l(shared->mu);
    return shared->attempts;
  };
  // The agent answers at once; connected well past the patience.
  std::optional<FakeAgent> agent;
  {
    std::unique_lock l(shared->mu);
    REQUIRE(shared->cv.wait_for(l, 5000ms, [&] { return !shared->peers.empty(); }));
    agent.emplace(std::move(shared->peers.front()));
    shared->peers.pop_front();
  }
  REQUIRE(agent->answer_sync());
  REQUIRE(wait_until(5000ms, [&] { return loop.on_loop([&] { return client->connected(); }); }));
  std::this_thread::sleep_for(1000ms);  // twice the patience
  // The guest reboots: the connection drops and nothing listens any more.
  {
    std::lock_guard l(shared->mu);
    shared->refuse = true;
  }
  const int before = attempts();
  agent.reset();
  // Prompt: 10, 20, 20, 20 ms… for the 500 ms after the loss (~25 attempts). Were the patience
  // counted from the start (long over), the waits would double on from 10 ms: 8 attempts in 3 s,
  // 10 in 15 s. 12 within 15 s tells them apart with room for a loaded machine's late timers.
  CHECK(wait_until(15000ms, [&] { return attempts() - before >= 12; }));
  // Past the patience the waits double on toward 30 s: eventually a 2 s window passes without
  // any attempt. (Not "by 3 s": a loaded machine sees the loss, and so the patience, late.) A
  // client left at its prompt 10-20 ms would never have such a window.
  CHECK(wait_until(
      60000ms,
      [&] {
        const int settled = attempts();
        std::this_thread::sleep_for(2000ms);
        return attempts() == settled;
      },
      0ms));
  loop.on_loop([&] {
    client->stop();
    return 0;
  });
}

}  // namespace
}  // namespace chl::test

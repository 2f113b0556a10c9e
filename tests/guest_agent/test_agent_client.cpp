// The guest agent client on socketpairs: the test plays qemu-ga on the other end (framing split
// and merged, garbage, errors, a hung agent, an agent killed mid-command, a flood, an over-long
// reply) and checks what the client answers and that its loop keeps serving.
#include <doctest/doctest.h>

#include <atomic>
#include <boost/asio/steady_timer.hpp>

#include "guest_agent/framing.hpp"
#include "tests/guest_agent/agent_test_support.hpp"
#include "tests/support/test_support.hpp"

namespace chl::test {
namespace {

using guest_agent::AgentClient;
using guest_agent::FrameEvent;
using guest_agent::FrameParser;

std::vector<FrameEvent> parse_in_pieces(FrameParser& p, const std::string& s, std::size_t piece) {
  std::vector<FrameEvent> out;
  for (std::size_t i = 0; i < s.size(); i += piece)
    p.feed(std::string_view(s).substr(i, piece), out);
  return out;
}

TEST_CASE("frame parser: objects split anywhere and merged come out whole, in order") {
  const std::string stream =
      "{\"return\": {\"a\": \"}{\\\"\", \"b\": [1, {\"c\": 2}]}}\n{\"return\": "
      "7}\n\xff{\"return\": 9}\n";
  for (std::size_t piece : {1u, 2u, 3u, 7u, 1000u}) {
    FrameParser p;
    auto evs = parse_in_pieces(p, stream, piece);
    REQUIRE(evs.size() == 4);
    CHECK(evs[0].kind == FrameEvent::Kind::Frame);
    CHECK(Json::parse(evs[0].text)["return"]["a"] == "}{\"");
    CHECK(Json::parse(evs[1].text)["return"] == 7);
    CHECK(evs[2].kind == FrameEvent::Kind::Delimiter);
    CHECK(Json::parse(evs[3].text)["return"] == 9);
    CHECK(p.garbage_bytes() == 0);
  }
}

TEST_CASE(
    "frame parser: garbage is skipped and counted, 0xFF drops a partial object, overflow reported "
    "once") {
  FrameParser p(64);
  std::vector<FrameEvent> out;
  p.feed("hello\n{\"return\": {\"half", out);
  CHECK(out.empty());
  CHECK(p.garbage_bytes() == 5);
  p.feed("\xff{\"return\": 1}", out);
  REQUIRE(out.size() == 2);
  CHECK(out[0].kind == FrameEvent::Kind::Delimiter);
  CHECK(Json::parse(out[1].text)["return"] == 1);
  out.clear();
  p.feed("{\"return\": \"" + std::string(200, 'x') + "\"}{\"return\": 2}", out);
  REQUIRE(out.size() == 2);
  CHECK(out[0].kind == FrameEvent::Kind::Overflow);
  CHECK(Json::parse(out[1].text)["return"] == 2);
}

struct Fixture {
  std::shared_ptr<PairConnector::Shared> shared = std::make_shared<PairConnector::Shared>();
  LoopThread loop;
  std::shared_ptr<AgentClient> client;
  std::mutex mu;
  std::vector<bool> states;  // connected/disconnected as reported

  explicit Fixture(guest_agent::ClientOptions o = fast()) {
    client = loop.on_loop([&] {
      auto c = AgentClient::create(loop.io, std::make_unique<PairConnector>(shared), o);
      c->set_state_handler([this](bool up) {
        std::lock_guard l(mu);
        states.push_back(up);
      });
      c->start();
      return c;
    });
  }
  ~Fixture() {
    loop.on_loop([&] {
      client->stop();
      return 0;
    });
  }
  static guest_agent::ClientOptions fast() {
    guest_agent::ClientOptions o;
    o.sync_timeout = 500ms;
    o.backoff_min = 20ms;
    o.backoff_max = 100ms;
    return o;
  }
  FakeAgent next_peer(std::chrono::milliseconds timeout = 5000ms) {
    std::unique_lock l(shared->mu);
    REQUIRE(shared->cv.wait_for(l, timeout, [&] { return !shared->peers.empty(); }));
    FakeAgent a(std::move(shared->peers.front()));
    shared->peers.pop_front();
    return a;
  }
  bool connected() {
    return loop.on_loop([&] { return client->connected(); });
  }
  // Start a command; the future holds its result.
  std::future<common::Result<Json>> start(const std::string& cmd, Json args = nullptr,
                                          std::chrono::milliseconds timeout = 5000ms) {
    auto p = std::make_shared<std::promise<common::Result<Json>>>();
    auto f = p->get_future();
    boost::asio::post(loop.io, [this, cmd, args, timeout, p] {
      client->execute(cmd, args, timeout,
                      [p](common::Result<Json> r) { p->set_value(std::move(r)); });
    });
    return f;
  }
  // A connected client: accept its connection and answer the sync.
  FakeAgent connect() {
    auto a = next_peer();
    REQUIRE(a.answer_sync());
    REQUIRE(wait_until(5000ms, [&] { return connected(); }));
    return a;
  }
};

common::Result<Json> get(std::future<common::Result<Json>>& f) {
  REQUIRE(f.wait_for(10s) == std::future_status::ready);
  return f.get();
}

TEST_CASE("agent client: connects only after the agent answers guest-sync-delimited with our id") {
  Fixture fx;
  auto a = fx.next_peer();
  auto sync = a.request();
  REQUIRE(sync);
  CHECK(static_cast<unsigned char>((*sync)[0]) == 0xFF);  // qemu-ga's parser is flushed first
  const Json req = Json::parse(sync->substr(1));
  CHECK(req["execute"] == "guest-sync-delimited");
  CHECK_FALSE(fx.connected());
  // A wrong id (a reply meant for someone else) does not connect.
  REQUIRE(a.send("\xff{\"return\": " + std::to_string(req["arguments"]["id"].get<long long>() + 1) +
                 "}\n"));
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(fx.connected());
  // Commands are refused while not connected.
  auto early = fx.start("guest-ping");
  auto r = get(early);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == std::errc::not_connected);
  REQUIRE(a.send("\xff{\"return\": " + req["arguments"]["id"].dump() + "}\n"));
  CHECK(wait_until(5000ms, [&] { return fx.connected(); }));
  std::lock_guard l(fx.mu);
  CHECK(fx.states == std::vector<bool>{true});
}

TEST_CASE(
    "agent client: a reply split into single bytes, and one merged with a stray, each reach their "
    "command") {
  Fixture fx;
  auto a = fx.next_peer();
  // The sync's answer arrives merged with garbage and a stray reply before it (a late answer
  // of an earlier client), all in one write.
  auto sync = a.command();
  REQUIRE(sync);
  REQUIRE(a.send("junk {\"return\": \"stray\"}\n\xff{\"return\": " +
                 (*sync)["arguments"]["id"].dump() + "}\n"));
  REQUIRE(wait_until(5000ms, [&] { return fx.connected(); }));

  auto f = fx.start("guest-info");
  auto c = a.command();
  REQUIRE(c);
  CHECK(*c == Json{{"execute", "guest-info"}});
  const std::string reply =
      R"({"return": {"version": "7.2.22", "supported_commands": [{"name": "guest-ping", "enabled": true}]}})";
  for (char ch : reply + "\n") REQUIRE(a.send(std::string(1, ch)));
  auto r = get(f);
  REQUIRE(r);
  CHECK((*r)["version"] == "7.2.22");

  // Two replies in one write, for two commands queued back to back: one command in flight at a
  // time, so the second is written only after the first is answered.
  auto f1 = fx.start("guest-get-host-name");
  auto f2 = fx.start("guest-get-timezone");
  REQUIRE(a.command()->value("execute", "") == "guest-get-host-name");
  CHECK_FALSE(a.request(100ms));  // the second is not on the wire yet
  REQUIRE(a.send("{\"return\": {\"host-name\": \"vm1\"}}\n"));
  REQUIRE(a.command()->value("execute", "") == "guest-get-timezone");
  REQUIRE(a.send("{\"return\": {\"offset\": 0}}\n"));
  CHECK((*get(f1))["host-name"] == "vm1");
  CHECK((*get(f2))["offset"] == 0);
  CHECK(fx.loop.on_loop([&] { return fx.client->stats().garbage_bytes; }) >= 4);
  CHECK(fx.loop.on_loop([&] { return fx.client->stats().stray_replies; }) == 1);
}

TEST_CASE(
    "agent client: the agent's error names the command, class and description, arguments are "
    "sent") {
  Fixture fx;
  auto a = fx.connect();
  auto f = fx.start("guest-exec-status", {{"pid", 42}});
  auto c = a.command();
  REQUIRE(c);
  CHECK((*c)["arguments"]["pid"] == 42);
  REQUIRE(a.send(R"({"error": {"class": "GenericError", "desc": "Invalid parameter 'pid'"}})"
                 "\n"));
  auto r = get(f);
  REQUIRE_FALSE(r);
  CHECK(r.error().message() == "guest-exec-status: GenericError: Invalid parameter 'pid'");
}

TEST_CASE(
    "agent client: a hung agent times the command out, the next command resyncs first and the late "
    "reply is dropped") {
  Fixture fx;
  auto a = fx.connect();
  auto f = fx.start("guest-get-fsinfo", nullptr, 200ms);
  REQUIRE(a.command()->value("execute", "") == "guest-get-fsinfo");
  auto r = get(f);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == std::errc::timed_out);
  CHECK(fx.connected());  // a slow command is not a lost connection

  auto g = fx.start("guest-ping");
  // The late reply of the first command, then the resync the client asks for before "guest-ping".
  REQUIRE(a.send("{\"return\": [{\"name\": \"late\"}]}\n"));
  REQUIRE(a.answer_sync());
  REQUIRE(a.command()->value("execute", "") == "guest-ping");
  REQUIRE(a.send("{\"return\": {}}\n"));
  auto pr = get(g);
  REQUIRE(pr);
  CHECK(*pr == Json::object());
}

TEST_CASE(
    "agent client: an agent that never answers the sync is dropped and retried with backoff") {
  Fixture fx;
  auto a = fx.next_peer();
  REQUIRE(a.command());           // the sync; never answered
  auto b = fx.next_peer(3000ms);  // reconnected after sync_timeout + backoff
  REQUIRE(b.answer_sync());
  CHECK(wait_until(5000ms, [&] { return fx.connected(); }));
}

TEST_CASE(
    "agent client: the agent killed mid-command fails the command and the queue, reconnects, "
    "states reported") {
  Fixture fx;
  auto a = fx.connect();
  auto f1 = fx.start("guest-get-users");
  auto f2 = fx.start("guest-get-osinfo");
  REQUIRE(a.command()->value("execute", "") == "guest-get-users");
  a.close();
  auto r1 = get(f1);
  auto r2 = get(f2);
  REQUIRE_FALSE(r1);
  REQUIRE_FALSE(r2);
  CHECK(r1.error().code == std::errc::connection_aborted);
  CHECK(r1.error().message().find("guest-get-users") == 0);
  CHECK(r2.error().code == std::errc::connection_aborted);
  auto b = fx.connect();
  std::lock_guard l(fx.mu);
  CHECK(fx.states == std::vector<bool>{true, false, true});
}

TEST_CASE(
    "agent client: an agent flooding the channel does not starve the loop, a reply after the flood "
    "arrives") {
  Fixture fx;
  auto a = fx.connect();
  std::atomic<int> ticks{0};
  boost::asio::steady_timer timer(fx.loop.io);
  std::function<void()> tick = [&] {
    timer.expires_after(5ms);
    timer.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      ++ticks;
      tick();
    });
  };
  fx.loop.on_loop([&] {
    tick();
    return 0;
  });
  auto f = fx.start("guest-get-users", nullptr, 20000ms);
  REQUIRE(a.command());
  // ~64 MiB of stray replies and garbage, written from another thread.
  std::thread flood([&] {
    const std::string chunk = [] {
      std::string s;
      while (s.size() < (1u << 20)) s += "{\"noise\": [1, {\"x\": \"}\"}]}\nnoise ";
      return s;
    }();
    for (int i = 0; i < 64; ++i)
      if (!a.send(chunk)) return;
    a.send("\xff{\"return\": [{\"user\": \"root\", \"login-time\": 1.5}]}\n");
  });
  const int before = ticks.load();
  auto r = get(f);
  flood.join();
  fx.loop.on_loop([&] {
    timer.cancel();
    return 0;
  });
  REQUIRE(r);
  CHECK((*r)[0]["user"] == "root");
  CHECK(ticks.load() > before);  // the loop kept running other work during the flood
  CHECK(fx.connected());
}

TEST_CASE("agent client: a reply longer than the limit drops the connection, which comes back") {
  auto o = Fixture::fast();
  o.max_frame = 1024;
  Fixture fx(o);
  auto a = fx.connect();
  auto f = fx.start("guest-get-fsinfo");
  REQUIRE(a.command());
  REQUIRE(a.send("{\"return\": \"" + std::string(4096, 'x') + "\"}\n"));
  auto r = get(f);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == std::errc::connection_aborted);
  CHECK(r.error().message().find("longer than 1024 bytes") != std::string::npos);
  auto b = fx.connect();
}

TEST_CASE(
    "agent client: a command with no reply (guest-shutdown) completes once written, a full queue "
    "refuses") {
  auto o = Fixture::fast();
  o.max_queue = 2;
  Fixture fx(o);
  auto a = fx.connect();
  auto p = std::make_shared<std::promise<common::Result<Json>>>();
  auto fs = p->get_future();
  boost::asio::post(fx.loop.io, [&, p] {
    fx.client->execute(
        "guest-shutdown", {{"mode", "reboot"}}, 1000ms,
        [p](common::Result<Json> r) { p->set_value(std::move(r)); }, false);
  });
  auto c = a.command();
  REQUIRE(c);
  CHECK((*c)["arguments"]["mode"] == "reboot");
  REQUIRE(get(fs));

  auto f1 = fx.start("guest-ping");  // in flight
  REQUIRE(a.command());
  auto f2 = fx.start("guest-ping");
  auto f3 = fx.start("guest-ping");
  auto f4 = fx.start("guest-ping");  // beyond max_queue
  auto r4 = get(f4);
  REQUIRE_FALSE(r4);
  CHECK(r4.error().code == std::errc::resource_unavailable_try_again);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(a.send("{\"return\": {}}\n"));
    if (i < 2) REQUIRE(a.command());
  }
  CHECK(get(f1));
  CHECK(get(f2));
  CHECK(get(f3));
}

// A CommandTransport the test drives (libvirt's role on the QEMU path): the commands it got, the
// replies the test gives, the states it reports, all on the client's loop.
class FakeTransport final : public guest_agent::CommandTransport {
 public:
  explicit FakeTransport(boost::asio::io_context& io) : io_(io) {}
  void watch(StateHandler h) override {
    on_state_ = std::move(h);
    if (on_state_)
      boost::asio::post(io_, [this] {
        if (on_state_) on_state_(up_);
      });
  }
  void async_command(guest_agent::TransportCommand c, Done done) override {
    std::lock_guard l(mu_);
    got_.push_back(std::move(c));
    pending_.push_back(std::move(done));
  }
  std::string describe() const override { return "fake transport"; }
  // Test thread: report a state, answer the oldest command.
  void set_up(bool up) {
    boost::asio::post(io_, [this, up] {
      up_ = up;
      if (on_state_) on_state_(up);
    });
  }
  bool answer(common::Result<std::string> r) {
    Done d;
    {
      std::lock_guard l(mu_);
      if (pending_.empty()) return false;
      d = std::move(pending_.front());
      pending_.pop_front();
    }
    boost::asio::post(io_, [d = std::move(d), r = std::move(r)] { d(r); });
    return true;
  }
  std::vector<guest_agent::TransportCommand> got() {
    std::lock_guard l(mu_);
    return got_;
  }

 private:
  boost::asio::io_context& io_;
  StateHandler on_state_;
  bool up_ = false;
  std::mutex mu_;
  std::vector<guest_agent::TransportCommand> got_;
  std::deque<Done> pending_;
};

TEST_CASE(
    "agent client over a command transport (libvirt's role): connected from the transport's "
    "report, commands one at a time with their arguments, return and error read, a timeout, a "
    "disconnect fails what is queued and leaves the command in flight to the transport") {
  LoopThread loop;
  auto t = std::make_shared<FakeTransport>(loop.io);
  auto client = loop.on_loop([&] { return AgentClient::create(loop.io, t); });
  std::atomic<int> ups{0}, downs{0};
  loop.on_loop([&] {
    client->set_state_handler([&](bool up) { (up ? ups : downs)++; });
    client->start();
    return 0;
  });
  auto start = [&](std::string cmd, Json args = nullptr, std::chrono::milliseconds to = 5000ms) {
    auto p = std::make_shared<std::promise<common::Result<Json>>>();
    auto f = p->get_future();
    boost::asio::post(loop.io, [&, p, cmd, args, to] {
      client->execute(cmd, args, to, [p](common::Result<Json> r) { p->set_value(std::move(r)); });
    });
    return f;
  };
  // Not connected yet: refused at once, nothing sent.
  auto f0 = start("guest-ping");
  auto r0 = get(f0);
  REQUIRE_FALSE(r0);
  CHECK(r0.error().code == std::errc::not_connected);
  CHECK(t->got().empty());

  t->set_up(true);
  REQUIRE(wait_until(5s, [&] { return ups == 1; }));
  CHECK(loop.on_loop([&] { return client->connected(); }));
  CHECK(loop.on_loop([&] { return client->describe(); }) == "fake transport");
  auto f1 = start("guest-exec", Json{{"path", "/bin/true"}});
  auto f2 = start("guest-info");
  REQUIRE(wait_until(5s, [&] { return t->got().size() == 1; }));
  std::this_thread::sleep_for(100ms);
  CHECK(t->got().size() == 1);  // one in flight
  CHECK(t->got()[0].command == "guest-exec");
  CHECK(t->got()[0].arguments == Json{{"path", "/bin/true"}});
  CHECK(Json::parse(t->got()[0].wire) ==
        Json{{"execute", "guest-exec"}, {"arguments", {{"path", "/bin/true"}}}});
  REQUIRE(t->answer(std::string(R"({"return": {"pid": 7}})")));
  auto r1 = get(f1);
  REQUIRE(r1);
  CHECK((*r1)["pid"] == 7);
  REQUIRE(wait_until(5s, [&] { return t->got().size() == 2; }));
  REQUIRE(t->answer(std::string(R"({"error": {"class": "GenericError", "desc": "nope"}})")));
  auto r2 = get(f2);
  REQUIRE_FALSE(r2);
  CHECK(r2.error().message() == "guest-info: GenericError: nope");

  // The transport's own error names the command; an answer that never comes times out and the
  // late one is dropped.
  auto f3 = start("guest-ping");
  REQUIRE(wait_until(5s, [&] { return t->got().size() == 3; }));
  REQUIRE(t->answer(common::fail(std::errc::timed_out, "libvirt: agent not responding")));
  auto r3 = get(f3);
  REQUIRE_FALSE(r3);
  CHECK(r3.error().message().find("guest-ping") == 0);
  auto f4 = start("guest-ping", nullptr, 200ms);
  auto r4 = get(f4);
  REQUIRE_FALSE(r4);
  CHECK(r4.error().code == std::errc::timed_out);
  REQUIRE(t->answer(std::string(R"({"return": {}})")));  // the late reply: nobody's

  // Disconnected: what is queued fails at once, later commands are refused; the command in
  // flight is the transport's until it answers (libvirt's virDomainReboot returns after the
  // agent went down with the guest).
  auto f5 = start("guest-shutdown", Json{{"mode", "reboot"}});
  auto f6 = start("guest-get-fsinfo");
  REQUIRE(wait_until(5s, [&] { return t->got().size() == 5; }));
  t->set_up(false);
  auto r6 = get(f6);
  REQUIRE_FALSE(r6);
  CHECK(r6.error().code == std::errc::connection_aborted);
  REQUIRE(wait_until(5s, [&] { return downs == 1; }));
  CHECK_FALSE(loop.on_loop([&] { return client->connected(); }));
  auto f7 = start("guest-ping");
  auto r7 = get(f7);
  REQUIRE_FALSE(r7);
  CHECK(r7.error().code == std::errc::not_connected);
  CHECK(f5.wait_for(200ms) == std::future_status::timeout);
  REQUIRE(t->answer(std::string(R"({"return": {}})")));
  CHECK(get(f5));
  t->set_up(true);  // back: usable again
  REQUIRE(wait_until(5s, [&] { return ups == 2; }));
  auto f8 = start("guest-ping");
  REQUIRE(wait_until(5s, [&] { return t->got().size() == 6; }));
  REQUIRE(t->answer(std::string(R"({"return": {}})")));
  CHECK(get(f8));
  loop.on_loop([&] {
    client->stop();
    return 0;
  });
}

}  // namespace
}  // namespace chl::test

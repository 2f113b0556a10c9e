// The agent client and the poller against a REAL qemu-ga (started on the host in unix-listen
// mode, dangerous commands blocked: host_qemu_ga.hpp).
#include <doctest/doctest.h>

#include "guest_agent/exec.hpp"
#include "guest_agent/poller.hpp"
#include "tests/guest_agent/agent_test_support.hpp"
#include "tests/guest_agent/host_qemu_ga.hpp"

namespace chl::test {
namespace {

using guest_agent::AgentClient;

struct RealAgent {
  TempDir dir{"ga"};
  std::optional<HostQemuGa> ga;
  LoopThread loop;
  std::shared_ptr<AgentClient> client;

  bool up() {
    std::string why;
    ga = HostQemuGa::start(dir.path(), dir / "qga.sock", why);
    if (!ga) {
      skip(why);
      return false;
    }
    client = loop.on_loop([&] {
      auto c = AgentClient::create(loop.io, guest_agent::unix_connector(dir / "qga.sock"));
      c->start();
      return c;
    });
    REQUIRE(wait_until(10000ms, [&] { return loop.on_loop([&] { return client->connected(); }); }));
    return true;
  }
  ~RealAgent() {
    if (client)
      loop.on_loop([&] {
        client->stop();
        return 0;
      });
  }
  common::Result<Json> call(const std::string& cmd, Json args = nullptr) {
    auto p = std::make_shared<std::promise<common::Result<Json>>>();
    auto f = p->get_future();
    boost::asio::post(loop.io, [&, cmd, args, p] {
      client->execute(cmd, args, 5000ms,
                      [p](common::Result<Json> r) { p->set_value(std::move(r)); });
    });
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    return f.get();
  }
  common::Result<guest_agent::ExecResult> exec(const std::string& path,
                                               std::vector<std::string> args) {
    auto p = std::make_shared<std::promise<common::Result<guest_agent::ExecResult>>>();
    auto f = p->get_future();
    boost::asio::post(loop.io, [&, path, args, p] {
      guest_agent::guest_exec(
          loop.io, client, path, args, std::chrono::seconds(5),
          [p](common::Result<guest_agent::ExecResult> r) { p->set_value(std::move(r)); });
    });
    REQUIRE(f.wait_for(20s) == std::future_status::ready);
    return f.get();
  }
};

TEST_CASE(
    "real qemu-ga: sync, guest-info with its real command list, the blocked commands disabled, "
    "guest-ping") {
  RealAgent a;
  if (!a.up()) return;
  auto info = a.call("guest-info");
  REQUIRE(info);
  CHECK_FALSE((*info)["version"].get<std::string>().empty());
  std::map<std::string, bool> enabled;
  for (const auto& c : (*info)["supported_commands"]) enabled[c["name"]] = c["enabled"];
  // Everything KubeVirt requires (pkg/virt-handler/guestagent.go) is there.
  for (const char* c : {"guest-ping", "guest-get-time", "guest-info", "guest-shutdown",
                        "guest-network-get-interfaces", "guest-get-fsinfo", "guest-get-host-name",
                        "guest-get-users", "guest-get-timezone", "guest-get-osinfo"})
    CHECK_MESSAGE(enabled.count(c) == 1, c);
  // The safety net of this host agent holds.
  for (const char* c :
       {"guest-fsfreeze-freeze", "guest-fsfreeze-thaw", "guest-shutdown", "guest-set-time",
        "guest-ssh-add-authorized-keys", "guest-file-open", "guest-set-user-password"})
    CHECK_MESSAGE(enabled[c] == false, c);
  auto ping = a.call("guest-ping");
  REQUIRE(ping);
  CHECK(*ping == Json::object());
  auto refused = a.call("guest-shutdown", {{"mode", "powerdown"}});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message().find("guest-shutdown: CommandNotFound") == 0);
}

TEST_CASE(
    "real qemu-ga: exec returns stdout and the exit code, a non-zero exit is a result, a missing "
    "program an error") {
  RealAgent a;
  if (!a.up()) return;
  auto echo = a.exec("/bin/echo", {"hello", "agent"});
  REQUIRE(echo);
  CHECK(echo->exit_code == 0);
  CHECK(echo->out == "hello agent\n");
  auto f = a.exec("/bin/false", {});
  REQUIRE(f);
  CHECK(f->exit_code == 1);
  auto t = a.exec("/bin/true", {});
  REQUIRE(t);
  CHECK(t->exit_code == 0);
  auto missing = a.exec("/nonexistent/program", {});
  // qemu-ga 7.2 forks first: the child's execvp fails and it exits 127 (qga/commands.c).
  if (missing) CHECK(missing->exit_code != 0);
}

TEST_CASE(
    "real qemu-ga: the poller fills its cache (OS, host name, interfaces, users, filesystems, "
    "freeze status)") {
  RealAgent a;
  if (!a.up()) return;
  guest_agent::PollerOptions o;
  o.initial = 200ms;
  auto poller = a.loop.on_loop([&] {
    auto p = guest_agent::Poller::create(a.loop.io, a.client, o);
    p->start();
    return p;
  });
  auto cache = [&] { return a.loop.on_loop([&] { return poller->cache(); }); };
  REQUIRE(wait_until(10000ms, [&] {
    auto c = cache();
    return !c.info.is_null() && !c.os_info.is_null() && !c.interfaces.is_null() &&
           !c.fs_info.is_null() && !c.host_name.is_null() && !c.users.is_null() &&
           !c.fs_freeze.empty();
  }));
  auto c = cache();
  CHECK(c.os_info.value("id", "") != "");
  CHECK(c.host_name.value("host-name", "") != "");
  CHECK(c.fs_freeze == "thawed");
  bool lo = false;
  for (const auto& i : c.interfaces) lo = lo || i.value("name", "") == "lo";
  CHECK(lo);
  a.loop.on_loop([&] {
    poller->stop();
    return 0;
  });
}

TEST_CASE("real qemu-ga: killed, the client reports disconnected, started again, it reconnects") {
  RealAgent a;
  if (!a.up()) return;
  a.ga->kill();
  CHECK(wait_until(5000ms, [&] { return !a.loop.on_loop([&] { return a.client->connected(); }); }));
  std::filesystem::remove(a.dir / "qga.sock");
  std::string why;
  a.ga = HostQemuGa::start(a.dir.path(), a.dir / "qga.sock", why);
  REQUIRE_MESSAGE(a.ga, why);
  CHECK(wait_until(20000ms, [&] { return a.loop.on_loop([&] { return a.client->connected(); }); }));
  CHECK(a.call("guest-ping"));
}

}  // namespace
}  // namespace chl::test

// The virt-handler stand-in's end-of-life loop fails where virt-handler fails: a launcher that
// sends its final NoState and leaves (launcher-sock removed) before virt-handler's busy worker
// has handled Shutoff gets its VMI marked Failed, not Succeeded (kubevirt-domain-contract.md
// §2.5) — the defect of issue 29, item 4. A launcher that waits for DeleteDomain, as KubeVirt's,
// gets Succeeded. A fake launcher: our command server and notify client over a handler that only
// records what it was asked.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "kubevirt/cmd_handler.hpp"
#include "kubevirt/cmd_server.hpp"
#include "kubevirt/domain_json.hpp"
#include "kubevirt/notify_client.hpp"
#include "tests/kubevirt/test_notify_server.hpp"
#include "tests/kubevirt/virt_handler_loop.hpp"
#include "tests/support/test_support.hpp"

namespace {
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using chl::common::Result;
using chl::common::Status;
using chl::events::DomainState;
using chl::events::StateReason;
using chl::kubevirt::DomainEventType;

struct FakeLauncher final : chl::kubevirt::CmdHandler {
  std::atomic<int> shutdowns{0}, kills{0}, deletes{0};
  Status sync(std::string_view, const chl::kubevirt::SyncOptions&) override { return {}; }
  Status pause(std::string_view) override { return {}; }
  Status unpause(std::string_view) override { return {}; }
  Status shutdown(std::string_view) override {
    ++shutdowns;
    return {};
  }
  Status kill(std::string_view) override {
    ++kills;
    return {};
  }
  Status delete_domain(std::string_view) override {
    ++deletes;
    return {};
  }
  Status soft_reboot(std::string_view) override { return {}; }
  Status reset(std::string_view) override { return {}; }
  Status ping() override { return {}; }
  Result<std::string> get_domain() override { return std::string(); }
  Result<std::string> get_domain_stats() override { return std::string(); }
  Result<std::string> get_qemu_version() override { return std::string("fake"); }
  Status sync_cpus(std::string_view) override { return {}; }
  Status sync_memory(std::string_view) override { return {}; }
};

const char* kVmi =
    R"({"metadata":{"name":"vm","namespace":"default","uid":"u1"},"spec":{"terminationGracePeriodSeconds":10},"status":{"phase":"Running"}})";

chl::kubevirt::DomainDocument domain(DomainState s, StateReason r) {
  chl::kubevirt::DomainDocument d;
  d.vmi_name = "vm";
  d.vmi_namespace = "default";
  d.vmi_uid = "u1";
  d.grace_period_seconds = 10;
  d.state = s;
  d.reason = r;
  return d;
}

struct Setup {
  chl::test::TempDir dir{"chl-vhloop"};
  FakeLauncher handler;
  std::unique_ptr<chl::test::TestNotifyServer> informer;
  std::unique_ptr<chl::kubevirt::CmdServer> server;
  std::unique_ptr<chl::kubevirt::NotifyClient> notify;
  Setup() {
    informer =
        std::make_unique<chl::test::TestNotifyServer>(dir.path() / "domain-notify-pipe.sock");
    chl::kubevirt::CmdServerOptions so;
    so.share_dir = dir.path();
    auto s = chl::kubevirt::CmdServer::start(so, handler);
    REQUIRE(s);
    server = std::move(*s);
    chl::kubevirt::NotifyClientOptions no;
    no.socket_path = (dir.path() / "domain-notify-pipe.sock").string();
    notify = std::make_unique<chl::kubevirt::NotifyClient>(no);
  }
  void send(const chl::kubevirt::DomainDocument& d) {
    notify->send_domain_event(chl::kubevirt::to_domain_json(d).dump(), DomainEventType::Modified);
    REQUIRE(notify->flush(std::chrono::steady_clock::now() + 5s));
  }
  chl::test::VirtHandlerLoop loop() {
    chl::test::VirtHandlerLoopOptions o;
    o.launcher_socket = chl::kubevirt::ready_socket_path(dir.path());
    o.vmi_json = kVmi;
    o.busy_delay = 1s;
    return chl::test::VirtHandlerLoop(o, *informer);
  }
};

}  // namespace

TEST_CASE(
    "virt-handler stand-in: a launcher that leaves before DeleteDomain -> Failed (the race of "
    "contract §2.5)") {
  Setup s;
  s.send(domain(DomainState::Running, StateReason::Unknown));
  auto loop = s.loop();
  REQUIRE(loop.run(200ms) == false);  // Running: a Sync, nothing else
  CHECK(loop.phase() == "Running");
  // The guest powers off; ~100 ms later the launcher sends its final NoState and exits.
  s.send(domain(DomainState::Shutoff, StateReason::Shutdown));
  std::this_thread::sleep_for(100ms);
  auto gone = domain(DomainState::NoState, StateReason::NonExistent);
  gone.deletion_timestamp = std::chrono::system_clock::now();
  s.send(gone);
  s.server.reset();  // launcher-sock removed
  CHECK_FALSE(fs::exists(chl::kubevirt::ready_socket_path(s.dir.path())));
  loop.run(5s);
  INFO(loop.log());
  CHECK(loop.phase() == "Failed");  // no domain, no launcher: "launcher unresponsive"
  CHECK(s.handler.deletes == 0);    // the Ping before DeleteDomain failed: skipped silently
}

TEST_CASE("virt-handler stand-in: a launcher that waits for DeleteDomain -> Succeeded") {
  Setup s;
  s.send(domain(DomainState::Running, StateReason::Unknown));
  auto loop = s.loop();
  (void)loop.run(200ms);
  s.send(domain(DomainState::Shutoff, StateReason::Shutdown));
  std::thread launcher([&] {  // the final NoState only after DeleteDomain
    (void)chl::test::wait_until(10s, [&] { return s.handler.deletes > 0; });
    auto gone = domain(DomainState::NoState, StateReason::NonExistent);
    gone.deletion_timestamp = std::chrono::system_clock::now();
    s.send(gone);
  });
  const bool done = loop.run(10s);
  launcher.join();
  INFO(loop.log());
  CHECK(done);
  CHECK(loop.phase() == "Succeeded");
  CHECK(s.handler.deletes == 1);
  CHECK(s.handler.shutdowns == 0);
  // The DeleteDomain came a busy worker's delay after the Shutoff, with a Ping before it.
  const auto del = loop.actions("DeleteDomain");
  REQUIRE(del.size() == 1);
  CHECK(del[0].at_s >= 1.0);
}

TEST_CASE("virt-handler stand-in: a domain without a grace period is killed at once, no Shutdown") {
  Setup s;
  auto no_grace = domain(DomainState::Running, StateReason::Unknown);
  no_grace.grace_period_seconds = 0;
  s.send(no_grace);
  chl::test::VirtHandlerLoopOptions o;
  o.launcher_socket = chl::kubevirt::ready_socket_path(s.dir.path());
  o.vmi_json =
      R"({"metadata":{"name":"vm","namespace":"default","uid":"u1"},"spec":{},"status":{"phase":"Running"}})";
  chl::test::VirtHandlerLoop loop(o, *s.informer);  // TGPS nil: the domain's seconds decide
  loop.delete_vmi();
  (void)loop.run(500ms);
  INFO(loop.log());
  CHECK(s.handler.kills >= 1);
  CHECK(s.handler.shutdowns == 0);
}

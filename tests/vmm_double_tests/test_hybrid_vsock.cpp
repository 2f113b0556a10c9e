// The double's hybrid vsock as a test of Cloud Hypervisor v52's (virtio-devices/src/vsock/unix/
// muxer.rs): the socket is bound at vm.boot and removed at shutdown; "CONNECT <port>\n" answers
// "OK <local port>\n" when the guest listens on the port, and the stream then reaches it; no
// listener: the stream is closed without an answer; a guest that never answers: closed after the
// 2 s connection-request timeout; a malformed request: closed. The pretend guest's listener on
// port 1024 is a REAL qemu-ga on the host (tests/guest_agent/host_qemu_ga.hpp), reached through
// the launcher's own hybrid-vsock connector as well. A real cloud-hypervisor needs a guest
// running qemu-ga on vsock, which the project's PVH guest is not: skipped there, saying so.
#include <doctest/doctest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/child_process.hpp"
#include "common/unix_socket.hpp"
#include "guest_agent/connector.hpp"
#include "tests/support/real_vmm_limits.hpp"
#include "tests/guest_agent/agent_test_support.hpp"
#include "tests/guest_agent/host_qemu_ga.hpp"
#include "tests/support/test_support.hpp"
#include "vmm_api/client.hpp"

extern char** environ;

namespace chl::test {
namespace {

// Connect, send `request`, read until EOF or `limit` (ms). Returns what came back, and whether
// the stream was closed.
struct Exchange {
  std::string reply;
  bool closed = false;
  std::chrono::milliseconds took{};
};
Exchange exchange(const std::filesystem::path& sock, const std::string& request,
                  std::chrono::milliseconds limit, const std::string& stop_at = "\n") {
  Exchange x;
  auto fd = common::connect_unix(sock);
  REQUIRE_MESSAGE(fd, (fd ? "" : fd.error().message()));
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(::write(fd->get(), request.data(), request.size()) ==
          static_cast<ssize_t>(request.size()));
  for (;;) {
    const auto left = limit - std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::steady_clock::now() - start);
    if (left.count() <= 0) break;
    pollfd p{fd->get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char b[512];
    const ssize_t n = ::read(fd->get(), b, sizeof b);
    if (n <= 0) {
      x.closed = true;
      break;
    }
    x.reply.append(b, static_cast<std::size_t>(n));
    if (x.reply.find(stop_at) != std::string::npos) break;
  }
  x.took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start);
  return x;
}

TEST_CASE(
    "hybrid vsock: bound at boot, CONNECT/OK to a listening port (a real qemu-ga behind), closed "
    "when nothing listens, after 2 s when the guest is silent, on a malformed request, removed at "
    "shutdown") {
  if (const auto no_agent = chl::test::real_vmm_has_no_guest_agent()) {
    chl::test::skip(*no_agent);
    return;
  }
  TempDir dir("hvs");
  std::string why;
  auto ga = HostQemuGa::start(dir / "ga", dir / "qga.sock", why);
  if (!ga) {
    skip(why);
    return;
  }
  common::SpawnOptions so;
  so.argv = {vmm_binary(), "--api-socket", "path=" + (dir / "api.sock").string()};
  for (char** e = environ; *e; ++e) so.env.emplace_back(*e);
  so.env.push_back("VMM_DOUBLE_VSOCK_LISTEN=1024=" + (dir / "qga.sock").string() + ",1025=silent");
  auto vmm = common::ChildProcess::spawn(so);
  REQUIRE(vmm);
  vmm_api::Client api((dir / "api.sock").string());
  REQUIRE(wait_until(10s, [&] { return api.vmm_ping().has_value(); }));
  write_file(dir / "kernel", "not a kernel\n");
  vmm_api::VmConfig c;
  c.payload.kernel = (dir / "kernel").string();
  c.vsock = vmm_api::VsockConfig{};
  c.vsock->cid = 3;
  c.vsock->socket = (dir / "v.sock").string();
  REQUIRE(api.vm_create(c));
  CHECK_FALSE(std::filesystem::exists(dir / "v.sock"));  // CH creates devices at boot
  REQUIRE(api.vm_boot());
  REQUIRE(std::filesystem::exists(dir / "v.sock"));

  // The guest listens on 1024: OK <port from 2^30>, then the agent's own answers.
  auto ok = exchange(dir / "v.sock", "connect 1024\n", 5000ms);
  REQUIRE_MESSAGE(ok.reply.rfind("OK ", 0) == 0, ok.reply);
  CHECK(std::stoull(ok.reply.substr(3)) >= (1ull << 30));
  auto sync = exchange(
      dir / "v.sock",
      "CONNECT 1024\n\xff{\"execute\":\"guest-sync-delimited\",\"arguments\":{\"id\":77}}\n",
      5000ms, "77");
  CHECK_MESSAGE(sync.reply.find("\xff{\"return\": 77}") != std::string::npos, sync.reply);

  // Nothing listens on 9: the guest's RST, the stream closed without an answer.
  auto rst = exchange(dir / "v.sock", "CONNECT 9\n", 5000ms);
  CHECK(rst.closed);
  CHECK(rst.reply.empty());
  // A silent guest: the 2 s connection-request timeout.
  auto silent = exchange(dir / "v.sock", "CONNECT 1025\n", 6000ms);
  CHECK(silent.closed);
  CHECK(silent.reply.empty());
  CHECK(silent.took >= 1500ms);
  // Not a CONNECT: closed.
  auto bad = exchange(dir / "v.sock", "HELLO 1024\n", 5000ms);
  CHECK(bad.closed);
  CHECK(bad.reply.empty());

  // The launcher's connector and client through it, to the real agent.
  {
    LoopThread loop;
    auto client = loop.on_loop([&] {
      auto cl = guest_agent::AgentClient::create(
          loop.io, guest_agent::hybrid_vsock_connector(dir / "v.sock", 1024));
      cl->start();
      return cl;
    });
    REQUIRE(wait_until(10s, [&] { return loop.on_loop([&] { return client->connected(); }); }));
    auto p = std::make_shared<std::promise<common::Result<Json>>>();
    auto f = p->get_future();
    boost::asio::post(loop.io, [&, p] {
      client->execute("guest-get-host-name", nullptr, 5000ms,
                      [p](common::Result<Json> r) { p->set_value(std::move(r)); });
    });
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    auto r = f.get();
    REQUIRE(r);
    CHECK_FALSE((*r)["host-name"].get<std::string>().empty());
    loop.on_loop([&] {
      client->stop();
      return 0;
    });
  }

  REQUIRE(api.vm_shutdown());
  CHECK_FALSE(std::filesystem::exists(dir / "v.sock"));  // vsock/device.rs:533
  (void)api.vmm_shutdown();
  (void)vmm->wait_for(5000ms);
}

}  // namespace
}  // namespace chl::test

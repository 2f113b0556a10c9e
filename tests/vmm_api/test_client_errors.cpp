// Every error class of vmm_api::Client, against small in-test servers (independent of the
// VMM double's fault injection), plus fd passing and call serialization.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "tests/support/test_support.hpp"
#include "tests/vmm_api/fake_server.hpp"
#include "vmm_api/client.hpp"

using namespace chl::vmm_api;
using chl::test::FakeRequest;
using chl::test::FakeServer;
using chl::test::http_response;
using chl::test::TempDir;
using namespace std::chrono_literals;

namespace {

ClientOptions fast_options() {
  ClientOptions o;
  o.timeout = 300ms;
  o.long_timeout = 300ms;
  o.migration_timeout = 300ms;
  return o;
}

std::string request_line(const FakeRequest& r) { return r.raw.substr(0, r.raw.find("\r\n")); }

}  // namespace

TEST_CASE("socket absent: socket_missing naming the path") {
  TempDir dir("chl-api");
  Client c((dir / "nope.sock").string(), fast_options());
  auto r = c.vm_info();
  REQUIRE_FALSE(r);
  CHECK(is(r.error(), ApiErrc::socket_missing));
  CHECK_FALSE(http_status(r.error()));
  CHECK(r.error().message().find("GET vm.info: API socket ") == 0);
  CHECK(r.error().message().find("nope.sock does not exist") != std::string::npos);
}

TEST_CASE("a socket file with nobody listening: connection_refused") {
  TempDir dir("chl-api");
  const std::string path = (dir / "stale.sock").string();
  chl::test::leave_stale_socket(path);  // what a SIGKILLed VMM leaves behind
  Client c(path, fast_options());
  auto r = c.vm_boot();
  REQUIRE_FALSE(r);
  CHECK(is(r.error(), ApiErrc::connection_refused));
  CHECK(r.error().message().find("PUT vm.boot: ") == 0);
}

TEST_CASE("a server that accepts and never answers: timeout within the budget") {
  TempDir dir("chl-api");
  const std::string path = (dir / "api.sock").string();
  FakeServer server(path, [](FakeRequest&) { return std::nullopt; });
  Client c(path, fast_options());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c.vm_pause();
  const auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE_FALSE(r);
  CHECK(is(r.error(), ApiErrc::timeout));
  CHECK(r.error().message() == "PUT vm.pause: waiting for the answer: timed out");
  CHECK(took >= 300ms);  // the budget, not less (a lower bound a loaded machine cannot break)
  // Bounded: it ended on its own budget (the timeout above), not by hanging; no upper figure.
}

TEST_CASE("the long budget applies to create and boot, the short one to info") {
  TempDir dir("chl-api");
  const std::string path = (dir / "api.sock").string();
  // Answers after 250 ms: too slow for a 100 ms quick budget, fine for a 2 s long budget.
  FakeServer server(path, [](FakeRequest&) -> std::optional<std::string> {
    std::this_thread::sleep_for(250ms);
    return http_response(204, "No Content", "");
  });
  ClientOptions o;
  o.timeout = 100ms;
  o.long_timeout = 2s;
  Client c(path, o);
  VmConfig cfg;
  CHECK(c.vm_create(cfg));
  CHECK(c.vm_boot());
  auto info = c.vm_info();
  REQUIRE_FALSE(info);
  CHECK(is(info.error(), ApiErrc::timeout));
}

TEST_CASE("HTTP 500 with CH's body: status and messages, state violations readable") {
  TempDir dir("chl-api");
  const std::string path = (dir / "api.sock").string();
  FakeServer server(path, [](FakeRequest& req) -> std::optional<std::string> {
    if (request_line(req) == "PUT /api/v1/vm.pause HTTP/1.1") {
      return http_response(
          500, "Internal Server Error",
          R"(["Error from API","The VM could not be paused","VM is not running"])");
    }
    return http_response(404, "Not Found", "");
  });
  Client c(path, fast_options());
  auto r = c.vm_pause();
  REQUIRE_FALSE(r);
  CHECK(http_status(r.error()) == 500);
  CHECK(r.error().message() ==
        "PUT vm.pause: HTTP 500: Error from API: The VM could not be paused: VM is not running");
  CHECK(ch_messages(r.error()) == std::vector<std::string>{"Error from API",
                                                           "The VM could not be paused",
                                                           "VM is not running"});
  auto nf = c.vm_counters();
  REQUIRE_FALSE(nf);
  CHECK(http_status(nf.error()) == 404);
  CHECK(nf.error().message() == "GET vm.counters: HTTP 404 Not Found");
}

TEST_CASE("garbage instead of HTTP, and a 200 whose body is not the schema: malformed_response") {
  TempDir dir("chl-api");
  const std::string path = (dir / "api.sock").string();
  FakeServer server(path, [](FakeRequest& req) -> std::optional<std::string> {
    const auto line = request_line(req);
    if (line.find("vmm.ping") != std::string::npos) {
      return std::string("\x01\x02garbage\r\n\r\n");
    }
    if (line.find("vm.info") != std::string::npos) {
      return http_response(200, "OK", "{\"config\": {\"payload\": {}}, \"state\": ");
    }
    if (line.find("vm.counters") != std::string::npos) {
      return http_response(200, "OK", R"({"disk0":{"read_bytes":"many"}})");
    }
    if (line.find("vm.add-disk") != std::string::npos) {
      return http_response(200, "OK", "[]");
    }
    // Truncated: promises 100 bytes, sends 3, closes.
    return std::string("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc");
  });
  Client c(path, fast_options());
  auto ping = c.vmm_ping();
  REQUIRE_FALSE(ping);
  CHECK(is(ping.error(), ApiErrc::malformed_response));
  CHECK(ping.error().message().find(
            "GET vmm.ping: malformed response: not an HTTP/1.x status line") == 0);

  auto info = c.vm_info();
  REQUIRE_FALSE(info);
  CHECK(is(info.error(), ApiErrc::malformed_response));
  CHECK(info.error().message() ==
        "GET vm.info: malformed response: HTTP 200: body: not valid JSON");

  auto counters = c.vm_counters();
  REQUIRE_FALSE(counters);
  CHECK(is(counters.error(), ApiErrc::malformed_response));

  DiskConfig d;
  d.path = "/x";
  auto added = c.vm_add_disk(d);
  REQUIRE_FALSE(added);
  CHECK(is(added.error(), ApiErrc::malformed_response));

  auto trunc = c.vm_boot();
  REQUIRE_FALSE(trunc);
  CHECK(is(trunc.error(), ApiErrc::malformed_response));
  CHECK(trunc.error().message().find("middle of the body") != std::string::npos);
}

TEST_CASE("a VMM that closes without answering: connection_closed") {
  TempDir dir("chl-api");
  const std::string path = (dir / "api.sock").string();
  FakeServer server(path, [](FakeRequest&) { return std::optional<std::string>(""); });
  Client c(path, fast_options());
  auto r = c.vm_shutdown();
  REQUIRE_FALSE(r);
  CHECK(is(r.error(), ApiErrc::connection_closed));
}

TEST_CASE("vm.add-net passes the tap fds with SCM_RIGHTS and the config as the body") {
  TempDir dir("chl-api");
  const std::string path = (dir / "api.sock").string();
  // Stand-ins for tap fds: two files whose identity the server checks.
  const auto f1 = dir / "tap0", f2 = dir / "tap1";
  chl::test::write_file(f1, "q0");
  chl::test::write_file(f2, "q1");
  chl::common::UniqueFd fd1(::open(f1.c_str(), O_RDONLY | O_CLOEXEC));
  chl::common::UniqueFd fd2(::open(f2.c_str(), O_RDONLY | O_CLOEXEC));
  REQUIRE(fd1);
  REQUIRE(fd2);
  std::vector<std::string> received_contents;
  std::string body, line;
  FakeServer server(path, [&](FakeRequest& req) -> std::optional<std::string> {
    line = request_line(req);
    body = req.body;
    for (auto& fd : req.fds) {
      char buf[8] = {};
      const auto n = ::pread(fd.get(), buf, sizeof(buf), 0);
      received_contents.emplace_back(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
    }
    return http_response(200, "OK", R"({"id":"net1","bdf":"0000:00:05.0"})");
  });
  Client c(path, fast_options());
  NetConfig net;
  net.id = "net1";
  net.mac = "52:54:00:12:34:56";
  net.num_queues = 4;
  const int fds[] = {fd1.get(), fd2.get()};
  auto r = c.vm_add_net(net, fds);
  REQUIRE_MESSAGE(r, (r ? "" : r.error().message()));
  REQUIRE(r->has_value());
  CHECK((*r)->id == "net1");
  CHECK((*r)->bdf == "0000:00:05.0");
  CHECK(line == "PUT /api/v1/vm.add-net HTTP/1.1");
  CHECK(nlohmann::json::parse(body) ==
        nlohmann::json{{"id", "net1"}, {"mac", "52:54:00:12:34:56"}, {"num_queues", 4}});
  CHECK(received_contents == std::vector<std::string>{"q0", "q1"});
  // Our fds stay ours and open.
  CHECK(::fcntl(fd1.get(), F_GETFD) != -1);
}

TEST_CASE("hot-add to a created (not booted) VM: 204 gives no PciDeviceInfo") {
  TempDir dir("chl-api");
  const std::string path = (dir / "api.sock").string();
  FakeServer server(path, [](FakeRequest&) { return http_response(204, "No Content", ""); });
  Client c(path, fast_options());
  FsConfig fs;
  fs.tag = "share";
  fs.socket = "/run/virtiofsd.sock";
  auto r = c.vm_add_fs(fs);
  REQUIRE(r);
  CHECK_FALSE(r->has_value());
}

TEST_CASE("calls from many threads are serialized: one request in flight per socket") {
  TempDir dir("chl-api");
  const std::string path = (dir / "api.sock").string();
  FakeServer server(path, [](FakeRequest&) -> std::optional<std::string> {
    std::this_thread::sleep_for(20ms);  // hold the request so that overlap would show
    return http_response(200, "OK", R"({"version":"52.0.0"})");
  });
  ClientOptions o;
  o.timeout = 10s;
  Client c(path, o);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 3; ++k) {
        if (auto r = c.vmm_ping(); r && r->version == "52.0.0") {
          ok++;
        }
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  CHECK(ok == 12);
  CHECK(server.requests() == 12);
  CHECK_FALSE(server.saw_concurrent_connection());
}

TEST_CASE("request() returns non-2xx answers untouched for callers wanting the raw body") {
  TempDir dir("chl-api");
  const std::string path = (dir / "api.sock").string();
  const std::string err =
      R"j(["Error from API","The VM could not resume","Invalid transition: InvalidStateTransition(Running, Running)"])j";
  FakeServer server(path,
                    [&](FakeRequest&) { return http_response(500, "Internal Server Error", err); });
  Client c(path, fast_options());
  auto r = c.request("PUT", "vm.resume", std::nullopt, 1s);
  REQUIRE(r);
  CHECK(r->status == 500);
  CHECK(r->body == err);
  CHECK(parse_ch_error_body(r->body).back() ==
        "Invalid transition: InvalidStateTransition(Running, Running)");
}

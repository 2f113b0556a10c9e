// The launcher's relay of an outgoing migration (kubevirt/migration_relay.hpp) between a stand-in
// VMM (a client of the relay's socket) and a stand-in of the migration proxy's socket: the bytes
// arrive intact both ways, Bandwidth paces them, the progress moves with them, abort() cuts both.
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/unix_socket.hpp"
#include "kubevirt/migration_relay.hpp"
#include "kubevirt/migration_stream.hpp"
#include "tests/support/test_support.hpp"

using chl::common::UniqueFd;
using chl::kubevirt::MigrationRelay;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

bool send_all(int fd, const std::string& data) {
  std::size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return true;
}

std::string recv_n(int fd, std::size_t want) {
  std::string out;
  char buf[1 << 16];
  while (out.size() < want) {
    const ssize_t n = ::recv(fd, buf, std::min(sizeof buf, want - out.size()), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

std::string pattern(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + i / 4096) & 0xff);
  return s;
}

// The relay with its two ends: the "VMM" connected to it, the "proxy" connection accepted.
struct Ends {
  chl::test::TempDir dir{"chl-relay"};
  UniqueFd proxy_listener;
  std::unique_ptr<MigrationRelay> relay;
  UniqueFd vmm;
  UniqueFd proxy;

  explicit Ends(MigrationRelay::Options o) {
    auto l = chl::common::listen_unix(dir / "proxy.sock");
    REQUIRE(l);
    proxy_listener = std::move(*l);
    auto r = MigrationRelay::start(dir / "relay.sock", dir / "proxy.sock", o);
    REQUIRE_MESSAGE(r, (r ? "" : r.error().message()));
    relay = std::move(*r);
    auto c = chl::common::connect_unix(dir / "relay.sock");
    REQUIRE(c);
    vmm = std::move(*c);
    proxy.reset(::accept4(proxy_listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    REQUIRE(proxy);
  }
};

}  // namespace

TEST_CASE("migration relay: the stream arrives intact both ways and counts as progress") {
  Ends e(MigrationRelay::Options{});
  const auto t0 = e.relay->last_progress();
  const std::string out = pattern(3 << 20);
  std::thread w([&] { CHECK(send_all(e.vmm.get(), out)); });
  const std::string got = recv_n(e.proxy.get(), out.size());
  w.join();
  CHECK(got == out);
  CHECK(chl::test::wait_until(2s, [&] { return e.relay->bytes_sent() == out.size(); }));
  CHECK(e.relay->last_progress() > t0);
  // The receiver's answers go back to the VMM.
  REQUIRE(send_all(e.proxy.get(), "OK-answer"));
  CHECK(recv_n(e.vmm.get(), 9) == "OK-answer");
}

TEST_CASE(
    "migration relay: Bandwidth paces the VMM's stream (a lower bound only: load only slows it)") {
  MigrationRelay::Options o;
  o.bandwidth = 4ull << 20;  // 4 MiB/s
  Ends e(o);
  const std::string out = pattern(6 << 20);
  const auto t0 = std::chrono::steady_clock::now();
  std::thread w([&] { CHECK(send_all(e.vmm.get(), out)); });
  const std::string got = recv_n(e.proxy.get(), out.size());
  const auto took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  w.join();
  CHECK(got == out);
  // 6 MiB at 4 MiB/s: 1.5 s, less at most one paced read (1/16 s) that leaves at once.
  CHECK_MESSAGE(took >= 1.4, "6 MiB went through in " << took << " s, faster than 4 MiB/s");
  MESSAGE("6 MiB through a 4 MiB/s relay in " << took << " s (" << 6 / took
                                              << " MiB/s; the machine is shared and loaded)");
}

TEST_CASE("migration relay: abort() cuts both ends at once, a paced or blocked copy included") {
  MigrationRelay::Options o;
  o.bandwidth = 1ull << 20;
  Ends e(o);
  std::thread w([&] { (void)send_all(e.vmm.get(), pattern(8 << 20)); });
  REQUIRE(chl::test::wait_until(5s, [&] { return e.relay->bytes_sent() > 0; }));
  e.relay->abort();
  w.join();  // the VMM's send fails: its connection is shut down (it would take 8 s at 1 MiB/s)
  // The proxy side sees the end of the stream, short of the 8 MiB: cut, not run to its end.
  char buf[1 << 16];
  std::size_t total = 0;
  ssize_t n;
  while ((n = ::recv(e.proxy.get(), buf, sizeof buf, 0)) > 0) total += static_cast<std::size_t>(n);
  CHECK(total < (8u << 20));
}

namespace {
std::string request(std::uint16_t command, const std::string& payload) {
  std::string h(16, '\0');
  h[0] = static_cast<char>(command & 0xff);
  h[1] = static_cast<char>(command >> 8);
  for (int i = 0; i < 8; ++i) h[8 + i] = static_cast<char>((payload.size() >> (8 * i)) & 0xff);
  return h + payload;
}
}  // namespace

TEST_CASE(
    "migration stream: the sender's Config loses host_mac on tap NICs only, its length follows, "
    "whatever the pieces - the rest passes as it came") {
  using chl::kubevirt::MigrationStreamEditor;
  // As CH v52's sender writes it: Start, Config (VmMigrationConfig), then a Memory request.
  const nlohmann::json config = {
      {"vm_config",
       {{"memory", {{"size", 67108864}}},
        {"net",
         {{{"id", "net-default"},
           {"tap", "tap0"},
           {"mac", "02:00:00:aa:bb:cc"},
           {"host_mac", "9a:3b:11:22:33:44"},
           {"num_queues", 2}},
          {{"id", "net-fd"},
           {"tap", nullptr},
           {"fds", {-1}},
           {"mac", "02:00:00:aa:bb:cd"},
           {"host_mac", "9a:3b:11:22:33:45"}}}}}},
      {"common_cpuid", nlohmann::json::array()},
      {"memory_manager_data", {{"memory_ranges", {{"data", nlohmann::json::array()}}}}}};
  const std::string memory = request(4, std::string(32, '\x07')) + std::string(4096, '\x5a');
  const std::string stream = request(1, "") + request(2, config.dump()) + memory;
  for (std::size_t piece : {std::size_t{1}, std::size_t{7}, std::size_t{16}, stream.size()}) {
    MigrationStreamEditor e;
    std::string out;
    for (std::size_t at = 0; at < stream.size(); at += piece)
      e.feed(std::string_view(stream).substr(at, piece), out);
    CAPTURE(piece);
    REQUIRE(e.through());
    CHECK(e.nets_edited() == 1);
    CHECK(out.substr(0, 16) == request(1, ""));
    const std::string h = out.substr(16, 16);
    std::uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(h[8 + i]);
    CHECK(static_cast<unsigned char>(h[0]) == 2);
    const auto sent = nlohmann::json::parse(out.substr(32, len));
    CHECK(sent["vm_config"]["net"][0]["host_mac"].is_null());
    CHECK(sent["vm_config"]["net"][0]["mac"] == "02:00:00:aa:bb:cc");  // the guest's MAC stays
    CHECK(sent["vm_config"]["net"][0]["tap"] == "tap0");
    CHECK(sent["vm_config"]["net"][1]["host_mac"] == "9a:3b:11:22:33:45");  // not by name
    CHECK(sent["vm_config"]["memory"]["size"] == 67108864);
    CHECK(out.substr(32 + len) == memory);
  }
  // No tap NIC: the bytes pass unchanged.
  nlohmann::json plain = config;
  plain["vm_config"].erase("net");
  const std::string s2 = request(1, "") + request(2, plain.dump()) + memory;
  MigrationStreamEditor e;
  std::string out;
  e.feed(s2, out);
  CHECK(out == s2);
  CHECK(e.nets_edited() == 0);
}

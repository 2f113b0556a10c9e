// The webhook over real TLS (webhook/server.cpp): a client that verifies the certificate against
// the CA and the Service's DNS name, as the API server does; keep-alive; the certificate rotated
// the way kubelet updates a Secret volume (a new directory, the `..data` symlink swapped) and
// seen by the next connection without a restart; garbage, half handshakes and slow peers dropped
// while others are served. The certificates come from scripts/webhook-cert.sh.
#include <doctest/doctest.h>

#include <boost/asio/post.hpp>
#include <future>
#include <thread>

#include "tests/webhook/tls_client.hpp"
#include "tests/webhook/webhook_support.hpp"
#include "webhook/server.hpp"

using namespace chl::test::webhook;
namespace fs = std::filesystem;

namespace {

const std::string kHost = "chl-webhook.chl-webhook.svc";

// scripts/webhook-cert.sh into `dir` (ca.crt, tls.crt, tls.key…); false when openssl is missing.
bool make_cert(const fs::path& dir) {
  auto r = chl::test::run_command(
      {"bash", (chl::test::source_dir() / "scripts" / "webhook-cert.sh").string(), dir.string()});
  INFO(r.output);
  if (!chl::test::tool("openssl")) return false;
  REQUIRE(r.exit_code == 0);
  return true;
}

// A Secret volume as kubelet lays it out: ..<timestamp>/ with the files, ..data -> it, and
// tls.crt / tls.key -> ..data/<file>. swap() writes a new timestamped directory and renames a new
// ..data link over the old one, then removes the old directory, as kubelet's atomic writer does.
struct SecretVolume {
  fs::path root;
  int generation = 0;
  void put(const fs::path& certs) {
    const fs::path dir = root / ("..2026_12_01_" + std::to_string(++generation));
    fs::create_directories(dir);
    fs::copy_file(certs / "tls.crt", dir / "tls.crt");
    fs::copy_file(certs / "tls.key", dir / "tls.key");
    const fs::path tmp = root / "..data_tmp";
    fs::create_directory_symlink(dir.filename(), tmp);
    fs::rename(tmp, root / "..data");
    if (generation == 1) {
      fs::create_symlink("..data/tls.crt", root / "tls.crt");
      fs::create_symlink("..data/tls.key", root / "tls.key");
    } else {
      fs::remove_all(root / ("..2026_12_01_" + std::to_string(generation - 1)));
    }
  }
};

// The server on its own io_context thread.
struct Running {
  boost::asio::io_context io;
  chl::webhook::TlsFiles tls;
  chl::webhook::Server server;
  std::thread thread;
  Running(const fs::path& cert, const fs::path& key, chl::webhook::ServerOptions options)
      : tls(cert.string(), key.string()), server(io, tls, with_patch(std::move(options))) {
    auto loaded = tls.load();
    REQUIRE_MESSAGE(loaded.has_value(), loaded.error().message());
    auto l =
        server.listen(boost::asio::ip::tcp::endpoint(boost::asio::ip::address_v4::loopback(), 0));
    REQUIRE_MESSAGE(l.has_value(), l.error().message());
    server.start();
    thread = std::thread([this] { io.run(); });
  }
  ~Running() {
    boost::asio::post(io, [this] {
      server.stop();
      io.stop();
    });
    thread.join();
  }
  static chl::webhook::ServerOptions with_patch(chl::webhook::ServerOptions o) {
    o.patch = kConfig;
    return o;
  }
  chl::webhook::ServerCounters counters() {
    std::promise<chl::webhook::ServerCounters> p;
    boost::asio::post(io, [&] { p.set_value(server.counters()); });
    return p.get_future().get();
  }
  unsigned short port() const { return server.port(); }
};

std::string golden_review() {
  const auto file = pods_dir() / "vmi-probe-guestagentping.json";
  if (!fs::exists(file))  // the reference is not beside the checkout: a minimal launcher pod
    return review_of(selected({{"metadata",
                                {{"name", "p"},
                                 {"namespace", "default"},
                                 {"labels", {{"kubevirt.io", "virt-launcher"}}}}},
                               {"spec",
                                {{"containers",
                                  {{{"name", "compute"},
                                    {"image", "i"},
                                    {"command", {"/usr/bin/virt-launcher-monitor"}}}}}}}}))
        .dump();
  return review_of(selected(read_json(file))).dump();
}

// A served admission: the reply is an AdmissionReview with a patch.
void check_patched(const std::optional<HttpReply>& reply) {
  REQUIRE(reply.has_value());
  CHECK(reply->status == 200);
  const json resp = json::parse(reply->body).at("response");
  CHECK(resp.at("allowed") == true);
  CHECK(resp.at("patchType") == "JSONPatch");
}

}  // namespace

TEST_CASE(
    "over TLS the webhook serves verified clients, keep-alive and new connections, and refuses a "
    "wrong CA") {
  chl::test::TempDir dir("chlhook");
  if (!make_cert(dir / "a")) {
    chl::test::skip("openssl is not installed: cannot make the certificates");
    return;
  }
  REQUIRE(make_cert(dir / "b"));
  Running s(dir / "a" / "tls.crt", dir / "a" / "tls.key", {});
  const std::string review = golden_review();
  TlsClient c((dir / "a" / "ca.crt").string(), kHost);
  REQUIRE_MESSAGE(c.connect(s.port()), c.error());
  CHECK(c.peer_common_name() == kHost);
  for (int i = 0; i < 3; ++i)
    check_patched(c.request("POST", "/mutate?timeout=5s", review));  // one connection
  auto health = c.request("GET", "/healthz", "");
  REQUIRE(health.has_value());
  CHECK(health->status == 200);
  CHECK(health->body == "ok");
  auto missing = c.request("GET", "/nope", "");
  REQUIRE(missing.has_value());
  CHECK(missing->status == 404);
  auto bad = c.request("POST", "/mutate", "{not json");
  REQUIRE(bad.has_value());
  CHECK(bad->status == 400);
  CHECK(bad->body.find("not JSON") != std::string::npos);
  check_patched(c.request("POST", "/mutate", review, /*keep_alive=*/false));
  CHECK(c.closed_by_peer());
  // A client trusting another CA, or expecting another name, does not get through.
  TlsClient wrong_ca((dir / "b" / "ca.crt").string(), kHost);
  CHECK_FALSE(wrong_ca.connect(s.port()));
  CHECK_MESSAGE(wrong_ca.error().find("handshake: ") == 0, wrong_ca.error());
  TlsClient wrong_name((dir / "a" / "ca.crt").string(), "evil.example");
  CHECK_FALSE(wrong_name.connect(s.port()));
  // And every new connection is served again.
  TlsClient again((dir / "a" / "ca.crt").string(), kHost);
  REQUIRE_MESSAGE(again.connect(s.port()), again.error());
  check_patched(again.request("POST", "/mutate", review));
}

TEST_CASE(
    "a certificate rotated as kubelet updates a Secret is served to the next connection, without a "
    "restart") {
  chl::test::TempDir dir("chlhook");
  if (!make_cert(dir / "a")) {
    chl::test::skip("openssl is not installed: cannot make the certificates");
    return;
  }
  REQUIRE(make_cert(dir / "b"));
  SecretVolume vol{dir / "secret"};
  fs::create_directories(vol.root);
  vol.put(dir / "a");
  Running s(vol.root / "tls.crt", vol.root / "tls.key", {});
  const std::string review = golden_review();
  TlsClient old_ca((dir / "a" / "ca.crt").string(), kHost);
  REQUIRE_MESSAGE(old_ca.connect(s.port()), old_ca.error());
  check_patched(old_ca.request("POST", "/mutate", review));

  vol.put(dir / "b");  // the swap
  // The connection made before keeps its certificate and is still served.
  check_patched(old_ca.request("POST", "/mutate", review));
  // The next connection is given the new certificate: CA b verifies it, CA a no longer does.
  TlsClient new_ca((dir / "b" / "ca.crt").string(), kHost);
  REQUIRE_MESSAGE(new_ca.connect(s.port()), new_ca.error());
  check_patched(new_ca.request("POST", "/mutate", review));
  TlsClient stale((dir / "a" / "ca.crt").string(), kHost);
  CHECK_FALSE(stale.connect(s.port()));

  // A broken update (a key that does not match the certificate) keeps the last good pair.
  const fs::path mixed = dir / "mixed";
  fs::create_directories(mixed);
  fs::copy_file(dir / "a" / "tls.crt", mixed / "tls.crt");
  fs::copy_file(dir / "b" / "tls.key", mixed / "tls.key");
  vol.put(mixed);
  TlsClient still_b((dir / "b" / "ca.crt").string(), kHost);
  REQUIRE_MESSAGE(still_b.connect(s.port()), still_b.error());
  check_patched(still_b.request("POST", "/mutate", review));
}

TEST_CASE(
    "garbage, half handshakes, slow and excess peers are dropped, and the webhook keeps serving") {
  chl::test::TempDir dir("chlhook");
  if (!make_cert(dir / "a")) {
    chl::test::skip("openssl is not installed: cannot make the certificates");
    return;
  }
  // Deadlines short enough to watch them pass, long enough for an honest client on a loaded machine.
  chl::webhook::ServerOptions options;
  options.handshake_timeout = std::chrono::milliseconds(2000);
  options.request_timeout = std::chrono::milliseconds(2000);
  options.idle_timeout = std::chrono::milliseconds(2000);
  options.max_connections = 8;
  Running s(dir / "a" / "tls.crt", dir / "a" / "tls.key", options);
  const std::string review = golden_review();
  const std::string ca = (dir / "a" / "ca.crt").string();
  auto served = [&] {
    TlsClient c(ca, kHost);
    REQUIRE_MESSAGE(c.connect(s.port()), c.error());
    check_patched(c.request("POST", "/mutate", review));
  };
  auto closed = [](int fd) {  // the server closed a raw connection (end of file or reset)
    return chl::test::wait_until(std::chrono::seconds(10), [fd] {
      char b[4096];
      const ssize_t n = ::recv(fd, b, sizeof b, MSG_DONTWAIT);
      return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    });
  };
  // Plain HTTP, and random bytes, where a TLS ClientHello should be.
  for (const std::string& junk :
       {std::string("POST /mutate HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"),
        std::string("\x16\x03\x01\x00\x05hello\x00\xff\xfe garbage", 22)}) {
    const int fd = connect_loopback(s.port());
    REQUIRE(fd >= 0);
    REQUIRE(::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(junk.size()));
    CHECK(closed(fd));
    ::close(fd);
  }
  served();
  // A half handshake (a record header promising 512 bytes, then silence) while others are served.
  const int half = connect_loopback(s.port());
  REQUIRE(half >= 0);
  REQUIRE(::send(half, "\x16\x03\x01\x02\x00", 5, MSG_NOSIGNAL) == 5);
  served();
  CHECK(closed(half));
  ::close(half);
  // A slow peer: half a request over TLS, then nothing; dropped at its deadline.
  {
    TlsClient slow(ca, kHost);
    REQUIRE_MESSAGE(slow.connect(s.port()), slow.error());
    REQUIRE(slow.send_raw("POST /mutate HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"apiVersion\""));
    served();
    CHECK(slow.closed_by_peer());
  }
  // An idle keep-alive connection is closed at the idle deadline.
  {
    TlsClient idle(ca, kHost);
    REQUIRE_MESSAGE(idle.connect(s.port()), idle.error());
    check_patched(idle.request("POST", "/mutate", review));
    CHECK(idle.closed_by_peer());
  }
  // A request over the size limit is answered 413 and the connection closed.
  {
    TlsClient big(ca, kHost);
    REQUIRE_MESSAGE(big.connect(s.port()), big.error());
    REQUIRE(big.send_raw("POST /mutate HTTP/1.1\r\nContent-Length: 50000000\r\n\r\n"));
    auto r = big.read_reply();
    REQUIRE(r.has_value());
    CHECK(r->status == 413);
    CHECK(big.closed_by_peer());
  }
  served();
  const auto counters = s.counters();
  CHECK(counters.handshake_failures >= 2);
  CHECK(counters.timeouts >= 3);
  CHECK(counters.bad_requests >= 1);

  // More connections than the cap (a server whose handshakes may take their time): the ones past
  // it are closed at once, and once the others leave the server serves again.
  chl::webhook::ServerOptions capped;
  capped.max_connections = 8;
  Running c(dir / "a" / "tls.crt", dir / "a" / "tls.key", capped);
  std::vector<int> hold;
  for (int i = 0; i < 8; ++i) hold.push_back(connect_loopback(c.port()));
  CHECK(chl::test::wait_until(std::chrono::seconds(10),
                              [&] { return c.counters().connections == 8; }));
  const int extra = connect_loopback(c.port());
  REQUIRE(extra >= 0);
  CHECK(closed(extra));
  ::close(extra);
  CHECK(c.counters().rejected >= 1);
  for (int fd : hold) ::close(fd);
  CHECK(chl::test::wait_until(std::chrono::seconds(10),
                              [&] { return c.counters().connections == 0; }));
  TlsClient after(ca, kHost);
  REQUIRE_MESSAGE(after.connect(c.port()), after.error());
  check_patched(after.request("POST", "/mutate", review));
}

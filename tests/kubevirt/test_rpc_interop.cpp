// Our HTTP/2 + protobuf-lite transport (kubevirt/h2_*.cpp) against the real gRPC (grpc++):
// many concurrent calls, one slow call that stalls no other, a 1 MiB message each way (beyond
// HTTP/2's 16 KiB frame and 64 KiB default window), a client that disconnects mid-call, an
// unknown method; the lite messages encode to the same bytes as the full ones; the grpc-timeout
// and grpc-message encodings.
#include <doctest/doctest.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <nghttp2/nghttp2.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include "common/unix_socket.hpp"
#include "kubevirt/cmd_server.hpp"
#include "kubevirt/grpc_wire.hpp"
#include "kubevirt/notify_client.hpp"
#include "kubevirt/proto/cmd.grpc.pb.h"
#include "kubevirt/proto/cmd_info.grpc.pb.h"
#include "kubevirt/proto/notify.pb.h"
#include "kubevirt/proto_lite/cmd.pb.h"
#include "kubevirt/proto_lite/notify.pb.h"
#include "tests/kubevirt/test_notify_server.hpp"
#include "tests/support/test_support.hpp"

namespace {

using namespace chl::kubevirt;
using namespace std::chrono_literals;
namespace v1 = ::kubevirt::cmd::v1;
namespace info = ::kubevirt::cmd::info;
using chl::common::Result;
using chl::common::Status;

// Sync can be held at a gate; GetDomain answers `domain`; every call is counted.
class GateHandler final : public CmdHandler {
 public:
  std::mutex mu;
  std::condition_variable cv;
  bool hold_sync = false;
  int syncs_waiting = 0;
  int syncs_done = 0;
  std::string last_vmi;
  std::string domain = "{}";
  std::atomic<int> pings{0};

  Status sync(std::string_view vmi, const SyncOptions&) override {
    std::unique_lock lock(mu);
    ++syncs_waiting;
    cv.notify_all();
    cv.wait(lock, [&] { return !hold_sync; });
    --syncs_waiting;
    ++syncs_done;
    last_vmi = vmi;
    cv.notify_all();
    return {};
  }
  void release() {
    std::lock_guard lock(mu);
    hold_sync = false;
    cv.notify_all();
  }
  bool wait(const std::function<bool()>& pred) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, 10s, pred);
  }
  Status pause(std::string_view) override { return {}; }
  Status unpause(std::string_view) override { return {}; }
  Status shutdown(std::string_view) override { return {}; }
  Status kill(std::string_view) override { return {}; }
  Status delete_domain(std::string_view) override { return {}; }
  Status soft_reboot(std::string_view) override { return {}; }
  Status reset(std::string_view) override { return {}; }
  Status ping() override {
    ++pings;
    return {};
  }
  Result<std::string> get_domain() override {
    std::lock_guard lock(mu);
    return domain;
  }
  Result<std::string> get_domain_stats() override { return std::string("{}"); }
  Result<std::string> get_qemu_version() override { return std::string("v52.0"); }
  Status sync_cpus(std::string_view) override { return {}; }
  Status sync_memory(std::string_view) override { return {}; }
};

struct Served {
  chl::test::TempDir dir{"kvi"};
  GateHandler handler;
  std::unique_ptr<CmdServer> server;
  Served() {
    auto s = CmdServer::start({.share_dir = dir.path()}, handler);
    REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().message()));
    server = std::move(*s);
  }
  std::shared_ptr<grpc::Channel> channel() const {
    return grpc::CreateChannel("unix:" + ready_socket_path(dir.path()).string(),
                               grpc::InsecureChannelCredentials());
  }
};

std::unique_ptr<grpc::ClientContext> ctx(std::chrono::milliseconds timeout = 10s) {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + timeout);
  return c;
}

// A VMI JSON of about `size` bytes.
std::string big_json(std::size_t size) {
  std::string s = R"({"metadata":{"name":"vm1"},"padding":")";
  for (std::size_t i = 0; s.size() < size; ++i) s.push_back(static_cast<char>('a' + i % 26));
  return s + "\"}";
}

}  // namespace

TEST_CASE("rpc interop: a slow Sync stalls neither Ping, Info nor other connections") {
  Served f;
  f.handler.hold_sync = true;
  auto channel = f.channel();
  auto stub = v1::Cmd::NewStub(channel);
  v1::VMIRequest req;
  req.mutable_vmi()->set_vmijson("{}");
  auto slow = std::async(std::launch::async, [&] {
    v1::Response r;
    return stub->SyncVirtualMachine(ctx().get(), req, &r).ok() && r.success();
  });
  REQUIRE(f.handler.wait([&] { return f.handler.syncs_waiting == 1; }));
  // The same connection and another one both get answers while Sync waits.
  v1::Response r;
  CHECK(stub->Ping(ctx(2s).get(), {}, &r).ok());
  info::CmdInfoResponse versions;
  CHECK(info::CmdInfo::NewStub(f.channel())->Info(ctx(2s).get(), {}, &versions).ok());
  CHECK(versions.supportedcmdversions_size() == 1);
  f.handler.release();
  CHECK(slow.get());
}

TEST_CASE("rpc interop: many concurrent calls on several connections all get their answer") {
  Served f;
  f.handler.hold_sync = true;  // a few calls wait at once, the rest go through meanwhile
  constexpr int kThreads = 8;
  constexpr int kCallsEach = 40;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto stub = v1::Cmd::NewStub(f.channel());
      for (int i = 0; i < kCallsEach; ++i) {
        v1::Response r;
        v1::DomainResponse d;
        v1::VMIRequest req;
        req.mutable_vmi()->set_vmijson(std::to_string(t));
        const bool good =
            (i == 0)  ? stub->SyncVirtualMachine(ctx().get(), req, &r).ok() && r.success()
            : (i % 2) ? stub->Ping(ctx().get(), {}, &r).ok() && r.success()
                      : stub->GetDomain(ctx().get(), {}, &d).ok() && d.domain() == "{}";
        ok += good ? 1 : 0;
      }
    });
  }
  // Each thread's first call is a Sync held at the gate: all of them at once, in flight.
  REQUIRE(f.handler.wait([&] { return f.handler.syncs_waiting == kThreads; }));
  f.handler.release();
  for (auto& t : threads) t.join();
  CHECK(ok == kThreads * kCallsEach);
  CHECK(f.handler.syncs_done == kThreads);
  CHECK(f.handler.pings == kThreads * (kCallsEach / 2));

  // And many streams multiplexed on one connection at once (asynchronous stub).
  auto stub = v1::Cmd::NewStub(f.channel());
  constexpr int kAsync = 200;
  grpc::CompletionQueue cq;
  std::vector<v1::Response> answers(kAsync);
  std::vector<grpc::Status> statuses(kAsync);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientAsyncResponseReader<v1::Response>>> calls;
  for (int i = 0; i < kAsync; ++i) {
    contexts.push_back(ctx());
    calls.push_back(stub->AsyncPing(contexts.back().get(), {}, &cq));
    calls.back()->Finish(&answers[i], &statuses[i], reinterpret_cast<void*>(std::intptr_t{i}));
  }
  int finished = 0;
  void* tag = nullptr;
  bool got = false;
  while (finished < kAsync && cq.Next(&tag, &got)) {
    const auto i = reinterpret_cast<std::intptr_t>(tag);
    CHECK(statuses[i].ok());
    CHECK(answers[i].success());
    ++finished;
  }
  CHECK(finished == kAsync);
  cq.Shutdown();
  while (cq.Next(&tag, &got)) {
  }
}

TEST_CASE("rpc interop: a 1 MiB VMI in and a 1 MiB domain out, byte for byte") {
  Served f;
  const std::string vmi = big_json(1024 * 1024);
  f.handler.domain = big_json(1024 * 1024 + 17);
  auto stub = v1::Cmd::NewStub(f.channel());
  v1::VMIRequest req;
  req.mutable_vmi()->set_vmijson(vmi);
  v1::Response r;
  REQUIRE(stub->SyncVirtualMachine(ctx().get(), req, &r).ok());
  CHECK(r.success());
  CHECK(f.handler.last_vmi == vmi);
  v1::DomainResponse d;
  REQUIRE(stub->GetDomain(ctx().get(), {}, &d).ok());
  CHECK(d.domain() == f.handler.domain);
}

TEST_CASE("rpc interop: the notify client delivers a 1 MiB domain to a grpc++ server") {
  chl::test::TempDir dir("kvi");
  chl::test::TestNotifyServer server(dir / "domain-notify-pipe.sock");
  NotifyClient client({.socket_path = (dir / "domain-notify-pipe.sock").string()});
  const std::string domain = big_json(1024 * 1024);
  client.send_domain_event(domain, DomainEventType::Added);
  REQUIRE(client.flush(std::chrono::steady_clock::now() + 10s));
  const auto received = server.received();
  REQUIRE(received.size() == 1);
  CHECK(received[0].event_type == "ADDED");
  CHECK(received[0].json.dump() == nlohmann::json::parse(domain).dump());
}

namespace {

// A client that sends one request (HTTP/2 via nghttp2 directly) and then closes its socket
// without waiting for the answer or resetting the stream.
void send_and_leave(const std::filesystem::path& socket, const std::string& path,
                    const std::string& request, const std::function<void()>& before_close) {
  auto fd = chl::common::connect_unix(socket);
  REQUIRE(fd.has_value());
  nghttp2_session_callbacks* cb = nullptr;
  REQUIRE(nghttp2_session_callbacks_new(&cb) == 0);
  nghttp2_session* session = nullptr;
  REQUIRE(nghttp2_session_client_new(&session, cb, nullptr) == 0);
  nghttp2_session_callbacks_del(cb);
  nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, nullptr, 0);
  struct Body {
    std::string bytes;
    std::size_t off = 0;
  } body{frame_message(request)};
  nghttp2_data_provider provider{};
  provider.source.ptr = &body;
  provider.read_callback = [](nghttp2_session*, std::int32_t, std::uint8_t* buf, std::size_t len,
                              std::uint32_t* flags, nghttp2_data_source* src, void*) -> ssize_t {
    auto* b = static_cast<Body*>(src->ptr);
    const std::size_t n = std::min(len, b->bytes.size() - b->off);
    std::memcpy(buf, b->bytes.data() + b->off, n);
    b->off += n;
    if (b->off == b->bytes.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  };
  auto nv = [](std::string_view n, std::string_view v) {  // views of what outlives the call
    return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(n.data())),
                      reinterpret_cast<std::uint8_t*>(const_cast<char*>(v.data())), n.size(),
                      v.size(), NGHTTP2_NV_FLAG_NONE};
  };
  const nghttp2_nv headers[] = {nv(":method", "POST"),
                                nv(":scheme", "http"),
                                nv(":path", path),
                                nv(":authority", "localhost"),
                                nv("content-type", "application/grpc"),
                                nv("te", "trailers")};
  REQUIRE(nghttp2_submit_request(session, nullptr, headers, 6, &provider, nullptr) > 0);
  const std::uint8_t* data = nullptr;
  for (ssize_t n; (n = nghttp2_session_mem_send(session, &data)) > 0;)
    REQUIRE(::write(fd->get(), data, static_cast<std::size_t>(n)) == n);
  before_close();
  nghttp2_session_del(session);
  fd->reset();
}

}  // namespace

TEST_CASE("rpc interop: a client disconnecting mid-call leaves the server serving") {
  Served f;
  f.handler.hold_sync = true;
  ::kubevirt_lite::cmd::v1::VMIRequest req;
  req.mutable_vmi()->set_vmijson("{}");
  send_and_leave(ready_socket_path(f.dir.path()), "/kubevirt.cmd.v1.Cmd/SyncVirtualMachine",
                 req.SerializeAsString(),
                 [&] { REQUIRE(f.handler.wait([&] { return f.handler.syncs_waiting == 1; })); });
  // The caller is gone; the handler finishes its work and its answer goes nowhere.
  f.handler.release();
  REQUIRE(f.handler.wait([&] { return f.handler.syncs_done == 1; }));
  auto stub = v1::Cmd::NewStub(f.channel());
  v1::Response r;
  REQUIRE(stub->Ping(ctx().get(), {}, &r).ok());
  CHECK(r.success());
}

TEST_CASE("rpc interop: an unknown method or service is UNIMPLEMENTED, serving goes on") {
  Served f;
  auto channel = f.channel();
  grpc::TemplatedGenericStub<v1::EmptyRequest, v1::Response> generic(channel);
  for (const char* path : {"/kubevirt.cmd.v1.Cmd/NoSuchMethod", "/kubevirt.cmd.v2.Cmd/Ping",
                           "/grpc.health.v1.Health/Check"}) {
    CAPTURE(path);
    auto c = ctx();
    std::promise<grpc::Status> done;
    v1::EmptyRequest empty;
    v1::Response response;
    generic.UnaryCall(c.get(), path, {}, &empty, &response,
                      [&](grpc::Status s) { done.set_value(std::move(s)); });
    const grpc::Status s = done.get_future().get();
    CHECK(s.error_code() == grpc::StatusCode::UNIMPLEMENTED);
    CHECK(s.error_message().find(path) != std::string::npos);
  }
  v1::Response r;
  REQUIRE(v1::Cmd::NewStub(channel)->Ping(ctx().get(), {}, &r).ok());
  CHECK(r.success());
}

TEST_CASE("rpc interop: the lite messages encode exactly as the full ones") {
  v1::VMIRequest full;
  full.mutable_vmi()->set_vmijson(R"({"spec":{}})");
  auto* o = full.mutable_options();
  (*o->mutable_interfacedomainattachment())["default"] = "tap";
  o->mutable_virtualmachinesmbios()->set_family("KubeVirt");
  o->set_memballoonstatsperiod(10);
  o->add_preallocatedvolumes("disk0");
  o->mutable_clusterconfig()->set_serialconsolelogdisabled(true);
  (*o->mutable_disksinfo())["disk0"].set_virtualsize(1u << 30);
  o->mutable_topology()->add_numa_cells()->add_cpus()->add_siblings(3);
  const std::string bytes = full.SerializeAsString();
  ::kubevirt_lite::cmd::v1::VMIRequest lite;
  REQUIRE(lite.ParseFromString(bytes));
  CHECK(lite.SerializeAsString() == bytes);
  CHECK(lite.options().clusterconfig().serialconsolelogdisabled());

  ::kubevirt_lite::notify::v1::DomainEventRequest event;
  event.set_domainjson("{}");
  event.set_eventtype("MODIFIED");
  ::kubevirt::notify::v1::DomainEventRequest parsed;
  REQUIRE(parsed.ParseFromString(event.SerializeAsString()));
  CHECK(parsed.SerializeAsString() == event.SerializeAsString());
  CHECK(parsed.eventtype() == "MODIFIED");
}

TEST_CASE("grpc wire: grpc-timeout and grpc-message encodings") {
  CHECK(format_grpc_timeout(5000ms) == "5000m");
  CHECK(parse_grpc_timeout("5000m") == 5000ms);
  CHECK(parse_grpc_timeout("2S") == 2000ms);
  CHECK(parse_grpc_timeout("1H") == std::chrono::milliseconds(3600000));
  CHECK(parse_grpc_timeout("100u") == 0ms);
  CHECK_FALSE(parse_grpc_timeout("123456789m").has_value());  // more than 8 digits
  CHECK_FALSE(parse_grpc_timeout("5x").has_value());
  CHECK(percent_encode("50% done\n") == "50%25 done%0A");
  CHECK(percent_decode("50%25 done%0A") == "50% done\n");
  CHECK(percent_decode("caf%C3%A9") == "caf\xC3\xA9");
  CHECK(frame_message("ab") == std::string("\0\0\0\0\2ab", 7));
  MessageReader reader;
  CHECK(reader.append(std::string("\0\0\0", 3)));
  CHECK(reader.append(std::string("\0\2a", 3)));
  CHECK_FALSE(reader.finish().has_value());  // one byte short
}

TEST_CASE(
    "rpc interop: stopping gives a held call its grace, then closes, and the handler is waited for") {
  auto f = std::make_unique<Served>();
  f->handler.hold_sync = true;
  auto stub = v1::Cmd::NewStub(f->channel());
  auto call = std::async(std::launch::async, [&] {
    v1::VMIRequest req;
    req.mutable_vmi()->set_vmijson("{}");
    v1::Response r;
    return stub->SyncVirtualMachine(ctx(30s).get(), req, &r).error_code();
  });
  REQUIRE(f->handler.wait([&] { return f->handler.syncs_waiting == 1; }));
  auto stopping = std::async(std::launch::async, [&] { f->server.reset(); });
  // After its grace the server closes the connection: the caller hears so while the handler
  // is still held, and the destructor then waits for the handler.
  REQUIRE(call.wait_for(10s) == std::future_status::ready);
  CHECK(call.get() == grpc::StatusCode::UNAVAILABLE);
  CHECK(stopping.wait_for(0s) == std::future_status::timeout);
  f->handler.release();
  REQUIRE(stopping.wait_for(10s) == std::future_status::ready);
  CHECK_FALSE(std::filesystem::exists(ready_socket_path(f->dir.path())));
}

TEST_CASE("rpc interop: a notify connection the server closed while idle is dialled again") {
  chl::test::TempDir dir("kvi");
  const auto socket = dir / "domain-notify-pipe.sock";
  NotifyClient client({.socket_path = socket.string()});
  auto first = std::make_unique<chl::test::TestNotifyServer>(socket);
  client.send_k8s_event(R"({"reason":"Started"})");
  REQUIRE(client.flush(std::chrono::steady_clock::now() + 10s));
  first->stop();  // GOAWAY and close, while the client is idle
  chl::test::TestNotifyServer second(socket);
  client.send_k8s_event(R"({"reason":"Stopped"})");
  REQUIRE(client.flush(std::chrono::steady_clock::now() + 10s));
  REQUIRE(second.received().size() == 1);
  CHECK(second.received()[0].json["reason"] == "Stopped");
  // Noticed before the call, not by a failed call: no retry was needed.
  CHECK(client.counters().failed_attempts == 0);
  CHECK(client.counters().connects == 2);
}

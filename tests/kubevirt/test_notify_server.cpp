#include "tests/kubevirt/test_notify_server.hpp"

#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <utility>

#include "common/unix_socket.hpp"

#include "kubevirt/proto/notify.grpc.pb.h"
#include "kubevirt/proto/notify_info.grpc.pb.h"

namespace chl::test {

namespace v1 = ::kubevirt::notify::v1;
namespace info = ::kubevirt::notify::info;

namespace {

// Wait until `fd` is readable or `stop` is signalled; false on stop (or a poll error).
bool readable_or_stop(int fd, int stop) {
  for (;;) {
    pollfd p[2] = {{fd, POLLIN, 0}, {stop, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (p[1].revents) return false;
    if (p[0].revents) return true;
  }
}

bool write_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

}  // namespace

// virt-handler's pipe (pkg/virt-handler/notify-server/pipe/pipe.go): InjectNotify's listener at
// the launcher's socket path (:53-83), ChanFromListener's accept loop that ends when the listener
// is closed (:136-165), and Proxy per accepted connection, copying both ways to a fresh
// connection to the server until either side ends (:102-134). Blocking threads: a stand-in's.
struct NotifyPipe {
  std::filesystem::path socket;
  std::filesystem::path server;
  chl::common::UniqueFd listener;
  chl::common::UniqueFd stop_listening{::eventfd(0, EFD_CLOEXEC)};
  chl::common::UniqueFd stop_proxies{::eventfd(0, EFD_CLOEXEC)};
  std::thread acceptor;
  std::mutex mu;
  std::vector<std::thread> proxies;
  std::atomic<std::size_t> accepted{0}, open{0};

  NotifyPipe(std::filesystem::path at, std::filesystem::path to) : socket(std::move(at)), server(std::move(to)) {
    auto l = chl::common::listen_unix(socket);
    REQUIRE_MESSAGE(l, "the notify pipe at " << socket << ": " << (l ? "" : l.error().message()));
    listener = std::move(*l);
    acceptor = std::thread([this] { accept_loop(); });
  }
  ~NotifyPipe() {
    close_listener();
    end_connections();
  }
  static void signal(int efd) {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(efd, &one, sizeof one);
  }
  void accept_loop() {
    while (readable_or_stop(listener.get(), stop_listening.get())) {
      const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ++accepted;
      ++open;
      std::lock_guard lock(mu);
      proxies.emplace_back([this, fd] { proxy(chl::common::UniqueFd(fd)); });
    }
  }
  void proxy(chl::common::UniqueFd launcher) {
    if (auto handler = chl::common::connect_unix(server)) {
      char buf[16384];
      for (;;) {
        pollfd p[3] = {{launcher.get(), POLLIN, 0}, {handler->get(), POLLIN, 0}, {stop_proxies.get(), POLLIN, 0}};
        if (::poll(p, 3, -1) < 0) {
          if (errno == EINTR) continue;
          break;
        }
        if (p[2].revents) break;
        const auto copy = [&](int from, int to) {
          const ssize_t n = ::recv(from, buf, sizeof buf, 0);
          return n > 0 && write_all(to, buf, static_cast<std::size_t>(n));
        };
        if (p[0].revents && !copy(launcher.get(), handler->get())) break;
        if (p[1].revents && !copy(handler->get(), launcher.get())) break;
      }
    }  // the connection to the server closes here, the launcher's next (pipe.go:105, 114)
    launcher.reset();
    --open;
  }
  void close_listener() {
    if (!listener) return;
    signal(stop_listening.get());
    if (acceptor.joinable()) acceptor.join();
    listener.reset();
    std::error_code ec;
    std::filesystem::remove(socket, ec);
  }
  // Every proxied connection ends, now and later (a one-way step: virt-handler going away).
  void end_connections() {
    signal(stop_proxies.get());
    std::vector<std::thread> all;
    {
      std::lock_guard lock(mu);
      all.swap(proxies);
    }
    for (auto& t : all) t.join();
  }
};

struct TestNotifyServer::Impl final : v1::Notify::Service, info::NotifyInfo::Service {
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  std::vector<ReceivedNotification> received;
  bool holding = false;
  bool refuse_k8s = false;
  bool stopping = false;
  bool checked = false;  // stop() asserted the contract failures once
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<NotifyPipe> pipe;
  std::optional<HandlerVmi> vmi;  // expect_vmi(); else learnt
  HandlerVmi learnt;
  std::vector<std::string> contract_failures;
  std::optional<HandlerRead> last;

  // Decode and read a domain event as virt-handler (mu held); "" when it decoded.
  std::string read_domain(const std::string& text, const std::string& event_type) {
    const auto decoded = go_decode_domain(text);
    if (!decoded.error.empty()) {
      contract_failures.push_back(
          event_type + " event: contract §0: does not decode into api.Domain: " + decoded.error +
          " (KubeVirt pkg/virt-handler/notify-server/server.go:54-94)");
      return decoded.error;
    }
    HandlerVmi* h = vmi ? &*vmi : &learnt;
    if (!vmi) {
      learnt.spec_known = false;
      const auto& meta = decoded.value["ObjectMeta"];
      if (learnt.name.empty()) learnt.name = meta["name"].get<std::string>();
      if (learnt.namespace_.empty()) learnt.namespace_ = meta["namespace"].get<std::string>();
      if (learnt.uid.empty())
        learnt.uid = decoded.value["Spec"]["Metadata"]["KubeVirt"]["UID"].get<std::string>();
    }
    auto r = read_as_virt_handler(decoded.value, *h);
    for (const auto& f : r.failures)
      contract_failures.push_back(
          event_type + " " + decoded.value["Status"]["Status"].get<std::string>() + " event: " + f);
    last = std::move(r);
    return {};
  }

  // Wait while answers are held; false when the server is stopping meanwhile.
  bool wait_released(std::unique_lock<std::mutex>& lock) {
    cv.wait(lock, [&] { return !holding || stopping; });
    return !stopping;
  }

  grpc::Status HandleDomainEvent(grpc::ServerContext*, const v1::DomainEventRequest* req,
                                 v1::Response* out) override {
    std::unique_lock lock(mu);
    if (!wait_released(lock)) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "stopping");
    if (auto error = read_domain(req->domainjson(), req->eventtype()); !error.empty()) {
      // virt-handler drops it and answers the launcher with the error (server.go:54-94).
      out->set_success(false);
      out->set_message(error);
      return grpc::Status::OK;
    }
    received.push_back({false, req->eventtype(), nlohmann::json::parse(req->domainjson())});
    cv.notify_all();
    out->set_success(true);
    return grpc::Status::OK;
  }
  grpc::Status HandleK8sEvent(grpc::ServerContext*, const v1::K8sEventRequest* req,
                              v1::Response* out) override {
    std::unique_lock lock(mu);
    if (!wait_released(lock)) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "stopping");
    received.push_back({true, "", nlohmann::json::parse(req->eventjson())});
    cv.notify_all();
    out->set_success(!refuse_k8s);
    if (refuse_k8s) out->set_message("VMI not found");
    return grpc::Status::OK;
  }
  grpc::Status Info(grpc::ServerContext*, const info::NotifyInfoRequest*,
                    info::NotifyInfoResponse* out) override {
    out->add_supportednotifyversions(1);
    return grpc::Status::OK;
  }
};

TestNotifyServer::TestNotifyServer(std::filesystem::path socket)
    : socket_(std::move(socket)), impl_(std::make_shared<Impl>()) {
  // virt-handler's own server (domain-notify.sock in its share directory): here beside the pipe.
  const std::filesystem::path server = socket_.string() + ".vh";
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + server.string(), grpc::InsecureServerCredentials());
  builder.RegisterService(static_cast<v1::Notify::Service*>(impl_.get()));
  builder.RegisterService(static_cast<info::NotifyInfo::Service*>(impl_.get()));
  impl_->server = builder.BuildAndStart();
  REQUIRE_MESSAGE(impl_->server != nullptr, "test notify server on " << server);
  impl_->pipe = std::make_unique<NotifyPipe>(socket_, server);
}

TestNotifyServer::~TestNotifyServer() { stop(); }

void TestNotifyServer::close_pipe() {
  if (impl_->pipe) impl_->pipe->close_listener();
}

void TestNotifyServer::end_connections() {
  if (impl_->pipe) impl_->pipe->end_connections();
}

std::size_t TestNotifyServer::accepted() const { return impl_->pipe ? impl_->pipe->accepted.load() : 0; }

std::size_t TestNotifyServer::open_connections() const { return impl_->pipe ? impl_->pipe->open.load() : 0; }

void TestNotifyServer::stop() {
  if (!impl_->checked) {
    impl_->checked = true;
    std::string all;
    for (const auto& f : take_contract_failures()) all += "\n  " + f;
    CHECK_MESSAGE(all.empty(),
                  "virt-handler's reading of the launcher's domain documents failed:" << all);
  }
  if (!impl_->server) return;
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  impl_->pipe.reset();  // the listener closed and its file removed, every connection ended
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  impl_->server->Wait();
  impl_->server.reset();
  std::error_code ec;
  std::filesystem::remove(socket_.string() + ".vh", ec);
}

void TestNotifyServer::expect_vmi(HandlerVmi vmi) {
  std::lock_guard lock(impl_->mu);
  impl_->vmi = std::move(vmi);
}

std::vector<std::string> TestNotifyServer::take_contract_failures() {
  std::lock_guard lock(impl_->mu);
  return std::exchange(impl_->contract_failures, {});
}

std::optional<HandlerRead> TestNotifyServer::last_read() const {
  std::lock_guard lock(impl_->mu);
  return impl_->last;
}

void TestNotifyServer::hold() {
  std::lock_guard lock(impl_->mu);
  impl_->holding = true;
}

void TestNotifyServer::release() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->holding = false;
  }
  impl_->cv.notify_all();
}

void TestNotifyServer::refuse_k8s_events(bool refuse) {
  std::lock_guard lock(impl_->mu);
  impl_->refuse_k8s = refuse;
}

std::vector<ReceivedNotification> TestNotifyServer::received() const {
  std::lock_guard lock(impl_->mu);
  return impl_->received;
}

bool TestNotifyServer::wait_for(std::size_t n, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(impl_->mu);
  return impl_->cv.wait_for(lock, timeout, [&] { return impl_->received.size() >= n; });
}

}  // namespace chl::test

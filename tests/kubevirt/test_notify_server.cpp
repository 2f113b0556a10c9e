#include "tests/kubevirt/test_notify_server.hpp"

#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include <utility>

#include "kubevirt/proto/notify.grpc.pb.h"
#include "kubevirt/proto/notify_info.grpc.pb.h"

namespace chl::test {

namespace v1 = ::kubevirt::notify::v1;
namespace info = ::kubevirt::notify::info;

struct TestNotifyServer::Impl final : v1::Notify::Service, info::NotifyInfo::Service {
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  std::vector<ReceivedNotification> received;
  bool holding = false;
  bool refuse_k8s = false;
  bool stopping = false;
  bool checked = false;  // stop() asserted the contract failures once
  std::unique_ptr<grpc::Server> server;
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
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_.string(), grpc::InsecureServerCredentials());
  builder.RegisterService(static_cast<v1::Notify::Service*>(impl_.get()));
  builder.RegisterService(static_cast<info::NotifyInfo::Service*>(impl_.get()));
  impl_->server = builder.BuildAndStart();
  REQUIRE_MESSAGE(impl_->server != nullptr, "test notify server on " << socket_);
}

TestNotifyServer::~TestNotifyServer() { stop(); }

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
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  impl_->server->Wait();
  impl_->server.reset();
  std::error_code ec;
  std::filesystem::remove(socket_, ec);
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

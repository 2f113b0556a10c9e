#include "tests/kubevirt/test_notify_server.hpp"

#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

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
  std::unique_ptr<grpc::Server> server;

  // Wait while answers are held; false when the server is stopping meanwhile.
  bool wait_released(std::unique_lock<std::mutex>& lock) {
    cv.wait(lock, [&] { return !holding || stopping; });
    return !stopping;
  }

  grpc::Status HandleDomainEvent(grpc::ServerContext*, const v1::DomainEventRequest* req,
                                 v1::Response* out) override {
    std::unique_lock lock(mu);
    if (!wait_released(lock)) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "stopping");
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

#pragma once
// A notify server of our own for the tests: what virt-handler serves behind
// domain-notify-pipe.sock (kubevirt.notify.v1.Notify and kubevirt.notify.info.NotifyInfo), on a
// Unix socket, recording every request in order. It can hold its answers (a virt-handler that
// stopped answering) and refuse Kubernetes events (virt-handler's "VMI not found").
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace chl::test {

struct ReceivedNotification {
  bool k8s = false;
  std::string event_type;  // ADDED/MODIFIED (domain events)
  nlohmann::json json;     // the domain or the Kubernetes event
};

class TestNotifyServer {
 public:
  explicit TestNotifyServer(std::filesystem::path socket);
  ~TestNotifyServer();  // stop()
  TestNotifyServer(const TestNotifyServer&) = delete;
  TestNotifyServer& operator=(const TestNotifyServer&) = delete;

  // Stop serving (answers held are released first) and remove the socket.
  void stop();
  // Hold every answer until release() (or stop()).
  void hold();
  void release();
  // Answer HandleK8sEvent with success:false "VMI not found".
  void refuse_k8s_events(bool refuse);

  std::vector<ReceivedNotification> received() const;
  // Wait until `n` notifications arrived; false on timeout.
  bool wait_for(std::size_t n, std::chrono::milliseconds timeout) const;

  struct Impl;

 private:
  std::filesystem::path socket_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace chl::test

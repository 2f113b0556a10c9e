#pragma once
// A notify server of our own for the tests: what virt-handler serves behind
// domain-notify-pipe.sock (kubevirt.notify.v1.Notify and kubevirt.notify.info.NotifyInfo),
// recording every request in order. As in KubeVirt, the launcher's socket is a pipe: a listener
// at `socket` whose accepted connections are each proxied to the gRPC server on a socket of its
// own (virt-handler's domain-notify.sock; pkg/virt-handler/notify-server/pipe/pipe.go:53-165),
// so that close_pipe() does what processVmDelete does: the listener closed and its file removed,
// while connections already accepted are still served. It can hold its answers (a virt-handler
// that stopped answering) and refuse Kubernetes events (virt-handler's "VMI not found").
// Every domain event is decoded as Go's encoding/json decodes it into api.Domain and read as
// virt-handler reads it (go_domain.hpp): a document that does not decode is answered
// success:false and dropped, as KubeVirt's notify-server/server.go:54-94 does; every decode error,
// CRASH read and misreport of the domain contract is recorded, and stop() (the destructor) fails
// the test with them unless the test took them (take_contract_failures).
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/kubevirt/go_domain.hpp"

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

  // Stop serving (answers held are released first), end every connection and remove the socket:
  // virt-handler gone.
  void stop();
  // What virt-handler's processVmDelete does (its deferred CloseLauncherClient, vm.go:1708 ->
  // cache/maps.go:41-53 -> pipe.go:138-145): the pipe's listener closed, which removes the socket
  // file (Go's UnixListener.Close unlinks what net.ListenUnix bound, safepath.go:437-470); the
  // connections it accepted keep being proxied (pipe.go:104-134) to the server, which runs on.
  void close_pipe();
  // Every connection the pipe accepted, and any it accepts later, is closed (virt-handler gone).
  void end_connections();
  // Connections the pipe has accepted, and how many of them are still open.
  std::size_t accepted() const;
  std::size_t open_connections() const;
  // Hold every answer until release() (or stop()).
  void hold();
  void release();
  // Answer HandleK8sEvent with success:false "VMI not found".
  void refuse_k8s_events(bool refuse);

  // The VMI virt-handler has for the domain; without one, its identity is learnt from the
  // documents (the UID from the first that carries one) and the name checks are skipped.
  void expect_vmi(HandlerVmi vmi);
  // The contract failures recorded so far, cleared (a test that sends bad documents on purpose).
  std::vector<std::string> take_contract_failures();
  // What virt-handler derived from the latest domain event that decoded (nullopt: none yet).
  std::optional<HandlerRead> last_read() const;

  std::vector<ReceivedNotification> received() const;
  // Wait until `n` notifications arrived; false on timeout.
  bool wait_for(std::size_t n, std::chrono::milliseconds timeout) const;

  struct Impl;

 private:
  std::filesystem::path socket_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace chl::test

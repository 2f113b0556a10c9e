#pragma once
// A stand-in for virt-handler's migration proxy (pkg/virt-handler/migration-proxy/
// migration-proxy.go, KubeVirt d923fdb): a unix listener in the source pod
// (/var/run/kubevirt/migrationproxy/<vmiUID>-49152-source.sock there) whose every connection
// becomes a TCP connection to the target node's listener, which dials the target pod's unix
// socket lazily, once per inbound connection. Both listeners as virt-handler makes them; no TLS
// (virt-handler's business). For faults the test can stall the source->target direction after
// a number of bytes, and release it.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace chl::test {

class MigrationProxy {
 public:
  // Listen on `source_socket` (removed first) and on 127.0.0.1:<ephemeral>; dial
  // `target_socket` for each connection the TCP listener accepts.
  static common::Result<std::unique_ptr<MigrationProxy>> start(std::filesystem::path source_socket,
                                                               std::filesystem::path target_socket);
  ~MigrationProxy();
  MigrationProxy(const MigrationProxy&) = delete;
  MigrationProxy& operator=(const MigrationProxy&) = delete;

  // Bytes forwarded from the source pod towards the target so far.
  [[nodiscard]] std::uint64_t forwarded() const { return forwarded_.load(); }
  // Stop forwarding source->target once `bytes` in total have passed (the stream then waits in
  // the sockets' buffers); release() lets it go on.
  void stall_after(std::uint64_t bytes);
  void release();
  [[nodiscard]] std::uint16_t tcp_port() const { return port_; }

 private:
  MigrationProxy() = default;
  void run();
  void wake() const;

  std::filesystem::path source_socket_;
  std::filesystem::path target_socket_;
  common::UniqueFd unix_listener_;
  common::UniqueFd tcp_listener_;
  common::UniqueFd wake_read_;
  common::UniqueFd wake_write_;
  std::uint16_t port_ = 0;
  std::atomic<std::uint64_t> forwarded_{0};
  std::atomic<std::uint64_t> stall_at_{UINT64_MAX};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace chl::test

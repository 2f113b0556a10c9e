#pragma once
// The launcher's relay of an outgoing live migration (docs/kubevirt/migration.md, "Live
// migration"). Cloud Hypervisor v52 has no cancel and no progress API, so it does not send to the
// migration proxy's socket directly: it sends to a socket of ours, and a thread copies the stream
// both ways to virt-handler's <vmiUID>-49152-source.sock. Closing both ends aborts the migration:
// CH's send fails, and CH resumes the VM (vmm/src/lib.rs vm_send_migration). The byte count is the
// progress (ProgressTimeout, watched by the launcher), and the copy is paced to Bandwidth.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace chl::kubevirt {

class MigrationRelay {
 public:
  struct Options {
    // KubeVirt's MigrationOptions.Bandwidth in bytes per second (0 = unlimited): the VMM's
    // stream is copied no faster (CH v52 has no bandwidth limit of its own).
    std::uint64_t bandwidth = 0;
    // Null the `host_mac` of NICs given by tap name in the sender's config as it passes
    // (migration_stream.hpp says why): the target's VMM opens its own taps unprivileged.
    bool forget_tap_host_mac = true;
  };
  // Listen on `listen_path` (a stale file removed); the first connection is relayed to a new
  // connection to `destination`.
  static common::Result<std::unique_ptr<MigrationRelay>> start(std::filesystem::path listen_path,
                                                               std::filesystem::path destination,
                                                               Options options);
  ~MigrationRelay();  // aborts what is still relayed, joins the thread, removes the socket
  MigrationRelay(const MigrationRelay&) = delete;
  MigrationRelay& operator=(const MigrationRelay&) = delete;

  // Cut the stream: both connections are shut down (any thread).
  void abort();
  [[nodiscard]] std::uint64_t bytes_sent() const { return sent_.load(); }
  // When the VMM's stream last moved (bytes reached the proxy), or the relay started: the
  // launcher's ProgressTimeout counts from it.
  [[nodiscard]] std::chrono::steady_clock::time_point last_progress() const {
    return std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(progress_.load()));
  }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  // NICs whose host_mac the relay took out of the config (after the Config request passed).
  [[nodiscard]] int nets_edited() const { return nets_edited_.load(); }

 private:
  MigrationRelay() = default;
  void run();
  // Bandwidth: wait (abort still heard) until `sent` bytes are within the rate since `since`.
  void throttle(std::chrono::steady_clock::time_point since);

  std::filesystem::path path_;
  std::filesystem::path destination_;
  common::UniqueFd listener_;
  common::UniqueFd wake_read_;
  common::UniqueFd wake_write_;
  Options options_;
  std::atomic<std::uint64_t> sent_{0};
  std::atomic<int> nets_edited_{0};
  std::atomic<std::chrono::steady_clock::rep> progress_{0};
  std::atomic<bool> abort_{false};
  std::mutex mu_;  // guards the two connections' fds, for abort() from another thread
  int vmm_fd_ = -1;
  int proxy_fd_ = -1;
  std::thread thread_;
};

}  // namespace chl::kubevirt

#pragma once
// Typed client of Cloud Hypervisor's REST API (HTTP/1.1 over its Unix socket, root /api/v1).
//
// - One method per endpoint, typed bodies from vmm_api/types.hpp.
// - Calls are serialized: one request in flight per client (a mutex). CH's API server
//   handles one request at a time and concurrent requests on one socket can hang, so share
//   one Client per VMM rather than making several.
// - Every call opens a fresh connection to the socket path and closes it after the answer.
//   This works the same whether CH bound the socket (`--api-socket path=P`) or the launcher
//   bound and listens on it and handed it over (`--api-socket fd=N`): a connect queued in the
//   backlog before CH starts accepting simply waits (bounded by the call's timeout).
// - Each call has a deadline covering connect + send + the whole answer: `timeout` for quick
//   calls, `long_timeout` for create/boot/reboot/shutdown/delete/snapshot/restore (booting is
//   known to take more than 1 s), `migration_timeout` for the migration calls.
// - Errors are values (vmm_api/error.hpp): transport kinds via api_errc(), CH's refusals via
//   http_status() and ch_messages(). Contexts read "PUT vm.boot: HTTP 500: Error from API:
//   The VM could not boot: VM config is missing".
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/error.hpp"
#include "vmm_api/error.hpp"
#include "vmm_api/http_response_parser.hpp"
#include "vmm_api/types.hpp"

namespace chl::vmm_api {

struct ClientOptions {
  std::chrono::milliseconds timeout{5000};
  std::chrono::milliseconds long_timeout{30000};  // >= 10 s for create + boot
  std::chrono::milliseconds migration_timeout{std::chrono::minutes(60)};
};

class Client {
 public:
  explicit Client(std::string socket_path, ClientOptions options = {});
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client();

  [[nodiscard]] const std::string& socket_path() const { return socket_path_; }
  [[nodiscard]] const ClientOptions& options() const { return options_; }

  // ---- VMM ----
  common::Result<VmmPingResponse> vmm_ping();
  common::Status vmm_shutdown();

  // ---- VM lifecycle ----
  common::Status vm_create(const VmConfig& config);
  common::Status vm_boot();
  common::Result<VmInfo> vm_info();
  common::Result<VmCounters> vm_counters();
  common::Status vm_pause();
  common::Status vm_resume();
  common::Status vm_shutdown();
  common::Status vm_reboot();
  common::Status vm_power_button();
  common::Status vm_nmi();
  common::Status vm_delete();
  common::Status vm_snapshot(const VmSnapshotConfig& config);
  common::Status vm_restore(const RestoreConfig& config);
  common::Status vm_resize(const VmResize& resize);

  // ---- hot-plug: PciDeviceInfo when CH answers 200 (running VM), nullopt on 204 (cold add
  // to a VM that is created but not booted) ----
  common::Result<std::optional<PciDeviceInfo>> vm_add_disk(const DiskConfig& disk);
  // `tap_fds` (one per queue pair) go with SCM_RIGHTS; the client does not close them.
  common::Result<std::optional<PciDeviceInfo>> vm_add_net(const NetConfig& net,
                                                          std::span<const int> tap_fds = {});
  common::Result<std::optional<PciDeviceInfo>> vm_add_fs(const FsConfig& fs);
  common::Result<std::optional<PciDeviceInfo>> vm_add_device(const DeviceConfig& device);
  common::Result<std::optional<PciDeviceInfo>> vm_add_vsock(const VsockConfig& vsock);
  common::Result<std::optional<PciDeviceInfo>> vm_add_pmem(const PmemConfig& pmem);
  common::Status vm_remove_device(const VmRemoveDevice& device);

  // ---- migration ----
  common::Status vm_send_migration(const SendMigrationData& data);
  common::Status vm_receive_migration(const ReceiveMigrationData& data);

  // ---- low level ----
  // One call: "GET"/"PUT", the endpoint name ("vm.info"), an optional JSON body, fds.
  // Returns every HTTP answer (non-2xx included, untouched); fails only on transport errors.
  common::Result<HttpResponse> request(std::string_view method, std::string_view endpoint,
                                       std::optional<std::string_view> body,
                                       std::chrono::milliseconds timeout,
                                       std::span<const int> fds = {});

 private:
  enum class Budget { quick, long_running, migration };
  std::chrono::milliseconds budget(Budget b) const;
  // request() + non-2xx -> http_error; errors wrapped "<METHOD> <endpoint>".
  common::Result<HttpResponse> call(std::string_view method, std::string_view endpoint,
                                    std::optional<std::string_view> body, Budget b,
                                    std::span<const int> fds = {});
  common::Status action(std::string_view endpoint, Budget b);
  template <typename Body>
  common::Status put_body(std::string_view endpoint, const Body& body, Budget b);
  template <typename T>
  common::Result<T> get_json(std::string_view endpoint);
  common::Result<std::optional<PciDeviceInfo>> hot_add(std::string_view endpoint,
                                                       const std::string& body,
                                                       std::span<const int> fds);

  std::string socket_path_;
  ClientOptions options_;
  std::unique_ptr<std::mutex> mutex_;  // serializes calls; heap-held so Client can move
};

}  // namespace chl::vmm_api

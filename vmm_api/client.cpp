#include "vmm_api/client.hpp"

#include <utility>

#include "common/log.hpp"
#include "vmm_api/unix_http.hpp"

namespace chl::vmm_api {

using common::fail;
using common::Result;
using common::Status;

namespace {

constexpr std::string_view kApiRoot = "/api/v1/";

std::string what(std::string_view method, std::string_view endpoint) {
  std::string s(method);
  s.append(" ").append(endpoint);
  return s;
}

}  // namespace

Client::Client(std::string socket_path, ClientOptions options)
    : socket_path_(std::move(socket_path)),
      options_(options),
      mutex_(std::make_unique<std::mutex>()) {}

Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;
Client::~Client() = default;

std::chrono::milliseconds Client::budget(Budget b) const {
  switch (b) {
    case Budget::quick:
      return options_.timeout;
    case Budget::long_running:
      return options_.long_timeout;
    case Budget::migration:
      return options_.migration_timeout;
  }
  return options_.timeout;
}

Result<HttpResponse> Client::request(std::string_view method, std::string_view endpoint,
                                     std::optional<std::string_view> body,
                                     std::chrono::milliseconds timeout, std::span<const int> fds) {
  std::string target(kApiRoot);
  target.append(endpoint);
  const HttpRequest req{method, target, body, fds};
  std::lock_guard lock(*mutex_);
  // The deadline starts once it is our turn: time spent queued behind another call on this
  // client does not eat into this call's budget.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto r = unix_http_request(socket_path_, req, deadline);
  if (!r) {
    CHL_LOG_DEBUG("vmm api {} {}: {}", method, endpoint, r.error().message());
  } else {
    CHL_LOG_DEBUG("vmm api {} {}: HTTP {}", method, endpoint, r->status);
  }
  return r;
}

Result<HttpResponse> Client::call(std::string_view method, std::string_view endpoint,
                                  std::optional<std::string_view> body, Budget b,
                                  std::span<const int> fds) {
  const std::string w = what(method, endpoint);
  auto r = request(method, endpoint, body, budget(b), fds);
  if (!r) {
    return tl::unexpected(std::move(r.error()).wrap(w));
  }
  if (r->status < 200 || r->status > 299) {
    return tl::unexpected(http_error(w, r->status, r->reason, parse_ch_error_body(r->body)));
  }
  return r;
}

Status Client::action(std::string_view endpoint, Budget b) {
  CHL_TRY_VOID(call("PUT", endpoint, std::nullopt, b));
  return {};
}

template <typename Body>
Status Client::put_body(std::string_view endpoint, const Body& body, Budget b) {
  const std::string text = to_json_text(body);
  CHL_TRY_VOID(call("PUT", endpoint, text, b));
  return {};
}

template <typename T>
Result<T> Client::get_json(std::string_view endpoint) {
  CHL_TRY(HttpResponse resp, call("GET", endpoint, std::nullopt, Budget::quick));
  auto v = from_json_text<T>(resp.body, "body");
  if (!v) {
    return fail(ApiErrc::malformed_response, what("GET", endpoint) + ": malformed response: HTTP " +
                                                 std::to_string(resp.status) + ": " +
                                                 v.error().context);
  }
  return v;
}

Result<std::optional<PciDeviceInfo>> Client::hot_add(std::string_view endpoint,
                                                     const std::string& body,
                                                     std::span<const int> fds) {
  CHL_TRY(HttpResponse resp, call("PUT", endpoint, body, Budget::quick, fds));
  if (resp.status == 204 || resp.body.empty()) {
    return std::optional<PciDeviceInfo>{};
  }
  auto info = parse_pci_device_info(resp.body);
  if (!info) {
    return fail(ApiErrc::malformed_response, what("PUT", endpoint) + ": malformed response: HTTP " +
                                                 std::to_string(resp.status) + ": " +
                                                 info.error().context);
  }
  return std::optional<PciDeviceInfo>(std::move(*info));
}

// ---- endpoints ----------------------------------------------------------------------------

Result<VmmPingResponse> Client::vmm_ping() { return get_json<VmmPingResponse>("vmm.ping"); }
Status Client::vmm_shutdown() { return action("vmm.shutdown", Budget::long_running); }

Status Client::vm_create(const VmConfig& config) {
  return put_body("vm.create", config, Budget::long_running);
}
Status Client::vm_boot() { return action("vm.boot", Budget::long_running); }
Result<VmInfo> Client::vm_info() { return get_json<VmInfo>("vm.info"); }
Result<VmCounters> Client::vm_counters() { return get_json<VmCounters>("vm.counters"); }
Status Client::vm_pause() { return action("vm.pause", Budget::quick); }
Status Client::vm_resume() { return action("vm.resume", Budget::quick); }
Status Client::vm_shutdown() { return action("vm.shutdown", Budget::long_running); }
Status Client::vm_reboot() { return action("vm.reboot", Budget::long_running); }
Status Client::vm_power_button() { return action("vm.power-button", Budget::quick); }
Status Client::vm_nmi() { return action("vm.nmi", Budget::quick); }
Status Client::vm_delete() { return action("vm.delete", Budget::long_running); }
Status Client::vm_snapshot(const VmSnapshotConfig& config) {
  return put_body("vm.snapshot", config, Budget::long_running);
}
Status Client::vm_restore(const RestoreConfig& config) {
  return put_body("vm.restore", config, Budget::long_running);
}
Status Client::vm_resize(const VmResize& resize) {
  return put_body("vm.resize", resize, Budget::quick);
}

Result<std::optional<PciDeviceInfo>> Client::vm_add_disk(const DiskConfig& disk) {
  return hot_add("vm.add-disk", to_json_text(disk), {});
}
Result<std::optional<PciDeviceInfo>> Client::vm_add_net(const NetConfig& net,
                                                        std::span<const int> tap_fds) {
  return hot_add("vm.add-net", to_json_text(net), tap_fds);
}
Result<std::optional<PciDeviceInfo>> Client::vm_add_fs(const FsConfig& fs) {
  return hot_add("vm.add-fs", to_json_text(fs), {});
}
Result<std::optional<PciDeviceInfo>> Client::vm_add_device(const DeviceConfig& device) {
  return hot_add("vm.add-device", to_json_text(device), {});
}
Result<std::optional<PciDeviceInfo>> Client::vm_add_vsock(const VsockConfig& vsock) {
  return hot_add("vm.add-vsock", to_json_text(vsock), {});
}
Result<std::optional<PciDeviceInfo>> Client::vm_add_pmem(const PmemConfig& pmem) {
  return hot_add("vm.add-pmem", to_json_text(pmem), {});
}
Status Client::vm_remove_device(const VmRemoveDevice& device) {
  return put_body("vm.remove-device", device, Budget::quick);
}

Status Client::vm_send_migration(const SendMigrationData& data) {
  return put_body("vm.send-migration", data, Budget::migration);
}
Status Client::vm_receive_migration(const ReceiveMigrationData& data) {
  return put_body("vm.receive-migration", data, Budget::migration);
}

}  // namespace chl::vmm_api

#pragma once
// What the command server (cmd_server.hpp) asks of the launcher core: one call per RPC of
// kubevirt.cmd.v1.Cmd that ch-launcher implements, with plain C++ types (no gRPC here). An
// error becomes Response{success:false, message: error.message()}; the server keeps serving.
// Calls arrive on the server's threads, possibly several at once: an implementation hands them
// to its own event loop and waits for the answer.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace chl::kubevirt {

// VirtualMachineOptions.VirtualMachineSMBios.
struct SmBios {
  std::string manufacturer;
  std::string product;
  std::string version;
  std::string sku;
  std::string family;
  bool operator==(const SmBios&) const = default;
};

// The parts of VirtualMachineOptions a launcher can honour; the rest is ignored.
struct SyncOptions {
  // interface name → how it attaches to the domain ("tap" for bridge and masquerade).
  std::map<std::string, std::string> interface_domain_attachment;
  std::optional<SmBios> smbios;
  std::uint32_t mem_balloon_stats_period = 0;  // seconds; 0: no balloon statistics
  std::vector<std::string> preallocated_volumes;
  bool expand_disks = false;  // clusterConfig.ExpandDisksEnabled (or the old field)
  bool free_page_reporting_disabled = false;
  bool serial_console_log_disabled = false;
};

// Exec's answer: the command ran; a non-zero exit is a result, not an error.
struct ExecOutput {
  int exit_code = 0;
  std::string stdout_text;
};

class CmdHandler {
 public:
  virtual ~CmdHandler() = default;

  // `vmi_json` is the VirtualMachineInstance as virt-handler marshals it (spec and status).
  virtual common::Status sync(std::string_view vmi_json, const SyncOptions& options) = 0;
  virtual common::Status pause(std::string_view vmi_json) = 0;
  virtual common::Status unpause(std::string_view vmi_json) = 0;
  virtual common::Status shutdown(std::string_view vmi_json) = 0;       // ACPI power button
  virtual common::Status kill(std::string_view vmi_json) = 0;           // forced off
  virtual common::Status delete_domain(std::string_view vmi_json) = 0;  // gone; final notify
  virtual common::Status soft_reboot(std::string_view vmi_json) = 0;
  virtual common::Status reset(std::string_view vmi_json) = 0;
  virtual common::Status ping() = 0;
  // api.Domain JSON (to_domain_json); an empty string when there is no domain (yet).
  virtual common::Result<std::string> get_domain() = 0;
  // DomainStats JSON (to_stats_json).
  virtual common::Result<std::string> get_domain_stats() = 0;
  // The VMM's version ("cloud-hypervisor v52.0", "10.0.13").
  virtual common::Result<std::string> get_qemu_version() = 0;
  virtual common::Status sync_cpus(std::string_view vmi_json) = 0;
  virtual common::Status sync_memory(std::string_view vmi_json) = 0;
  // HotplugHostDevices: attach the VMI's SR-IOV VFs the domain does not have yet.
  virtual common::Status hotplug_host_devices(std::string_view vmi_json) {
    (void)vmi_json;
    return not_supported("HotplugHostDevices");
  }
  // Live migration (docs/kubevirt/migration.md, "Live migration"). A handler without it refuses.
  // The target: get ready to receive the VMI's VM (answer once it can).
  virtual common::Status sync_migration_target(std::string_view vmi_json, const SyncOptions& options) {
    (void)vmi_json, (void)options;
    return not_supported("SyncMigrationTarget");
  }
  // The source: start sending (answer at once; the domain's metadata follows the migration).
  // `options_json` is KubeVirt's MigrationOptions as JSON.
  virtual common::Status migrate(std::string_view vmi_json, std::string_view options_json) {
    (void)vmi_json, (void)options_json;
    return not_supported("MigrateVirtualMachine");
  }
  virtual common::Status cancel_migration(std::string_view vmi_json) {
    (void)vmi_json;
    return not_supported("CancelVirtualMachineMigration");
  }
  virtual common::Status finalize_migration(std::string_view vmi_json) {
    (void)vmi_json;
    return not_supported("FinalizeVirtualMachineMigration");
  }
  virtual common::Status signal_target_pod_cleanup(std::string_view vmi_json) {
    (void)vmi_json;
    return not_supported("SignalTargetPodCleanup");
  }

  // ---- the guest agent (docs/guest-agent.md); not implemented: refused ----
  // FreezeVirtualMachine / UnfreezeVirtualMachine (KubeVirt's FreezeVMI / UnfreezeVMI).
  virtual common::Status freeze(std::string_view vmi_json, std::int32_t unfreeze_timeout_seconds) {
    (void)vmi_json;
    (void)unfreeze_timeout_seconds;
    return not_implemented("FreezeVirtualMachine");
  }
  virtual common::Status unfreeze(std::string_view vmi_json) {
    (void)vmi_json;
    return not_implemented("UnfreezeVirtualMachine");
  }
  // GetGuestInfo / GetUsers / GetFilesystems: KubeVirt's JSON documents, from the poller's cache.
  virtual common::Result<std::string> get_guest_info() { return not_implemented("GetGuestInfo"); }
  virtual common::Result<std::string> get_users() { return not_implemented("GetUsers"); }
  virtual common::Result<std::string> get_filesystems() {
    return not_implemented("GetFilesystems");
  }
  // guest-ping; an error is also a gRPC error (virt-probe's exit status), as KubeVirt's server.go.
  virtual common::Status guest_ping(std::string_view domain_name, std::int32_t timeout_seconds) {
    (void)domain_name;
    (void)timeout_seconds;
    return not_implemented("GuestPing");
  }
  virtual common::Result<ExecOutput> exec(std::string_view domain_name, const std::string& command,
                                          const std::vector<std::string>& args,
                                          std::int32_t timeout_seconds) {
    (void)domain_name;
    (void)command;
    (void)args;
    (void)timeout_seconds;
    return not_implemented("Exec");
  }

 protected:
  static common::Status not_supported(const std::string& rpc) {
    return common::fail(std::errc::operation_not_supported, rpc + ": not supported");
  }
  static tl::unexpected<common::Error> not_implemented(const char* rpc) {
    return common::fail(std::errc::function_not_supported, std::string(rpc) + ": not supported");
  }
};

}  // namespace chl::kubevirt

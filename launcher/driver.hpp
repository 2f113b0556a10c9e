#pragma once
// The interface the launcher's lifecycle code talks to, one implementation per hypervisor:
// CloudHypervisorDriver (ch_driver.hpp) and LibvirtDriver for QEMU/KVM (libvirt_driver.hpp),
// chosen by run_launcher from the VMI's spec.hypervisor. Adding a hypervisor is adding a
// capabilities description and a driver.
//
// Threading contract:
// - launch(), kill_vmm(), request_stop(), state queries and the event sink run on the launcher's
//   io_context thread; none of them may block (LibvirtDriver's kill_vmm signals QEMU itself).
//   A driver whose events come from another thread (libvirt's event loop) posts them there.
// - The blocking operations (create_and_boot, pause, …) run on the launcher's single worker
//   thread, one at a time, so a slow hypervisor never stalls the event loop.
// An operation a driver cannot do answers std::errc::operation_not_supported with
// "not supported by <hypervisor>".
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/error.hpp"
#include "events/domain_state.hpp"
#include "events/domain_state_tracker.hpp"
#include "guest_agent/command_transport.hpp"

namespace chl::launcher {

// An outgoing live migration (Driver::send_migration).
struct MigrationSend {
  std::string destination;       // "unix:<path>": the migration proxy's socket in this pod
  std::uint64_t downtime_ms = 0;  // 0: the VMM's default
  std::uint64_t timeout_s = 0;    // 0: the VMM's default
  bool ignore_timeout = false;    // at the timeout: pause and finish (else cancel)
  // The libvirt path (KubeVirt's virt-launcher: live-migration-source.go). The destination's
  // libvirt ("unix:<path>": the proxy socket virt-handler creates in this pod for the target's
  // libvirt) is `destination`; QEMU's own stream goes to `migrate_uri`.
  std::string migrate_uri;              // "unix://<path>": the direct-migration proxy socket
  std::uint64_t bandwidth_mib = 0;      // MiB/s, 0: unlimited
  std::int64_t progress_timeout_s = 0;  // abort when the remaining data has not shrunk for so long
  std::int64_t completion_timeout_s = 0;  // CompletionTimeoutPerGiB x the data to move; 0: none
  bool allow_auto_converge = false;
  bool allow_post_copy = false;
  bool allow_workload_disruption = false;  // at completion_timeout: post-copy, or pause, to finish
  bool unsafe = false;
  std::optional<std::uint32_t> parallel_threads;  // ParallelMigrationThreads (multifd)
  // Called (any thread) when the driver changes the migration's mode: "PostCopy", "Paused".
  std::function<void(const std::string&)> on_mode;
};

class Driver {
 public:
  using EventSink = std::function<void(const events::DomainEvent&)>;
  using ExitHandler = std::function<void()>;
  virtual ~Driver() = default;

  [[nodiscard]] virtual std::string hypervisor() const = 0;

  // ---- io thread ----
  // Start the VMM process and watch its events and exit; domain events go to `sink`, and
  // `on_exit` is called once the VMM process is gone (after its last events were delivered),
  // whether or not that exit changed the domain's state.
  virtual common::Status launch(EventSink sink, ExitHandler on_exit) = 0;
  // The user asked for a stop (for the state's reason: Shutdown vs Destroyed).
  virtual void request_stop(events::StopRequest kind) = 0;
  // Kill the VMM (SIGKILL) by a handle verified to be this VM's VMM (CH: our child's pidfd;
  // libvirt: a pidfd opened on QEMU's pid and checked against its command line at start), never
  // by a bare pid that may have been recycled; its exit then arrives as an event.
  virtual void kill_vmm() = 0;
  // The launcher leaves while a blocking call of this driver never returned (a hung hypervisor):
  // the driver is leaked, not destroyed; after this it must post nothing more to the io_context.
  virtual void abandon() {}
  [[nodiscard]] virtual events::DomainState state() const = 0;
  [[nodiscard]] virtual events::StateReason reason() const = 0;
  // True when the VM will not run again and the VMM process is gone.
  [[nodiscard]] virtual bool finished() const = 0;
  // VMM identity for status: {"pid":…, "version":…, "binary":…}.
  [[nodiscard]] virtual nlohmann::json vmm_identity() const = 0;
  // The guest agent through the hypervisor's own channel (libvirt: virDomainQemuAgentCommand and
  // the agent lifecycle event), for the one AgentClient of guest_agent/; null when the launcher
  // reaches the agent itself (Cloud Hypervisor: the hybrid vsock). Valid for the driver's life,
  // reporting "disconnected" while there is no domain.
  [[nodiscard]] virtual std::shared_ptr<guest_agent::CommandTransport> agent_transport() {
    return nullptr;
  }

  // ---- worker thread (blocking) ----
  // Define and boot the VM. Returns the console PTY path when the hypervisor gives one.
  virtual common::Result<std::optional<std::string>> create_and_boot() = 0;
  virtual common::Status pause() = 0;
  virtual common::Status resume() = 0;
  virtual common::Status reboot() = 0;
  // A guest-cooperative reboot without the guest agent: KubeVirt's SoftRebootVMI without
  // AgentConnected (manager.go: libvirt DOMAIN_REBOOT_ACPI_POWER_BTN). Where the hypervisor has
  // no ACPI reboot, its reboot.
  virtual common::Status acpi_reboot() = 0;
  virtual common::Status power_button() = 0;
  // Stop the VM hard and end the VMM politely (CH: vm.shutdown then vmm.shutdown).
  virtual common::Status force_off() = 0;
  // The VM now, in the shape of Cloud Hypervisor's vm.info (what `status` prints from):
  // config.cpus.boot_vcpus, config.memory.size (bytes), config.disks[] ({id, path, readonly}),
  // state (the hypervisor's own state word); a driver may add fields of its own.
  virtual common::Result<nlohmann::json> info() = 0;
  // The console PTY now: Cloud Hypervisor makes a new one for every new VM run (reboot,
  // restore), so the launcher asks again after those.
  virtual common::Result<std::optional<std::string>> console_pty() = 0;
  virtual common::Result<nlohmann::json> counters() = 0;
  virtual common::Status snapshot(const std::filesystem::path& dir) = 0;
  virtual common::Status restore(const std::filesystem::path& dir) = 0;
  virtual common::Result<nlohmann::json> add_disk(const nlohmann::json& disk) = 0;
  virtual common::Status remove_device(const std::string& id) = 0;
  // A VFIO device hotplugged into the running VM (KubeVirt's HotplugHostDevices: an SR-IOV VF):
  // `path` is its sysfs directory ("/sys/bus/pci/devices/<addr>/"), `id` the device's id (the
  // alias, "sriov-<interface>"). Replies what the hypervisor answered about it (CH: its
  // PciDeviceInfo). The libvirt path refuses SR-IOV when it validates the VMI, so there is no
  // VF to hotplug there: refused by default.
  virtual common::Result<nlohmann::json> add_host_device(const std::string& id, const std::string& path) {
    (void)id, (void)path;
    return common::fail(std::errc::operation_not_supported, "host device hotplug: not supported by " + hypervisor());
  }
  // CPU and memory hotplug within the headroom the VM was created with (maxSockets, maxGuest):
  // the vCPU count and the guest memory in bytes, each when given.
  virtual common::Status resize(std::optional<std::uint32_t> vcpus, std::optional<std::uint64_t> memory_bytes) = 0;
  // Live migration. Send: the VM goes to `m.destination`, blocking until it is there (the VMM
  // then ends) or the migration failed (the VM runs on here). Receive: the VMM, with no VM yet,
  // waits on `receiver` ("unix:<path>") for one and runs it. Both block for the whole migration
  // and are never timed out by the launcher (a migration of a large guest takes minutes).
  virtual common::Status send_migration(const MigrationSend& m) {
    (void)m;
    return common::fail(std::errc::operation_not_supported, "live migration: not supported by " + hypervisor());
  }
  virtual common::Status receive_migration(const std::string& receiver) {
    (void)receiver;
    return common::fail(std::errc::operation_not_supported, "live migration: not supported by " + hypervisor());
  }
  // Abort the outgoing migration under way (any thread, while send_migration blocks): the VM
  // runs on here and send_migration fails. A driver that cannot abort (Cloud Hypervisor v52: the
  // launcher cuts its relayed stream instead) answers operation_not_supported.
  virtual common::Status abort_migration() {
    return common::fail(std::errc::operation_not_supported,
                        "aborting a migration: not supported by " + hypervisor());
  }
};

}  // namespace chl::launcher

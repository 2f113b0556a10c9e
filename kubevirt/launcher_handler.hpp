#pragma once
// virt-launcher mode's adapter between KubeVirt's protocol and the launcher core: the
// CmdHandler (cmd_handler.hpp) over LauncherService, and the domain's life told to virt-handler
// through the NotifyClient. Thin on purpose: every command is LauncherService's own, run on its
// event loop; this class only translates and waits.
//
// The first Sync that names a VMI this launcher can run is handed to the main thread
// (wait_launch), which runs the same launch as `ch-launcher run` (cli/run_launcher.cpp) and
// calls attach() once the service exists; Sync answers when the domain is Running, or with the
// reason it is not. A refused Sync (validation, a missing disk…) answers success:false and the
// launcher keeps waiting for the next one.
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "kubevirt/access_credentials.hpp"
#include "kubevirt/cmd_handler.hpp"
#include "kubevirt/domain_json.hpp"
#include "kubevirt/migration_relay.hpp"
#include "kubevirt/launcher_agent.hpp"
#include "kubevirt/notify_client.hpp"
#include "vmi/validator.hpp"

namespace chl::launcher {
class LauncherService;
}

namespace chl::kubevirt {

struct LauncherHandlerOptions {
  std::string hypervisor = "cloud-hypervisor";  // --hypervisor, for validation
  std::string name;                             // --name (the VMI this pod is for); "" = any
  std::string namespace_;                       // --namespace
  std::string uid;                              // --uid
  std::chrono::seconds sync_timeout{300};       // how long a Sync waits for Running
  std::chrono::seconds call_timeout{60};        // how long another call waits for the core
  std::chrono::seconds final_notify_timeout{5}; // the final MODIFIED NoState, before exit
  // After the VM stopped, how long the Shutoff domain waits for virt-handler's DeleteDomain,
  // and after that (and a Kill, a no-op on a stopped domain) how much longer: KubeVirt's
  // waitForFinalNotify (cmd/virt-launcher/virt-launcher.go:286-343), 15 s and 30 s.
  std::chrono::milliseconds delete_wait{15000};
  std::chrono::milliseconds after_kill_wait{30000};
  // --hotplug-disk-dir: where virt-handler mounts hotplugged volumes (<volume>.img, or the
  // block device <volume>).
  std::string hotplug_disk_dir = "/var/run/kubevirt/hotplug-disks";
  // Where virt-handler puts the live-migration proxy sockets in this pod
  // (<kubevirt-share-dir>/migrationproxy).
  std::string migration_proxy_dir = "/var/run/kubevirt/migrationproxy";
  // Where the launcher's own migration relay socket goes (its state directory).
  std::string relay_dir = "/var/run/kubevirt-ephemeral-disks/ch-launcher";
  // qemu-kvm: where virt-handler's target proxy dials this pod's libvirt (port key 0,
  // pkg/virt-handler/migration-target.go).
  std::string libvirt_socket = "/var/run/libvirt/virtqemud-sock";
  // The guest agent (launcher_agent.hpp): Cloud Hypervisor's hybrid vsock socket (the plan's
  // <state dir>/agent.vsock) and the guest's vsock port; "" = no agent transport on this path.
  std::string agent_vsock_socket;
  std::uint32_t agent_vsock_port = 1024;
  // Access credentials (access_credentials.hpp): where the Secrets are mounted
  // (<--private-dir>/secret) and how long changes are batched (KubeVirt: 15 s; tests shorten it
  // with --access-credentials-batch-ms), the forced resync (5 min).
  std::string secret_dir = "/var/run/kubevirt-private/secret";
  std::chrono::milliseconds access_credentials_batch{15000};
  std::chrono::milliseconds access_credentials_resync{300000};
  // <--kubevirt-share-dir>/virtiofs-containers: the virtiofs containers' sockets, as the domain
  // shows them (Spec.Devices.Filesystems).
  std::string virtiofs_dir = "/var/run/kubevirt/virtiofs-containers";
  // KubeVirt's network-info (the SR-IOV VFs' PCI addresses, launcher/sriov_devices.hpp), read
  // again by HotplugHostDevices.
  std::string network_info_path = "/etc/podinfo/network-info";
};

class LauncherHandler final : public CmdHandler {
 public:
  struct LaunchRequest {
    std::string vmi_json;
    SyncOptions options;
    std::optional<std::string> incoming_migration;  // receive the VM on this URL (a migration target)
  };

  // `notify` may be null (no virt-handler to tell); it must outlive this handler.
  LauncherHandler(LauncherHandlerOptions options, NotifyClient* notify);
  ~LauncherHandler() override;

  // ---- the main thread ----
  // The next accepted Sync's VMI, or nullopt once stop() was called.
  std::optional<LaunchRequest> wait_launch();
  // Wake wait_launch() for good (SIGTERM before any Sync).
  void stop();
  // The launch of the pending Sync failed before the VM ran: answer it, wait for the next.
  void launch_failed(const std::string& message);
  // The service runs the VMI now (before its loop starts): follow its events.
  void attach(launcher::LauncherService& service, const vmi::CheckedVmi& checked);
  // The service has ended. A launch that failed before the VM ran (exit_code
  // kExitLaunchFailed: the VMM refused to boot it…) answers its Sync with the VMM's message,
  // leaves the domain defined and not running (Shutoff/Unknown) and returns false: the launcher
  // keeps serving, and virt-handler's next Sync retries. Otherwise the VM has run and stopped:
  // its Shutoff domain stays queryable until DeleteDomain (or delete_wait, then
  // after_kill_wait), then the final notification (NoState/NonExistent, deletionTimestamp) is
  // delivered within final_notify_timeout, and it returns true: the launcher exits 0.
  bool finished(int exit_code);

  // ---- CmdHandler (the command server's threads) ----
  common::Status sync(std::string_view vmi_json, const SyncOptions& options) override;
  common::Status pause(std::string_view vmi_json) override;
  common::Status unpause(std::string_view vmi_json) override;
  common::Status shutdown(std::string_view vmi_json) override;
  common::Status kill(std::string_view vmi_json) override;
  common::Status delete_domain(std::string_view vmi_json) override;
  common::Status soft_reboot(std::string_view vmi_json) override;
  common::Status reset(std::string_view vmi_json) override;
  common::Status ping() override;
  common::Result<std::string> get_domain() override;
  common::Result<std::string> get_domain_stats() override;
  common::Result<std::string> get_qemu_version() override;
  common::Status sync_cpus(std::string_view vmi_json) override;
  common::Status sync_memory(std::string_view vmi_json) override;
  // SR-IOV VFs Multus plugged after the start (launcher_hotplug.cpp), on Cloud Hypervisor.
  common::Status hotplug_host_devices(std::string_view vmi_json) override;
  // Live migration (launcher_migration.cpp).
  common::Status sync_migration_target(std::string_view vmi_json, const SyncOptions& options) override;
  common::Status migrate(std::string_view vmi_json, std::string_view options_json) override;
  common::Status cancel_migration(std::string_view vmi_json) override;
  common::Status finalize_migration(std::string_view vmi_json) override;
  common::Status signal_target_pod_cleanup(std::string_view vmi_json) override;
  // The guest agent (launcher_agent.cpp; freeze, unfreeze, unpause's clock and soft_reboot:
  // launcher_agent_ops.cpp).
  common::Status freeze(std::string_view vmi_json, std::int32_t unfreeze_timeout_seconds) override;
  common::Status unfreeze(std::string_view vmi_json) override;
  common::Result<std::string> get_guest_info() override;
  common::Result<std::string> get_users() override;
  common::Result<std::string> get_filesystems() override;
  common::Status guest_ping(std::string_view domain_name, std::int32_t timeout_seconds) override;
  common::Result<ExecOutput> exec(std::string_view domain_name, const std::string& command,
                                  const std::vector<std::string>& args,
                                  std::int32_t timeout_seconds) override;

 private:
  // Idle: no VM runs (none yet, or its boot failed); Launching: a Sync's VM is starting;
  // Running: the service runs the VM (the domain may already be off, the service not yet
  // ended); Stopped: the service has ended, the Shutoff domain waits for DeleteDomain;
  // Finished: the domain is gone (final notification sent).
  enum class Phase { Idle, Launching, Running, Stopped, Finished };
  using Json = nlohmann::json;
  using Call = std::function<void(launcher::LauncherService&, std::function<void(common::Result<Json>)>)>;

  // Run `call` on the service's loop and wait for its reply (bounded: call_timeout, or `timeout`).
  common::Result<Json> on_service(const std::string& what, Call call,
                                  std::optional<std::chrono::seconds> timeout = std::nullopt);
  // on_service for a command whose reply carries nothing the caller needs.
  common::Status command(const std::string& what, Call call);
  // The domain's state changed (service loop): tell virt-handler, answer a waiting Sync.
  void on_state(events::DomainState state, events::StateReason reason);
  // Send the domain as it is now (mu_ held).
  void send_locked(DomainEventType type);
  // SIGTERM (service loop): GracePeriod.MarkedForGracefulShutdown, told to virt-handler.
  void mark_graceful_shutdown();
  // Whether the domain is stopped or stopping: Shutdown, Kill are no-ops then (mu_ held).
  bool off_or_stopping_locked() const;
  // A Kubernetes event about the VMI ("Warning", "SyncFailed", …).
  void k8s_event(const std::string& type, const std::string& reason, const std::string& message);
  // What the VMM really has (LauncherService::status()'s "info") into doc_ (apply_vmm_info), and a
  // MODIFIED event when that changed the document or `send_anyway`.
  common::Status refresh_devices(bool send_anyway);
  // The same without waiting (the first Sync answers as soon as the domain runs), retried on the
  // service's loop while the VMM's boot call is still finishing.
  void refresh_devices_later(int attempts);
  // A LauncherService::status() answer into doc_ (mu_ not held).
  void apply_status(const nlohmann::json& status, bool send_anyway);
  static constexpr int kRefreshAttempts = 100;
  static constexpr std::chrono::milliseconds kRefreshRetry{10};
  // The VMI a call carries, parsed once; refused unless it is JSON naming this pod's VMI.
  common::Result<nlohmann::json> this_pods_vmi(std::string_view vmi_json) const;

  LauncherHandlerOptions opts_;
  NotifyClient* notify_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Phase phase_ = Phase::Idle;
  bool stopped_ = false;
  std::optional<LaunchRequest> request_;  // handed to wait_launch
  // The answer of the Sync that started the launch: set once.
  std::optional<common::Status> sync_result_;
  launcher::LauncherService* service_ = nullptr;
  DomainDocument doc_;   // the domain as virt-handler sees it
  bool added_ = false;   // ADDED sent
  bool deleted_ = false;  // DeleteDomain asked for the domain to go (undefine)
  // A launch's end seen before its Sync was answered (Shutoff/Crashed while Launching): held
  // until finished() knows whether the boot failed (retried) or the VM ran and ended.
  std::optional<std::pair<events::DomainState, events::StateReason>> launch_end_;
  nlohmann::json launched_spec_;  // the spec the domain was started from, without hotplug volumes
  // CPU and memory hotplug (SyncVirtualMachineCPUs/Memory): the running VM's topology and memory
  // and the headroom it was created with (maxSockets, maxGuest).
  struct Hotplug {
    std::uint32_t cores = 1, threads = 1, max_sockets = 1;
    std::int64_t memory = 0, max_memory = 0;
  };
  Hotplug hotplug_;
  std::mutex host_device_hotplug_mu_;  // one HotplugHostDevices at a time
  // Volumes hotplugged into the running VM (virt-handler's hotplug volumes): name -> the VMM's
  // device id.
  std::map<std::string, std::string> hotplugged_;
  // Volumes detached whose device the VMM still has (Cloud Hypervisor keeps it, in vm.info's
  // device_tree, until the guest ejects it): the VMM's device id -> the volume. The domain keeps
  // their disks, as libvirt keeps a disk until QEMU's DEVICE_DELETED, until the VMM's
  // device-removed event (or a device tree without them) -- then a MODIFIED event, as
  // virt-launcher sends on libvirt's DEVICE_REMOVED (notify-client/client.go).
  std::map<std::string, std::string> detaching_;
  // device-removed ids seen before their detach was recorded (bounded).
  std::set<std::string> ejected_;
  // A device-removed event (service loop); "" for all the devices still detaching (a reboot).
  void on_device_removed(const std::string& id);
  // Drop a detached volume's disk from doc_ (mu_ held).
  void drop_disk_locked(const std::string& name);
  // Attach the VMI's mounted hotplug volumes that are not attached, detach the attached ones it
  // no longer has (the service's add_disk/remove_device); tell virt-handler the new disks.
  common::Status sync_hotplug_volumes(const nlohmann::json& vmi);
  // What of a later VMI's CPU topology or memory is not within the running VM's headroom: the
  // field paths with why; empty when within it.
  static std::vector<std::string> beyond_headroom(const Hotplug& running, const vmi::Vmi& want);
  Hotplug hotplug_now() const;
  // The VMI of SyncVirtualMachineCPUs/Memory when its fields under `field` are within the
  // headroom; else a refusal "<what>: <field path>: why".
  common::Result<vmi::Vmi> within_headroom(std::string_view vmi_json, const std::string& what, const std::string& field);
  // Live migration (launcher_migration.cpp). The VMM's API is held for the whole migration:
  // GetDomain answers from doc_, GetDomainStats from the stats taken before it began.
  enum class MigrationRole { None, Source, Target };
  MigrationRole migration_role_ = MigrationRole::None;
  bool migrating_ = false;
  bool final_pause_ = false;      // the source paused for the final pass: too late to abort
  bool abort_requested_ = false;  // CancelVirtualMachineMigration cut the relay
  std::string stats_cache_;
  std::unique_ptr<MigrationRelay> relay_;
  std::uint64_t migration_generation_ = 0;  // which migration a progress watch belongs to
  // Cut the relay (CancelVirtualMachineMigration, ProgressTimeout) unless the source has paused
  // for the final pass (AbortStatus Failed then); `who` names the caller in errors (mu_ held).
  common::Status abort_migration_locked(const std::string& who);
  // Check the relay's progress every second on `io` until the migration ends or is aborted.
  void watch_progress(boost::asio::io_context& io, std::uint64_t generation,
                      std::chrono::seconds timeout);
  // The source's migration ended (the service's loop).
  void migration_ended(const common::Status& result);
  // The source's VM went (CH's migration-finished; mu_ held): EndTimestamp, no longer migrating.
  void source_migrated();
  // MigrateVirtualMachine's background send on the QEMU/libvirt path (launcher_migration.cpp).
  common::Status migrate_libvirt(const nlohmann::json& vmi, const nlohmann::json& options,
                                 const std::string& uid);
  // The target's domain changed state (mu_ held): EndTimestamp once the received VM runs.
  void on_target_state(events::DomainState state, events::StateReason reason);
  // The guest agent (launcher_agent.cpp): made in attach(), gone in finished(); used on the loop.
  std::unique_ptr<AgentLink> agent_;
  void start_agent(launcher::LauncherService& service);
  void stop_agent();
  void on_agent(const AgentView& v);
  // Access credentials through the agent (launcher_credentials.cpp): made in attach() when the
  // VMI has qemuGuestAgent credentials, gone with the service's loop.
  std::shared_ptr<AccessCredentials> creds_;
  void start_access_credentials(launcher::LauncherService& service, const vmi::Vmi& vmi);
  void stop_access_credentials();
  void on_access_credential(const AccessCredentialResult& r);
  using DocumentOf = Json (*)(const guest_agent::GuestCache&);
  common::Result<std::string> agent_document(const std::string& what, DocumentOf of);
  // Apply a resize and tell virt-handler the domain's new size.
  common::Status hotplug(const std::string& what, std::optional<std::uint32_t> vcpus, std::optional<std::int64_t> memory);
};

}  // namespace chl::kubevirt

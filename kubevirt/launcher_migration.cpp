// Live migration in virt-launcher mode (docs/kubevirt/migration.md, "Live migration"): the RPCs of
// KubeVirt's launcher protocol (cmd-client/client.go), answered as KubeVirt's own launcher
// answers them (pkg/virt-launcher/virtwrap/live-migration-source.go / -target.go, d923fdb), over
// the launcher's Driver::send_migration / receive_migration (Cloud Hypervisor v52's
// vm.send-migration / vm.receive-migration). Both virt-handlers follow the migration through the
// domain's Spec.Metadata.KubeVirt.Migration, sent with every change.
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/log.hpp"
#include "common/unix_socket.hpp"
#include "kubevirt/launcher_handler.hpp"
#include "kubevirt/launcher_hotplug.hpp"
#include "kubevirt/migration_libvirt.hpp"
#include "kubevirt/migration_relay.hpp"
#include "launcher/launcher_service.hpp"
#include "vmi/parser.hpp"
#include "vmi/quantity.hpp"

namespace chl::kubevirt {
using common::fail;
using common::Status;
using Json = nlohmann::json;

namespace {

// MigrationUID(vmi): status.migrationState.sourceState.migrationUID when set, else
// status.migrationState.migrationUid (pkg/virt-launcher/virtwrap/live-migration-source.go).
std::string migration_uid(const Json& vmi) {
  const Json state = vmi.value("status", Json::object()).value("migrationState", Json::object());
  if (const Json src = state.value("sourceState", Json::object()); src.contains("migrationUID"))
    return src.value("migrationUID", "");
  return state.value("migrationUid", "");
}

// What keeps this VMI from migrating on Cloud Hypervisor, each with why; empty when it can.
// CH v52 has no storage migration: every disk the guest can write must be shared storage
// (a ReadWriteMany PVC / DataVolume, or a hostDisk), as KubeVirt's checkVolumesForMigration
// (pkg/virt-handler/vm.go) would otherwise ask for a block migration.
std::vector<std::string> not_migratable(const Json& vmi) {
  std::vector<std::string> why;
  const Json spec = vmi.value("spec", Json::object());
  const Json devices = spec.value("domain", Json::object()).value("devices", Json::object());
  // NICs migrate: the VMM has every pod tap by name (network/vmm_handoff.hpp), the target's VMM
  // opens the target pod's tap of the same name, and the relay leaves host_mac to it
  // (migration_stream.hpp). (SR-IOV, the one binding that could not, is refused on CH at Sync.)
  std::map<std::string, Json> volumes;
  for (const auto& v : spec.value("volumes", Json::array())) volumes[v.value("name", "")] = v;
  std::map<std::string, Json> volume_status;
  for (const auto& v : vmi.value("status", Json::object()).value("volumeStatus", Json::array()))
    volume_status[v.value("name", "")] = v;
  for (const auto& d : devices.value("disks", Json::array())) {
    const std::string name = d.value("name", "");
    const bool cdrom = d.contains("cdrom");
    const bool read_only = cdrom || d.value("disk", Json::object()).value("readonly", false) ||
                           d.value("lun", Json::object()).value("readonly", false);
    const auto vit = volumes.find(name);
    if (vit == volumes.end()) continue;
    const Json& v = vit->second;
    if (read_only) continue;
    // Generated media (cloud-init, configMap, secret, …) are built again on the target from the
    // same VMI, byte-identical (disks::kGeneratedMediaMtime), writable or not: KubeVirt block-
    // migrates them (vm.go checkVolumesForMigration) and builds them anew at every pod start, so
    // a guest's writes to them never last there either. Most VMIs declare cloud-init writable.
    bool generated = false;
    for (const char* k : {"cloudInitNoCloud", "cloudInitConfigDrive", "configMap", "secret",
                          "serviceAccount", "downwardAPI", "sysprep"})
      generated = generated || v.contains(k);
    if (generated) continue;
    if (v.contains("hostDisk")) continue;
    if (v.contains("persistentVolumeClaim") || v.contains("dataVolume")) {
      const Json info = volume_status.count(name)
                            ? volume_status[name].value("persistentVolumeClaimInfo", Json::object())
                            : Json::object();
      const Json modes = info.value("accessModes", Json::array());
      if (std::find(modes.begin(), modes.end(), "ReadWriteMany") != modes.end()) continue;
      why.push_back(
          "volume " + name +
          ": a writable PVC that is not ReadWriteMany (Cloud Hypervisor has no storage migration)");
      continue;
    }
    std::string kind = "a local";
    for (const char* k : {"containerDisk", "emptyDisk", "ephemeral"})
      if (v.contains(k)) kind = std::string("a ") + k;
    why.push_back("volume " + name + ": " + kind +
                  " disk the guest can write (Cloud Hypervisor has no storage migration; only "
                  "shared storage migrates)");
  }
  return why;
}

// MigrationOptions.Bandwidth (a resource.Quantity: "0Mi", "64Mi"; cmd-client/client.go:81) in
// bytes per second, as KubeVirt's launcher reads it (vcpu.QuantityToMebiByte: MiB, rounded, at
// least 1 when not 0; libvirt's bandwidth is MiB/s). 0 = unlimited.
common::Result<std::uint64_t> bandwidth_of(const Json& options) {
  if (!options.is_object() || !options.contains("Bandwidth") || options["Bandwidth"].is_null())
    return std::uint64_t{0};
  const Json& b = options["Bandwidth"];
  std::int64_t bytes = 0;
  if (b.is_number_integer()) {
    bytes = b.get<std::int64_t>();
  } else if (b.is_string()) {
    auto q = vmi::parse_quantity(b.get<std::string>());
    if (!q) return tl::unexpected(q.error().wrap("MigrationOptions.Bandwidth"));
    bytes = *q;
  } else {
    return fail(std::errc::invalid_argument, "MigrationOptions.Bandwidth: not a quantity");
  }
  if (bytes <= 0) return std::uint64_t{0};
  const std::uint64_t mib =
      bytes < (1 << 20) ? 1
                        : static_cast<std::uint64_t>(static_cast<double>(bytes) / 1048576 + 0.5);
  return mib << 20;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : "; ") + x;
  return s;
}

}  // namespace

Status LauncherHandler::sync_migration_target(std::string_view vmi_json,
                                              const SyncOptions& options) {
  CHL_TRY(const Json vmi, this_pods_vmi(vmi_json));
  const std::string uid = vmi.value("metadata", Json::object()).value("uid", "");
  const std::filesystem::path socket =
      std::filesystem::path(opts_.migration_proxy_dir) / (uid + "-49152-source.sock");
  {
    std::unique_lock lock(mu_);
    if (migration_role_ == MigrationRole::Target) return {};  // virt-handler re-sends: one receiver
    if (phase_ != Phase::Idle)
      return fail(std::errc::device_or_resource_busy,
                  "SyncMigrationTarget: this launcher already runs a domain");
    if (stopped_) return fail(std::errc::operation_canceled, "the launcher is stopping");
  }
  // qemu-kvm: the target's libvirtd creates the incoming domain; virt-handler's proxy dials it
  // on opts_.libvirt_socket (migration_libvirt.hpp).
  const bool libvirt = opts_.hypervisor == "qemu-kvm";
  if (opts_.hypervisor != "cloud-hypervisor" && !libvirt)
    return fail(std::errc::operation_not_supported,
                "SyncMigrationTarget: live migration is not supported by " + opts_.hypervisor);
  auto checked = vmi::check_vmi(vmi_json, opts_.hypervisor, vmi::current_host());
  if (!checked) {
    std::string why;
    for (const auto& v : checked.error()) why += (why.empty() ? "" : "; ") + vmi::to_string(v);
    k8s_event("Warning", "SyncFailed", why);
    return fail(std::errc::invalid_argument, why);
  }
  // CH binds the receiving socket itself (UnixListener::bind fails on an existing path).
  std::error_code ec;
  std::filesystem::create_directories(socket.parent_path(), ec);
  if (ec) return fail(ec, "SyncMigrationTarget: creating " + socket.parent_path().string());
  if (!libvirt) std::filesystem::remove(socket, ec);
  const std::filesystem::path ready =
      libvirt ? std::filesystem::path(opts_.libvirt_socket) : socket;
  {
    std::lock_guard lock(mu_);
    if (phase_ != Phase::Idle)
      return fail(std::errc::device_or_resource_busy, "another Sync started the domain");
    migration_role_ = MigrationRole::Target;
    // PrepareMigrationTarget stores Migration {UID, StartTimestamp, Mode}.
    DomainMigration m;
    m.uid = migration_uid(vmi);
    m.start = std::chrono::system_clock::now();
    m.mode = "PreCopy";
    doc_.migration = m;
    request_ = LaunchRequest{std::string(vmi_json), options,
                             libvirt ? "libvirt:" + ready.string() : "unix:" + socket.string()};
    launched_spec_ = without_hotplug_volumes(vmi).value("spec", Json::object());
    sync_result_.reset();
    phase_ = Phase::Launching;
    cv_.notify_all();
  }
  // Ready once the VMM listens (its socket exists; libvirt: the daemon answers where the proxy
  // dials it), or the launch failed first. A libvirt daemon the launcher starts may take a while.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(libvirt ? 18 : 15);
  while (std::chrono::steady_clock::now() < deadline) {
    if (libvirt ? common::unix_socket_answers(ready) : std::filesystem::exists(socket)) return {};
    {
      std::lock_guard lock(mu_);
      if (sync_result_ && !*sync_result_)
        return tl::unexpected(sync_result_->error().wrap("SyncMigrationTarget"));
      if (phase_ == Phase::Finished)
        return fail(std::errc::no_such_process, "SyncMigrationTarget: the launcher ended");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return fail(std::errc::timed_out,
              "SyncMigrationTarget: the VMM is not listening on " + ready.string() + " in time");
}

void LauncherHandler::on_target_state(events::DomainState state, events::StateReason reason) {
  // live-migration-target.go: EndTimestamp once no incoming job remains and the domain runs;
  // virt-handler fails the migration when EndTimestamp comes with a domain that is not active
  // (domainIsActiveOnTarget: Running, or Paused with reason User).
  if (!doc_.migration || doc_.migration->end) return;
  const bool active = state == events::DomainState::Running ||
                      (state == events::DomainState::Paused && reason == events::StateReason::User);
  if (!active) return;
  doc_.migration->end = std::chrono::system_clock::now();
  doc_.migration->completed = true;
}

Status LauncherHandler::migrate(std::string_view vmi_json, std::string_view options_json) {
  CHL_TRY(const Json vmi, this_pods_vmi(vmi_json));
  const std::string uid = migration_uid(vmi);
  const Json options = Json::parse(options_json, nullptr, false);
  {
    std::lock_guard lock(mu_);
    if (migration_role_ == MigrationRole::Source && doc_.migration && doc_.migration->uid == uid) {
      // The same migration again: success while it runs, an error once it has ended.
      if (migrating_) return {};
      return fail(std::errc::operation_in_progress,
                  "MigrateVirtualMachine: migration " + uid + " has already ended");
    }
    if (phase_ != Phase::Running || !service_)
      return fail(std::errc::no_such_process,
                  "MigrateVirtualMachine: there is no running domain to migrate");
    if (migrating_)
      return fail(std::errc::device_or_resource_busy,
                  "MigrateVirtualMachine: another migration is under way");
  }
  const bool libvirt = opts_.hypervisor == "qemu-kvm";
  if (opts_.hypervisor != "cloud-hypervisor" && !libvirt)
    return fail(std::errc::operation_not_supported,
                "MigrateVirtualMachine: live migration is not supported by " + opts_.hypervisor);
  // Refused before anything moves: the domain says why (Failed, FailureReason), and so does a
  // Warning event.
  if (auto why = libvirt ? not_migratable_on_libvirt(vmi) : not_migratable(vmi); !why.empty()) {
    const std::string reason = std::string("this VMI cannot migrate on ") +
                               (libvirt ? "QEMU/libvirt" : "Cloud Hypervisor") + ": " + joined(why);
    {
      std::lock_guard lock(mu_);
      migration_role_ = MigrationRole::Source;
      DomainMigration m;
      m.uid = uid;
      m.start = m.end = std::chrono::system_clock::now();
      m.mode = "PreCopy";
      m.failed = m.completed = true;
      m.failure_reason = reason;
      doc_.migration = m;
      if (notify_)
        notify_->send_domain_event(to_domain_json(doc_).dump(), DomainEventType::Modified);
    }
    k8s_event("Warning", "Migrated", reason);
    return fail(std::errc::operation_not_supported, "MigrateVirtualMachine: " + reason);
  }
  if (libvirt) return migrate_libvirt(vmi, options, uid);
  // CH sends to our relay, which copies to the proxy's socket (cutting it aborts), no faster
  // than Bandwidth.
  MigrationRelay::Options ro;
  {
    auto bw = bandwidth_of(options);
    if (!bw) return tl::unexpected(bw.error().wrap("MigrateVirtualMachine"));
    ro.bandwidth = *bw;
  }
  // ProgressTimeout (default 150 s; 0 = never): the stream not moving for that long aborts, as
  // KubeVirt's migrationMonitor does (live-migration-source.go isMigrationProgressing).
  const std::int64_t progress_timeout =
      options.is_object() ? options.value("ProgressTimeout", std::int64_t{150}) : 150;
  const std::filesystem::path proxy =
      std::filesystem::path(opts_.migration_proxy_dir) /
      (vmi.value("metadata", Json::object()).value("uid", "") + "-49152-source.sock");
  auto relay = MigrationRelay::start(
      std::filesystem::path(opts_.relay_dir) / "migration-relay.sock", proxy, ro);
  if (!relay) return tl::unexpected(relay.error().wrap("MigrateVirtualMachine"));
  launcher::MigrationSend send;
  send.destination = "unix:" + (*relay)->path().string();
  // CompletionTimeoutPerGiB (default 150) x the guest memory in GiB, rounded up: CH's timeout_s.
  // At the limit KubeVirt aborts unless it may disrupt the workload (AllowWorkloadDisruption, or
  // AllowPostCopy in KubeVirt versions without it): CH's timeout_strategy Ignore pauses to finish.
  const std::int64_t per_gib =
      options.is_object() ? options.value("CompletionTimeoutPerGiB", std::int64_t{150}) : 150;
  std::uint64_t gib = 1;
  {
    std::lock_guard lock(mu_);
    gib = std::max<std::uint64_t>(1, (doc_.memory_kib + (1ULL << 20) - 1) >> 20);
  }
  if (per_gib > 0) send.timeout_s = static_cast<std::uint64_t>(per_gib) * gib;
  if (options.is_object())
    send.ignore_timeout =
        options.value("AllowWorkloadDisruption", options.value("AllowPostCopy", false));
  // GetDomainStats answers from these stats while the VMM's API is held.
  auto stats = get_domain_stats();
  launcher::LauncherService* svc = nullptr;
  {
    std::lock_guard lock(mu_);
    if (!service_ || phase_ != Phase::Running)
      return fail(std::errc::no_such_process, "MigrateVirtualMachine: the domain is gone");
    svc = service_;
    stats_cache_ = stats ? *stats : std::string();
    migration_role_ = MigrationRole::Source;
    migrating_ = true;
    final_pause_ = abort_requested_ = false;
    relay_ = std::move(*relay);
    DomainMigration m;
    m.uid = uid;
    m.start = std::chrono::system_clock::now();
    m.mode = "PreCopy";
    doc_.migration = m;
    if (notify_) notify_->send_domain_event(to_domain_json(doc_).dump(), DomainEventType::Modified);
    const std::uint64_t generation = ++migration_generation_;
    boost::asio::post(svc->io(), [this, svc, send, generation, progress_timeout] {
      svc->migrate(send, [this](common::Result<Json> r) {
        migration_ended(r ? Status{} : Status(tl::unexpected(r.error())));
      });
      if (progress_timeout > 0)
        watch_progress(svc->io(), generation, std::chrono::seconds(progress_timeout));
    });
  }
  CHL_LOG_INFO("virt-launcher: migration {} of {} started (bandwidth {}, progress timeout {} s)",
               uid, send.destination,
               ro.bandwidth ? std::to_string(ro.bandwidth >> 20) + " MiB/s" : "unlimited",
               progress_timeout);
  return {};
}

Status LauncherHandler::migrate_libvirt(const Json& vmi, const Json& options,
                                        const std::string& uid) {
  std::uint64_t memory_kib = 0;
  {
    std::lock_guard lock(mu_);
    memory_kib = doc_.memory_kib;
  }
  CHL_TRY(auto send,
          common::wrap(libvirt_migration_send(vmi, options, opts_.migration_proxy_dir, memory_kib),
                       "MigrateVirtualMachine"));
  // The monitor moves to post-copy, or pauses the guest, to finish (AllowWorkloadDisruption).
  send.on_mode = [this](const std::string& mode) {
    std::lock_guard lock(mu_);
    if (!doc_.migration || doc_.migration->end) return;
    doc_.migration->mode = mode;
    if (notify_) notify_->send_domain_event(to_domain_json(doc_).dump(), DomainEventType::Modified);
  };
  auto stats = get_domain_stats();
  std::lock_guard lock(mu_);
  if (!service_ || phase_ != Phase::Running)
    return fail(std::errc::no_such_process, "MigrateVirtualMachine: the domain is gone");
  launcher::LauncherService* svc = service_;
  stats_cache_ = stats ? *stats : std::string();
  migration_role_ = MigrationRole::Source;
  migrating_ = true;
  final_pause_ = abort_requested_ = false;
  DomainMigration m;
  m.uid = uid;
  m.start = std::chrono::system_clock::now();
  m.mode = "PreCopy";
  doc_.migration = m;
  if (notify_) notify_->send_domain_event(to_domain_json(doc_).dump(), DomainEventType::Modified);
  boost::asio::post(svc->io(), [this, svc, send] {
    svc->migrate(send, [this](common::Result<Json> r) {
      migration_ended(r ? Status{} : Status(tl::unexpected(r.error())));
    });
  });
  CHL_LOG_INFO("virt-launcher: migration {} to {} started", uid, send.destination);
  return {};
}

void LauncherHandler::source_migrated() {
  migrating_ = false;
  if (relay_) relay_->abort();
  if (!doc_.migration) return;
  doc_.migration->end = std::chrono::system_clock::now();
  doc_.migration->completed = true;
  if (abort_requested_) doc_.migration->abort_status = "Failed";  // too late: it completed
}

void LauncherHandler::migration_ended(const Status& result) {
  std::string failure;
  {
    std::lock_guard lock(mu_);
    if (result && doc_.migration && doc_.migration->end)
      return;  // migration-finished said it already
    migrating_ = false;
    if (relay_) relay_->abort();  // over: nothing more to copy (its thread ends with it)
    if (!doc_.migration) return;
    doc_.migration->end = std::chrono::system_clock::now();
    doc_.migration->completed = true;
    if (abort_requested_) doc_.migration->abort_status = result ? "Failed" : "Succeeded";
    if (result) {
      // The VM runs on the target now: Shutoff/Migrated (not a crash), until DeleteVirtualMachine.
      doc_.state = events::DomainState::Shutoff;
      doc_.reason = events::StateReason::Migrated;
    } else {
      // The VM runs on here (CH resumed it); the target's handler fails the migration.
      doc_.migration->failed = true;
      // The libvirt path's monitor aborted it (ProgressTimeout, CompletionTimeoutPerGiB): as
      // KubeVirt's startMonitor reports an inflightMigrationAborted (live-migration-source.go,
      // d923fdb: setMigrationResult(true, aborted.message, MigrationAbortSucceeded)), its
      // message bare and AbortStatus Succeeded.
      const auto& e = result.error();
      const bool monitor_abort =
          e.code == std::errc::timed_out && e.context.rfind("Live migration ", 0) == 0;
      if (monitor_abort && !abort_requested_) doc_.migration->abort_status = "Succeeded";
      doc_.migration->failure_reason = abort_requested_ ? "Live migration has been aborted"
                                       : monitor_abort  ? e.context
                                                        : "Live migration failed: " + e.message();
      failure = doc_.migration->failure_reason;
    }
    if (phase_ != Phase::Finished && notify_)
      notify_->send_domain_event(to_domain_json(doc_).dump(), DomainEventType::Modified);
  }
  if (!failure.empty()) {
    CHL_LOG_WARN("virt-launcher: {}", failure);
    k8s_event("Warning", "Migrated", failure);
  } else {
    CHL_LOG_INFO("virt-launcher: migrated; the VM runs on the target");
  }
}

Status LauncherHandler::cancel_migration(std::string_view vmi_json) {
  CHL_TRY(const Json vmi, this_pods_vmi(vmi_json));
  (void)vmi;
  std::lock_guard lock(mu_);
  return abort_migration_locked("CancelVirtualMachineMigration");
}

Status LauncherHandler::abort_migration_locked(const std::string& who) {
  if (!migrating_ || !doc_.migration || (!relay_ && !service_))
    return fail(std::errc::no_such_process, who + ": no migration is under way");
  if (abort_requested_) return {};  // Aborting already
  if (final_pause_) {
    // After the source's final pause the target may already run the VM: cutting now could leave
    // it running on both sides. The migration goes on.
    doc_.migration->abort_status = "Failed";
    if (notify_) notify_->send_domain_event(to_domain_json(doc_).dump(), DomainEventType::Modified);
    return fail(std::errc::operation_not_permitted,
                who + ": too late, the migration is in its final phase (the source is paused)");
  }
  // CH v52 has no cancel: cut the relayed stream; CH's send fails and it resumes the VM.
  // libvirt: virDomainAbortJob (KubeVirt's asyncMigrationAbort); libvirt refusing it leaves the
  // migration going, AbortStatus Failed.
  abort_requested_ = true;
  doc_.migration->abort_status = "Aborting";
  if (notify_) notify_->send_domain_event(to_domain_json(doc_).dump(), DomainEventType::Modified);
  if (relay_) {
    relay_->abort();
  } else if (auto st = service_->abort_migration(); !st) {
    abort_requested_ = false;
    doc_.migration->abort_status = "Failed";
    if (notify_) notify_->send_domain_event(to_domain_json(doc_).dump(), DomainEventType::Modified);
    return tl::unexpected(st.error().wrap(who));
  }
  return {};
}

void LauncherHandler::watch_progress(boost::asio::io_context& io, std::uint64_t generation,
                                     std::chrono::seconds timeout) {
  // Every second on the service's loop: the relay's stream standing still for longer than
  // ProgressTimeout aborts the migration as KubeVirt's migrationMonitor does (cancelMigration:
  // AbortStatus Aborting, then Succeeded and FailureReason "Live migration has been aborted").
  auto timer = std::make_shared<boost::asio::steady_timer>(io, std::chrono::seconds(1));
  timer->async_wait([this, timer, generation, timeout, &io](boost::system::error_code ec) {
    if (ec) return;
    {
      std::lock_guard lock(mu_);
      if (!migrating_ || !relay_ || generation != migration_generation_ || abort_requested_) return;
      const auto still = std::chrono::steady_clock::now() - relay_->last_progress();
      if (still > timeout) {
        const auto s = std::chrono::duration_cast<std::chrono::seconds>(still).count();
        CHL_LOG_WARN("virt-launcher: Aborting migration: stuck for {} seconds", s);
        if (auto st = abort_migration_locked("ProgressTimeout"); !st)
          CHL_LOG_WARN("virt-launcher: {}", st.error().message());
        return;  // one try: after the final pause it is too late for good
      }
    }
    watch_progress(io, generation, timeout);
  });
}

Status LauncherHandler::finalize_migration(std::string_view vmi_json) {
  // virt-handler calls it after the ack and again in its final cleanup: idempotent. CH v52 has
  // no link-state API for the interface "link-refresh"; the guest's clock is set through the
  // agent (manager.go finalizeMigrationTarget -> setGuestTime; it retries until the agent of
  // this side has connected, launcher_agent_ops.cpp).
  CHL_TRY(const Json vmi, this_pods_vmi(vmi_json));
  (void)vmi;
  std::lock_guard lock(mu_);
  if (migration_role_ != MigrationRole::Target || !doc_.migration || !doc_.migration->end)
    return fail(std::errc::no_such_process,
                "FinalizeVirtualMachineMigration: no completed incoming migration");
  if (AgentLink* a = agent_.get(); a && service_)
    boost::asio::post(service_->io(), [a] { a->set_guest_time(); });
  return {};
}

Status LauncherHandler::signal_target_pod_cleanup(std::string_view vmi_json) {
  // KubeVirt's launcher exits only when it is the migration's target pod
  // (cmd-server/server.go:186: status.migrationState.targetPod == $POD_NAME).
  CHL_TRY(const Json vmi, this_pods_vmi(vmi_json));
  const std::string target = vmi.value("status", Json::object())
                                 .value("migrationState", Json::object())
                                 .value("targetPod", "");
  const char* pod = std::getenv("POD_NAME");
  if (!pod || target.empty() || target != pod) return {};
  {
    std::lock_guard lock(mu_);
    if (migration_role_ != MigrationRole::Target) return {};
  }
  CHL_LOG_INFO("virt-launcher: SignalTargetPodCleanup: this target pod ({}) ends", target);
  stop();
  auto r = on_service("target pod cleanup", [](auto& s, auto reply) { s.kill(std::move(reply)); });
  if (!r && r.error().code != std::errc::no_such_process) return tl::unexpected(r.error());
  return {};
}

}  // namespace chl::kubevirt

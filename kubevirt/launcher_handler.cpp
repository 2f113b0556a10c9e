#include "kubevirt/launcher_handler.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

#include "common/log.hpp"
#include "kubevirt/domain_document.hpp"
#include "kubevirt/k8s_event.hpp"
#include "kubevirt/launcher_hotplug.hpp"
#include "kubevirt/proc_stats.hpp"
#include "kubevirt/stats_json.hpp"
#include "launcher/launch_options.hpp"
#include "launcher/launcher_service.hpp"
#include "launcher/plan.hpp"
#include "vmi/parser.hpp"

namespace chl::kubevirt {
using common::fail;
using common::Result;
using common::Status;
using Json = nlohmann::json;

namespace {

std::string join(const vmi::Violations& vs) {
  std::string all;
  for (const auto& v : vs) all += (all.empty() ? "" : "; ") + vmi::to_string(v);
  return all;
}

// Where `b` differs from `a`, as field paths ("spec.domain.memory.guest"), at most `limit`.
void diff_paths(const Json& a, const Json& b, const std::string& path, std::vector<std::string>& out,
                std::size_t limit = 8) {
  if (out.size() >= limit || a == b) return;
  if (a.is_object() && b.is_object()) {
    for (const auto& [k, v] : a.items()) diff_paths(v, b.contains(k) ? b[k] : Json(), path + "." + k, out, limit);
    for (const auto& [k, v] : b.items())
      if (!a.contains(k)) diff_paths(Json(), v, path + "." + k, out, limit);
    return;
  }
  out.push_back(path);
}

}  // namespace

LauncherHandler::LauncherHandler(LauncherHandlerOptions options, NotifyClient* notify)
    : opts_(std::move(options)), notify_(notify) {}

LauncherHandler::~LauncherHandler() = default;

std::optional<LauncherHandler::LaunchRequest> LauncherHandler::wait_launch() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return stopped_ || request_.has_value(); });
  if (stopped_ && !request_) return std::nullopt;
  auto r = std::move(request_);
  request_.reset();
  return r;
}

void LauncherHandler::stop() {
  std::lock_guard lock(mu_);
  stopped_ = true;
  if (phase_ == Phase::Launching && !sync_result_) sync_result_ = fail(std::errc::operation_canceled, "the launcher is stopping");
  cv_.notify_all();
}

void LauncherHandler::launch_failed(const std::string& message) {
  {
    std::lock_guard lock(mu_);
    sync_result_ = fail(std::errc::invalid_argument, message);
    phase_ = Phase::Idle;
    cv_.notify_all();
  }
  k8s_event("Warning", "SyncFailed", message);
}

void LauncherHandler::attach(launcher::LauncherService& service, const vmi::CheckedVmi& checked) {
  {
    std::lock_guard lock(mu_);
    service_ = &service;
    auto migration = std::move(doc_.migration);  // a migration target's, set by SyncMigrationTarget
    deleted_ = false;
    launch_end_.reset();
    doc_ = document_of(checked.vmi, checked.caps ? std::string(checked.caps->name) : opts_.hypervisor);
    // virtiofs: KubeVirt's socket path (the launcher's, so here rather than in document_of).
    for (const auto& f : checked.vmi.spec.domain.devices.filesystems)
      if (f.virtiofs) doc_.filesystems.push_back({f.name, launcher::virtiofs_socket_path(opts_.virtiofs_dir, f.name)});
    doc_.migration = std::move(migration);
    const auto t = vmi::cpu_topology(checked.vmi);
    const auto& cpu = checked.vmi.spec.domain.cpu;
    hotplug_ = Hotplug{t.cores, t.threads, std::max(t.sockets, cpu.max_sockets), 0, 0};
    hotplug_.memory = vmi::guest_memory_bytes(checked.vmi).value_or(0);
    const auto& max_guest = checked.vmi.spec.domain.memory.max_guest;
    hotplug_.max_memory = std::max(hotplug_.memory, max_guest ? max_guest->value : std::int64_t{0});
    doc_.state = events::DomainState::Shutoff;  // defined, not started: KubeVirt's ADDED
    doc_.reason = events::StateReason::Unknown;
    if (migration_role_ == MigrationRole::Target) {  // receiving: ADDED Paused/Migration
      doc_.state = events::DomainState::Paused;
      doc_.reason = events::StateReason::Migration;
    }
    // A retry after a failed boot: the domain is still defined (Shutoff/Unknown), no new ADDED.
    if (!added_) send_locked(DomainEventType::Added);
    added_ = true;
  }
  // SIGTERM (the pod deleted): mark the domain, let virt-handler drive the shutdown.
  service.on_terminate_signal([this] { mark_graceful_shutdown(); });
  // A boot the VMM refuses is retried by the next Sync, which starts a new VMM: the launcher
  // confines itself only once the VM has booted.
  service.confine_after_boot();
  for (const auto& w : checked.warnings) k8s_event("Warning", "UnsupportedFeature", vmi::to_string(w));
  // Every state change, on the service's loop; the callback only enqueues (NotifyClient never
  // blocks) and answers a waiting Sync.
  service.bus().subscribe([this](const events::DomainEvent& e) {
    if (e.type == events::DomainEventType::Crashed && e.reason == events::StateReason::Panicked)
      k8s_event("Warning", "GuestPanicked", "the guest panicked (" + e.cause + ")");
    if (e.type == events::DomainEventType::DeviceRemoved && e.properties.is_object() &&
        e.properties.contains("id") && e.properties["id"].is_string())
      on_device_removed(e.properties["id"].get<std::string>());
    // CH's reboot makes a new VM from the config (vmm/src/lib.rs vm_reboot): a removed device
    // not yet ejected is gone with the old one, no device-removed said.
    if (e.cause == "vm/rebooted") on_device_removed("");
    on_state(e.state, e.reason);
  });
  start_agent(service);
  start_access_credentials(service, checked.vmi);
}

void LauncherHandler::on_state(events::DomainState state, events::StateReason reason) {
  std::lock_guard lock(mu_);
  if (phase_ == Phase::Finished) return;
  if (phase_ == Phase::Stopped) return;
  if (state == events::DomainState::Crashed && reason == events::StateReason::Panicked) ++doc_.panic_count;
  if (phase_ == Phase::Launching && (state == events::DomainState::Shutoff || state == events::DomainState::Crashed)) {
    launch_end_ = std::pair{state, reason};  // finished() says what it was
    return;
  }
  if (doc_.state == state && doc_.reason == reason) return;  // nothing virt-handler would see
  doc_.state = state;
  doc_.reason = reason;
  if (migration_role_ == MigrationRole::Target) on_target_state(state, reason);
  // CH paused the source for the final memory pass: from here an abort could split the VM.
  if (migrating_ && state == events::DomainState::Paused && reason == events::StateReason::Migration)
    final_pause_ = true;
  // CH's migration-finished: the VM runs on the target (the send's answer may race the VMM's exit).
  if (migration_role_ == MigrationRole::Source && migrating_ && state == events::DomainState::Shutoff &&
      reason == events::StateReason::Migrated)
    source_migrated();
  send_locked(DomainEventType::Modified);
  // A received VM that was paused on the source stays paused (Paused/User): it is up too.
  const bool received_paused = migration_role_ == MigrationRole::Target && state == events::DomainState::Paused &&
                               reason == events::StateReason::User;
  if (phase_ == Phase::Launching && (state == events::DomainState::Running || received_paused)) {
    sync_result_ = Status{};
    phase_ = Phase::Running;
    cv_.notify_all();
  }
}

void LauncherHandler::send_locked(DomainEventType type) {
  if (notify_) notify_->send_domain_event(to_domain_json(doc_).dump(), type);
}

void LauncherHandler::k8s_event(const std::string& type, const std::string& reason, const std::string& message) {
  if (!notify_) return;
  K8sEvent e;
  {
    std::lock_guard lock(mu_);
    e.vmi = {doc_.vmi_name.empty() ? opts_.name : doc_.vmi_name,
             doc_.vmi_namespace.empty() ? opts_.namespace_ : doc_.vmi_namespace,
             doc_.vmi_uid.empty() ? opts_.uid : doc_.vmi_uid};
  }
  e.type = type;
  e.reason = reason;
  e.message = message;
  notify_->send_k8s_event(to_event_json(e).dump());
}

Result<Json> LauncherHandler::this_pods_vmi(std::string_view vmi_json) const {
  Json j = Json::parse(vmi_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail(std::errc::invalid_argument, "the VMI is not valid JSON");
  const Json meta = j.value("metadata", Json::object());
  const std::string name = meta.value("name", ""), ns = meta.value("namespace", ""), uid = meta.value("uid", "");
  auto differs = [](const std::string& ours, const std::string& theirs) { return !ours.empty() && ours != theirs; };
  if (differs(opts_.name, name) || differs(opts_.namespace_, ns) || differs(opts_.uid, uid))
    return fail(std::errc::invalid_argument, "this launcher serves VMI " + opts_.namespace_ + "/" + opts_.name +
                                                 (opts_.uid.empty() ? "" : " (uid " + opts_.uid + ")") + ", not " + ns +
                                                 "/" + name + (uid.empty() ? "" : " (uid " + uid + ")"));
  return j;
}

Status LauncherHandler::sync(std::string_view vmi_json, const SyncOptions& options) {
  CHL_TRY(const Json doc, this_pods_vmi(vmi_json));
  bool hotplug_after_start = false;  // a first Sync carrying hotplug volumes
  std::string launch_json;           // its VMI without them
  std::unique_lock lock(mu_);
  switch (phase_) {
    case Phase::Running: {
      // The VMI runs. The same spec again (virt-handler re-syncs on every VMI update: status,
      // metadata) changes nothing. Hotplug volumes are attached and detached; the sockets and
      // memory within the headroom are left to SyncVirtualMachineCPUs/Memory. Any other change
      // cannot be applied to the running VM: refused naming what changed, and nothing changes.
      const Json spec = without_hotplug_volumes(doc).value("spec", Json::object());
      std::vector<std::string> changed;
      diff_paths(launched_spec_, spec, "spec", changed);  // both without hotplug volumes
      // The sockets and the guest memory may change within the headroom the VM started with:
      // virt-handler applies those with SyncVirtualMachineCPUs/Memory after this Sync. (The VMI
      // is parsed for that only when one of them changed: every re-Sync comes through here.)
      const auto resizable = [](const std::string& p) {
        return p == "spec.domain.cpu.sockets" || p == "spec.domain.memory.guest";
      };
      if (std::any_of(changed.begin(), changed.end(), resizable) &&
          beyond_headroom(hotplug_, vmi::parse_vmi(vmi_json).vmi).empty())
        std::erase_if(changed, resizable);
      if (changed.empty()) {
        if (migrating_) return {};  // the VMM's API is held by the migration
        lock.unlock();
        return sync_hotplug_volumes(doc);
      }
      std::string list;
      for (const auto& c : changed) list += (list.empty() ? "" : ", ") + c;
      return fail(std::errc::operation_not_supported,
                  "the running VM cannot take these changes: " + list +
                      " (ch-launcher applies no spec change to a running VMI yet); nothing was changed");
    }
    case Phase::Stopped:
      // The domain is off and waits for DeleteDomain. KubeVirt starts a domain only when it is
      // down and the VMI is not Running yet (manager.go:1488): a Running VMI's re-Sync changes
      // nothing.
      if (doc.value("status", Json::object()).value("phase", "") == "Running") return {};
      return fail(std::errc::no_such_process, "the domain has stopped: this launcher does not start it again");
    case Phase::Finished:
      return fail(std::errc::no_such_process, "the domain is gone: this launcher has ended its VM");
    case Phase::Launching:
      break;  // wait for the launch under way below
    case Phase::Idle: {
      if (stopped_) return fail(std::errc::operation_canceled, "the launcher is stopping");
      // A domain defined here and down (its boot failed) is started again only for a VMI that is
      // not Running yet, as KubeVirt's SyncVMI (manager.go:1488).
      if (added_ && doc.value("status", Json::object()).value("phase", "") == "Running") return {};
      // Refuse here what cannot run, naming the fields, without starting anything.
      lock.unlock();
      // Hotplug volumes (a VM restarted with persisted ones, a migration target) are not part of
      // the domain as created: the mounted ones are attached as soon as it runs, below, as
      // KubeVirt's converter includes only those virt-handler has mounted.
      if (!hotplug_volumes(doc).empty()) {
        hotplug_after_start = true;
        launch_json = without_hotplug_volumes(doc).dump();
        vmi_json = launch_json;
      }
      auto checked = vmi::check_vmi(vmi_json, opts_.hypervisor, vmi::current_host());
      if (!checked) {
        const std::string why = join(checked.error());
        k8s_event("Warning", "SyncFailed", why);
        return fail(std::errc::invalid_argument, why);
      }
      // options.interfaceDomainAttachment: how virt-handler's phase 1 left each interface for
      // the domain. Phase 2 opens the tap it made ("tap", bridge and masquerade); a binding
      // plugin's "managedTap" (the VMM makes the tap) is not something we do.
      for (const auto& [iface, attachment] : options.interface_domain_attachment) {
        if (attachment == "tap") continue;
        const std::string why = "options.interfaceDomainAttachment[" + iface + "]: '" + attachment +
                                "' is not supported by ch-launcher (phase 2 attaches to virt-handler's tap: only 'tap')";
        k8s_event("Warning", "SyncFailed", why);
        return fail(std::errc::invalid_argument, why);
      }
      lock.lock();
      if (phase_ != Phase::Idle) return fail(std::errc::device_or_resource_busy, "another Sync started the domain");
      request_ = LaunchRequest{std::string(vmi_json), options, std::nullopt};
      launched_spec_ = without_hotplug_volumes(doc).value("spec", Json::object());
      sync_result_.reset();
      phase_ = Phase::Launching;
      cv_.notify_all();
      break;
    }
  }
  if (!cv_.wait_for(lock, opts_.sync_timeout, [this] { return sync_result_.has_value(); }))
    return fail(std::errc::timed_out, "the domain did not reach Running within " + std::to_string(opts_.sync_timeout.count()) + " s");
  Status result = *sync_result_;
  if (!result) return result;
  lock.unlock();
  // The domain runs: what the VMM really has (disk sources and targets, the NICs) goes into the
  // document, with a domain update, as virt-launcher sends one after libvirt's event; without
  // holding the Sync's answer (the hotplug below reads it anyway).
  if (!hotplug_after_start) {
    refresh_devices_later(kRefreshAttempts);
    return result;
  }
  // The domain runs: its mounted hotplug volumes now (a failure is the Sync's; virt-handler's
  // next Sync tries again).
  return sync_hotplug_volumes(doc);
}

Result<Json> LauncherHandler::on_service(const std::string& what, Call call,
                                         std::optional<std::chrono::seconds> timeout) {
  auto promise = std::make_shared<std::promise<Result<Json>>>();
  auto future = promise->get_future();
  {
    std::lock_guard lock(mu_);
    if (!service_ || phase_ == Phase::Finished)
      return fail(std::errc::no_such_process, what + ": there is no domain (no Sync has started one, or it is gone)");
    launcher::LauncherService* svc = service_;
    boost::asio::post(svc->io(), [svc, call = std::move(call), promise]() {
      call(*svc, [promise](Result<Json> r) { promise->set_value(std::move(r)); });
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout.value_or(opts_.call_timeout);
  while (future.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    std::lock_guard lock(mu_);
    if (!service_) return fail(std::errc::no_such_process, what + ": the domain is gone");  // the service ended
    if (std::chrono::steady_clock::now() > deadline) return fail(std::errc::timed_out, what + ": no answer from the launcher");
  }
  auto r = future.get();
  if (!r) return tl::unexpected(r.error().wrap(what));
  return r;
}

Status LauncherHandler::command(const std::string& what, Call call) {
  auto r = on_service(what, std::move(call));
  if (!r) return tl::unexpected(r.error());
  return {};
}

Status LauncherHandler::pause(std::string_view) {
  return command("pause", [](auto& s, auto reply) { s.pause(std::move(reply)); });
}

// unpause and soft_reboot: launcher_agent_ops.cpp (the guest's clock, the agent's reboot).

Status LauncherHandler::reset(std::string_view) {
  return command("reset", [](auto& s, auto reply) { s.reboot(std::move(reply)); });
}

void LauncherHandler::apply_status(const Json& status, bool send_anyway) {
  std::lock_guard lock(mu_);
  bool changed = send_anyway;
  if (status.contains("info")) {
    const Json& info = status["info"];
    // A detached volume's device gone from the VMM's device tree (its device-removed event
    // lost or not yet seen): the disk goes too; until then it stays as it was.
    std::set<std::string> keep;
    for (auto it = detaching_.begin(); it != detaching_.end();) {
      const bool gone = info.is_object() && info.contains("device_tree") && info["device_tree"].is_object() &&
                        !info["device_tree"].contains(it->first);
      if (gone) {
        drop_disk_locked(it->second);
        changed = true;
        it = detaching_.erase(it);
      } else {
        keep.insert(it->second);
        ++it;
      }
    }
    std::map<std::string, std::string> ids;  // the VMM's device id -> the hotplug volume
    for (const auto& [name, id] : hotplugged_) ids[id] = name;
    changed = apply_vmm_info(doc_, info, ids, keep) || changed;
  }
  if (changed && notify_ && phase_ == Phase::Running)
    notify_->send_domain_event(to_domain_json(doc_).dump(), DomainEventType::Modified);
}

Status LauncherHandler::refresh_devices(bool send_anyway) {
  // Right after Running the VMM's boot call may still be finishing: status has no "info" until
  // then (as for GetDomainStats).
  auto st = on_service("domain devices", [](auto& s, auto reply) { s.status(std::move(reply)); });
  for (int i = 0; i < kRefreshAttempts && st && !st->contains("info"); ++i) {
    std::this_thread::sleep_for(kRefreshRetry);
    st = on_service("domain devices", [](auto& s, auto reply) { s.status(std::move(reply)); });
  }
  apply_status(st ? *st : Json::object(), send_anyway);
  if (!st) return tl::unexpected(st.error());
  if (!st->contains("info"))
    return fail(std::errc::resource_unavailable_try_again, "the VMM has not reported its VM yet");
  return {};
}

void LauncherHandler::refresh_devices_later(int attempts) {
  launcher::LauncherService* svc = nullptr;
  {
    std::lock_guard lock(mu_);
    if (!service_ || phase_ == Phase::Finished) return;
    svc = service_;
  }
  // On the service's loop, which outlives nothing it runs: a retry pending when the loop ends is
  // dropped with it.
  boost::asio::post(svc->io(), [this, svc, attempts] {
    svc->status([this, svc, attempts](Result<Json> st) {
      if (st && !st->contains("info") && attempts > 0) {
        auto timer = std::make_shared<boost::asio::steady_timer>(svc->io(), kRefreshRetry);
        timer->async_wait([this, timer, attempts](const boost::system::error_code& ec) {
          if (!ec) refresh_devices_later(attempts - 1);
        });
        return;
      }
      if (!st || !st->contains("info")) {
        CHL_LOG_WARN("virt-handler: the domain's devices could not be read from the VMM: {}",
                     st ? std::string("no VM information") : st.error().message());
        return;
      }
      apply_status(*st, false);
    });
  });
}

Status LauncherHandler::ping() { return {}; }

Result<std::string> LauncherHandler::get_domain() {
  std::lock_guard lock(mu_);
  if (!added_) return std::string();  // no domain yet, as virt-launcher answers
  return to_domain_json(doc_).dump();
}

Result<std::string> LauncherHandler::get_domain_stats() {
  {
    std::lock_guard lock(mu_);
    if (migrating_) return stats_cache_;  // the VMM answers nothing until the migration ends
  }
  // Right after Running the VMM's boot call may still be finishing: status has no "info" until
  // then. Wait a little for it rather than answer with no vCPUs.
  auto st = on_service("domain stats", [](auto& s, auto reply) { s.status(std::move(reply)); });
  for (int i = 0; i < 20 && st && !st->contains("info"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    st = on_service("domain stats", [](auto& s, auto reply) { s.status(std::move(reply)); });
  }
  if (!st) return tl::unexpected(st.error());
  DomainStatsDocument d;
  {
    std::lock_guard lock(mu_);
    d.name = domain_name(doc_.vmi_namespace, doc_.vmi_name);
    d.uuid = doc_.uuid;
  }
  const Json vmm = st->value("vmm", Json::object());
  const Json info = st->value("info", Json::object());
  const Json config = info.value("config", Json::object());
  const unsigned vcpus = config.value("cpus", Json::object()).value("boot_vcpus", 0u);
  for (unsigned i = 0; i < vcpus; ++i) d.vcpus.push_back(VcpuStats{VcpuState::Running, {}, {}, {}});
  // The VMM process's CPU time and RSS, and each vCPU thread's, from /proc (as libvirt reads
  // them for QEMU). Only the VM's vCPUs: a thread of a vCPU hot-unplugged is not one.
  if (const long pid = vmm.value("pid", 0L); pid > 0) add_process_stats("/proc/" + std::to_string(pid), d);
  if (d.vcpus.size() > vcpus) d.vcpus.resize(vcpus);
  if (auto size = config.value("memory", Json::object()).value("size", std::uint64_t{0}); size > 0) {
    d.memory.total_kib = size / 1024;
    d.memory.actual_balloon_kib = size / 1024;
  }
  // Cloud Hypervisor's vm.counters: {"_disk0": {"read_bytes":…}, "_net1": {"rx_bytes":…}, …}.
  const Json counters = st->value("counters", Json::object());
  auto counter = [](const Json& c, const char* k) -> Counter {
    if (c.contains(k) && c[k].is_number_unsigned()) return c[k].get<std::uint64_t>();
    return std::nullopt;
  };
  for (const auto& [id, c] : counters.items()) {
    if (c.contains("read_bytes")) {
      BlockStats b;
      b.name = id;
      b.alias = id;
      b.read_bytes = counter(c, "read_bytes");
      b.read_requests = counter(c, "read_ops");
      b.write_bytes = counter(c, "write_bytes");
      b.write_requests = counter(c, "write_ops");
      d.blocks.push_back(std::move(b));
    } else if (c.contains("rx_bytes")) {
      NetStats n;
      n.name = id;
      n.alias = id;
      n.rx_bytes = counter(c, "rx_bytes");
      n.rx_packets = counter(c, "rx_frames");
      n.tx_bytes = counter(c, "tx_bytes");
      n.tx_packets = counter(c, "tx_frames");
      d.nets.push_back(std::move(n));
    }
  }
  return to_stats_json(d).dump();
}

Result<std::string> LauncherHandler::get_qemu_version() {
  std::string version;
  for (int i = 0; i < 20 && version.empty(); ++i) {  // learnt just after boot (vmm.ping)
    if (i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto j = on_service("VMM version", [](auto& s, auto reply) { reply(s.domain_json()); });
    if (!j) return tl::unexpected(j.error());
    version = j->value("vmm", Json::object()).value("version", "");
  }
  if (version.empty()) return fail(std::errc::resource_unavailable_try_again, "the VMM has not reported its version yet");
  return version;
}

}  // namespace chl::kubevirt

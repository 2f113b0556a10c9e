// virt-launcher mode: the domain's end of life as KubeVirt's virt-launcher answers it —
// ShutdownVirtualMachine, KillVirtualMachine, DeleteVirtualMachine, SIGTERM's
// MarkedForGracefulShutdown, and the stopped domain served until DeleteDomain
// (docs/kubevirt/lifecycle.md, "End of life"; KubeVirt: pkg/virt-launcher/virtwrap/manager.go,
// cmd/virt-launcher/virt-launcher.go). Part of LauncherHandler (launcher_handler.hpp).
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "common/log.hpp"
#include "kubevirt/launcher_handler.hpp"
#include "launcher/launch_options.hpp"
#include "launcher/launcher_service.hpp"

namespace chl::kubevirt {
using common::fail;
using common::Result;
using common::Status;
using Json = nlohmann::json;

void LauncherHandler::mark_graceful_shutdown() {
  std::lock_guard lock(mu_);
  if ((phase_ != Phase::Running && phase_ != Phase::Launching) || doc_.marked_for_graceful_shutdown)
    return;
  // MarkGracefulShutdownVMI (manager.go): a metadata change, sent as its own MODIFIED event
  // (notify-client/client.go); virt-handler then shuts a Running VMI's domain down (vm.go:1363).
  doc_.marked_for_graceful_shutdown = true;
  send_locked(DomainEventType::Modified);
}

bool LauncherHandler::off_or_stopping_locked() const {
  using S = events::DomainState;
  return doc_.state == S::ShuttingDown || doc_.state == S::Shutoff || doc_.state == S::Crashed ||
         doc_.state == S::NoState;
}

bool LauncherHandler::finished(int exit_code) {
  stop_access_credentials();  // before the agent: it uses the agent's client
  stop_agent();  // the service's loop has ended: its agent client goes with it
  std::unique_lock lock(mu_);
  std::string error;
  if (service_ && exit_code == launcher::kExitLaunchFailed)
    error = service_->domain_json().value("error", "");  // its loop has ended: read from here
  service_ = nullptr;
  const auto gone_now = [this] {
    // KubeVirt's launcher never sends DELETED: the domain is gone when it is NoState/NonExistent
    // with ObjectMeta.deletionTimestamp set (libvirt's UNDEFINED event, after DeleteDomain).
    doc_.state = events::DomainState::NoState;
    doc_.reason = events::StateReason::NonExistent;
    doc_.deletion_timestamp = std::chrono::system_clock::now();
  };
  if (phase_ == Phase::Launching && exit_code == launcher::kExitLaunchFailed) {
    // The VM never ran: the Sync fails with the VMM's own message; the domain stays defined and
    // not running (Shutoff/Unknown: virt-handler waits and Syncs again, vm.go:1406-1418).
    if (error.empty()) error = "the launch failed (exit " + std::to_string(exit_code) + ")";
    sync_result_ = fail(std::errc::io_error, "starting the VM: " + error);
    phase_ = Phase::Idle;
    launch_end_.reset();
    if (deleted_ && added_) {  // DeleteDomain came meanwhile: undefined
      gone_now();
      send_locked(DomainEventType::Modified);
      added_ = false;
    } else if (added_ && (doc_.state != events::DomainState::Shutoff ||
                          doc_.reason != events::StateReason::Unknown)) {
      doc_.state = events::DomainState::Shutoff;
      doc_.reason = events::StateReason::Unknown;
      send_locked(DomainEventType::Modified);
    }
    cv_.notify_all();
    lock.unlock();
    CHL_LOG_WARN("virt-launcher: starting the VM failed, waiting for virt-handler's next Sync: {}",
                 error);
    k8s_event("Warning", "SyncFailed", "starting the VM: " + error);
    return false;
  }
  // The VM ran and stopped (or never reached Running): its last state, then the Shutoff domain
  // stays queryable (Ping, GetDomain, DeleteDomain) until DeleteDomain, as KubeVirt's
  // waitForFinalNotify keeps its launcher up (cmd/virt-launcher/virt-launcher.go:286-343).
  if (launch_end_) {
    if (phase_ == Phase::Launching)
      sync_result_ =
          fail(std::errc::io_error, std::string("the domain did not start: ") +
                                        std::string(events::to_string(launch_end_->first)) + " (" +
                                        std::string(events::to_string(launch_end_->second)) + ")");
    if (doc_.state != launch_end_->first || doc_.reason != launch_end_->second) {
      doc_.state = launch_end_->first;
      doc_.reason = launch_end_->second;
      if (added_) send_locked(DomainEventType::Modified);
    }
    launch_end_.reset();
  }
  if (!sync_result_)
    sync_result_ =
        fail(std::errc::io_error, "the launcher ended (exit " + std::to_string(exit_code) + ")");
  phase_ = Phase::Stopped;
  cv_.notify_all();
  if (!added_) {
    phase_ = Phase::Finished;
    return true;
  }
  CHL_LOG_INFO(
      "virt-launcher: the VM has stopped; waiting up to {} ms for virt-handler's DeleteDomain",
      opts_.delete_wait.count());
  if (!cv_.wait_for(lock, opts_.delete_wait, [this] { return deleted_; })) {
    // KubeVirt kills the domain then (a no-op: it is off) and waits for any event, at most 30 s.
    CHL_LOG_WARN(
        "virt-launcher: no DeleteDomain within {} ms; the domain is off (kill: nothing to do); "
        "waiting up "
        "to {} ms more",
        opts_.delete_wait.count(), opts_.after_kill_wait.count());
    cv_.wait_for(lock, opts_.after_kill_wait, [this] { return deleted_; });
  }
  phase_ = Phase::Finished;
  gone_now();
  cv_.notify_all();
  std::string gone = to_domain_json(doc_).dump();
  lock.unlock();
  if (!notify_) return true;
  // Over the notify connection the launcher has: virt-handler has closed this VMI's notify pipe
  // by now or does so at any moment (processVmDelete's CloseLauncherClient,
  // pkg/virt-handler/vm.go:1708), which removes the socket file but keeps serving the connection
  // (notify_client.cpp). The launcher ends as soon as it is delivered, or cannot be (no
  // connection left and none to make), else after final_notify_timeout.
  notify_->send_domain_event(std::move(gone), DomainEventType::Modified);
  if (!notify_->flush_last(std::chrono::steady_clock::now() + opts_.final_notify_timeout))
    CHL_LOG_WARN("virt-handler: the final domain notification was not delivered (no connection to "
                 "virt-handler left, or none within {} s)",
                 opts_.final_notify_timeout.count());
  return true;
}

Status LauncherHandler::shutdown(std::string_view) {
  // SignalShutdownVMI (manager.go:2153-2194): a domain Running or Paused gets the ACPI power
  // button, re-sent on every call (virt-handler re-sends every <=5 s: a booting OS can miss it),
  // and GracePeriod.DeletionTimestamp is set at the first; gone, ShuttingDown or off: nothing to
  // do, success. No timer of ours: virt-handler kills when DeletionTimestamp + grace has passed.
  bool press = false;
  {
    std::lock_guard lock(mu_);
    if (phase_ != Phase::Running || off_or_stopping_locked()) return {};
    press = doc_.state == events::DomainState::Running;  // a paused guest cannot answer it
  }
  if (press) {
    auto r = on_service("shutdown", [](auto& s, auto reply) { s.power_button(std::move(reply)); });
    if (!r) {
      // The driver already answers success for a VM the hypervisor says is ending (ch_driver.cpp
      // unless_ending, libvirt_driver.cpp power_button). What is left here: the service refused
      // because the domain's stop reached it first (its state is no longer Running), or the
      // service has ended; both already showed in our state, on the service's loop.
      std::lock_guard lock(mu_);
      if (phase_ != Phase::Running || off_or_stopping_locked()) return {};  // it stopped meanwhile
      return tl::unexpected(r.error());
    }
  }
  std::lock_guard lock(mu_);
  if (phase_ == Phase::Running && !doc_.grace_period_start) {
    doc_.grace_period_start = std::chrono::system_clock::now();
    send_locked(DomainEventType::Modified);  // a metadata change: its own MODIFIED event
  }
  return {};
}

Status LauncherHandler::kill(std::string_view) {
  // KillVMI (manager.go:2196-2234): Running, Paused or ShuttingDown -> destroyed; gone or off:
  // nothing to do, success.
  const auto off = [this] {
    return (phase_ != Phase::Running && phase_ != Phase::Launching) ||
           doc_.state == events::DomainState::Shutoff ||
           doc_.state == events::DomainState::Crashed || doc_.state == events::DomainState::NoState;
  };
  {
    std::lock_guard lock(mu_);
    if (off()) return {};
  }
  auto r = on_service("kill", [](auto& s, auto reply) { s.kill(std::move(reply)); });
  if (!r) {
    std::lock_guard lock(mu_);
    if (off()) return {};
    return tl::unexpected(r.error());
  }
  return {};
}

Status LauncherHandler::delete_domain(std::string_view vmi_json) {
  // DeleteVMI (manager.go:2236-2255) undefines the domain; libvirt's UNDEFINED event is the final
  // NoState/NonExistent + deletionTimestamp notification, and the launcher ends after it.
  {
    std::lock_guard lock(mu_);
    switch (phase_) {
      case Phase::Finished:
        return {};  // already gone
      case Phase::Idle:
        if (added_) {  // defined, not running (a failed boot): undefined now
          doc_.state = events::DomainState::NoState;
          doc_.reason = events::StateReason::NonExistent;
          doc_.deletion_timestamp = std::chrono::system_clock::now();
          send_locked(DomainEventType::Modified);
          added_ = false;
        }
        return {};
      case Phase::Stopped:
        deleted_ = true;  // finished() sends the final notification and the launcher ends
        cv_.notify_all();
        return {};
      case Phase::Launching:
      case Phase::Running:
        deleted_ = true;
        break;
    }
  }
  // A domain still running (virt-handler deletes only stopped ones): forced off first.
  return kill(vmi_json);
}

}  // namespace chl::kubevirt

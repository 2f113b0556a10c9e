#include "events/domain_state_tracker.hpp"

#include <sys/wait.h>

#include <cstring>

#include "common/log.hpp"

namespace chl::events {

VmmExit VmmExit::from_wait_status(int wait_status) {
  VmmExit e;
  if (WIFSIGNALED(wait_status)) {
    e.signaled = true;
    e.code = WTERMSIG(wait_status);
  } else if (WIFEXITED(wait_status)) {
    e.code = WEXITSTATUS(wait_status);
  }
  return e;
}

std::string VmmExit::describe() const {
  if (signaled) {
    const char* name = ::strsignal(code);
    return "killed by signal " + std::to_string(code) + " (" + (name ? name : "?") + ")";
  }
  return "exit status " + std::to_string(code);
}

std::vector<DomainEvent> DomainStateTracker::apply(const MappingRow& row, std::string cause,
                                                   std::uint64_t secs, std::uint32_t nanos,
                                                   nlohmann::json properties) {
  switch (row.effect) {
    case TrackerEffect::Pending:
      pending_ = cause;
      break;
    case TrackerEffect::Completed:
      pending_.reset();
      break;
    case TrackerEffect::MigrationBegin:
      migrating_ = true;
      break;
    case TrackerEffect::MigrationEnd:
      migrating_ = false;
      break;
    case TrackerEffect::VmmShutdown:
      vmm_shutdown_seen_ = true;
      break;
    case TrackerEffect::None:
      break;
  }
  std::vector<DomainEvent> out;
  // A domain stops once: a second "stopped" row (e.g. vm/shutdown after migration-finished,
  // or after a forced stop already reported) changes nothing.
  if (row.state == DomainState::Shutoff && state_ == DomainState::Shutoff) {
    CHL_LOG_DEBUG("events: {} ignored, the domain is already Shutoff/{}", cause, to_string(reason_));
    return out;
  }
  if (row.state) {
    // A crash keeps its first reason (a panic stays Panicked when the VMM dies afterwards).
    if (!(*row.state == DomainState::Crashed && state_ == DomainState::Crashed)) reason_ = row.reason;
    state_ = *row.state;
  }
  if (row.emits) {
    DomainEvent ev;
    ev.type = *row.emits;
    ev.detail = row.detail;
    ev.state = state_;
    ev.reason = reason_;
    ev.cause = std::move(cause);
    ev.secs = secs;
    ev.nanos = nanos;
    ev.properties = std::move(properties);
    out.push_back(std::move(ev));
  }
  return out;
}

std::vector<DomainEvent> DomainStateTracker::on_vmm_event(const VmmEvent& e) {
  if (vmm_exited_) {
    CHL_LOG_WARN("events: {} arrived after the VMM exited; ignored", e.key());
    return {};
  }
  const MappingRow* row = nullptr;
  // Context decides between a CH row and a synthesized one; the rows themselves are data.
  if (e.source == "vm" && e.event == "shutdown" && pending_ == std::optional<std::string>("vm/rebooting")) {
    row = find_mapping(synthetic::kSource, synthetic::kVmShutdownDuringReboot);
  } else if (e.source == "vm" && e.event == "shutdown" && stop_ == StopRequest::Forced) {
    row = find_mapping(synthetic::kSource, synthetic::kVmShutdownForced);
  } else if (e.source == "vm" && e.event == "paused" && migrating_) {
    row = find_mapping(synthetic::kSource, synthetic::kVmPausedForMigration);
  } else if (e.source == "vm" && e.event == "restored" && migrating_) {
    row = find_mapping(synthetic::kSource, synthetic::kVmRestoredForMigration);
  } else if (e.source == "vm" && e.event == "migration-receive-finished" && state_ == DomainState::Paused) {
    // CompletePaused (CH lib.rs vm_receive_migration_step): the VM was paused on the source.
    row = find_mapping(synthetic::kSource, synthetic::kVmReceivedPaused);
  } else {
    row = find_mapping(e.source, e.event, e.property("event"));
  }
  if (row == nullptr) {
    CHL_LOG_WARN("events: unknown Cloud Hypervisor event {} (properties {}); ignored", e.key(),
                 e.properties.dump());
    return {};
  }
  if (e.source == "vm") {
    if (e.event == "deleted") {
      vm_defined_ = false;
    } else if (row->state || e.event == "booting" || e.event == "restoring") {
      vm_defined_ = true;
    }
  }
  return apply(*row, e.key(), e.secs, e.nanos, e.properties);
}

std::vector<DomainEvent> DomainStateTracker::on_vmm_exited(const VmmExit& exit) {
  if (vmm_exited_) return {};
  vmm_exited_ = true;
  nlohmann::json props;
  if (exit.signaled) {
    props["signal"] = exit.code;
  } else {
    props["exit_code"] = exit.code;
  }
  props["status"] = exit.describe();
  std::string_view which;
  if (state_ == DomainState::Shutoff) {
    CHL_LOG_INFO("events: VMM {} with the domain Shutoff/{}", exit.describe(), to_string(reason_));
    return {};
  }
  if (vmm_shutdown_seen_) {
    which = stop_ == StopRequest::Forced ? synthetic::kVmmExitedCleanForced : synthetic::kVmmExitedClean;
  } else if (stop_ == StopRequest::Forced && !exit.died_on_its_own) {
    which = synthetic::kVmmKilledOnRequest;
  } else if (!exit.signaled && exit.code == 0) {
    // Cloud Hypervisor v52 exits 0 only through vmm_shutdown (vmm/src/lib.rs control loop), which
    // queues vm/shutdown, vm/deleted and vmm/shutdown for its event-monitor thread; main() then
    // returns without joining that thread (cloud-hypervisor/src/main.rs), so under load the whole
    // tail can be lost (seen on a real CH under a CPU hog: a guest poweroff, exit 0, no event).
    // A clean exit is a clean shutdown, not a crash.
    which = synthetic::kVmmExitedClean;
    CHL_LOG_WARN("events: VMM {} without its shutdown events while the domain was {}/{}: taken as the "
                 "shutdown they would have said (Cloud Hypervisor can lose its event tail at exit)",
                 exit.describe(), to_string(state_), to_string(reason_));
  } else {
    which = synthetic::kVmmExitedUnexpectedly;
    CHL_LOG_ERROR("events: VMM {} without a shutdown event while the domain was {}/{}",
                  exit.describe(), to_string(state_), to_string(reason_));
  }
  const MappingRow* row = find_mapping(synthetic::kSource, which);
  return apply(*row, std::string(synthetic::kSource) + "/" + std::string(which), 0, 0, std::move(props));
}

std::vector<DomainEvent> DomainStateTracker::on_event_monitor_lost() {
  if (vmm_exited_ || event_monitor_lost_) return {};
  event_monitor_lost_ = true;
  if (state_ == DomainState::Shutoff || state_ == DomainState::Crashed || vmm_shutdown_seen_ ||
      stop_ == StopRequest::Forced) {
    CHL_LOG_INFO("events: the event monitor closed with the domain {}/{}{}; the state stands", to_string(state_),
                 to_string(reason_), stop_ == StopRequest::Forced ? " and a forced stop under way" : "");
    return {};
  }
  const MappingRow* row = find_mapping(synthetic::kSource, synthetic::kEventMonitorLost);
  return apply(*row, std::string(synthetic::kSource) + "/" + std::string(synthetic::kEventMonitorLost), 0, 0,
               nullptr);
}

void DomainStateTracker::on_stop_requested(StopRequest kind) {
  if (static_cast<int>(kind) > static_cast<int>(stop_)) stop_ = kind;
}

bool DomainStateTracker::finished() const {
  return vmm_exited_ || state_ == DomainState::Shutoff;
}

nlohmann::json DomainStateTracker::to_json() const {
  nlohmann::json j;
  j["state"] = std::string(to_string(state_));
  j["reason"] = std::string(to_string(reason_));
  j["pending"] = pending_ ? nlohmann::json(*pending_) : nlohmann::json(nullptr);
  j["vmm_shutdown_seen"] = vmm_shutdown_seen_;
  j["vmm_exited"] = vmm_exited_;
  j["event_monitor_lost"] = event_monitor_lost_;
  j["migrating"] = migrating_;
  j["vm_defined"] = vm_defined_;
  static constexpr const char* kStop[] = {"None", "Graceful", "Forced"};
  j["stop_requested"] = kStop[static_cast<int>(stop_)];
  return j;
}

}  // namespace chl::events

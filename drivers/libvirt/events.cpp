#include "drivers/libvirt/events.hpp"

#include <libvirt/libvirt.h>

#include <array>
#include <optional>
#include <utility>

#include "common/log.hpp"

namespace chl::libvirt {
namespace {
using events::DomainEvent;
using events::DomainEventType;
using events::DomainState;
using events::EventDetail;
using events::StateReason;
using T = DomainEventType;
using D = EventDetail;
using S = DomainState;
using R = StateReason;

struct Row {
  int event;
  int detail;
  const char* name;  // libvirt's detail name, for logs and `cause`
  T type;
  D ours;
  std::optional<S> state;  // nullopt: the event changes no state
  R reason;
};

// (virDomainEventType, detail) -> domain event, state and reason. One row per detail libvirt
// defines for the lifecycle events a QEMU domain emits.
// clang-format off
constexpr std::array kRows{
    // Started: the domain's QEMU runs (or, with a paused start, exists).
    Row{VIR_DOMAIN_EVENT_STARTED, VIR_DOMAIN_EVENT_STARTED_BOOTED, "booted", T::Started, D::Booted, S::Running, R::Booted},
    Row{VIR_DOMAIN_EVENT_STARTED, VIR_DOMAIN_EVENT_STARTED_MIGRATED, "migrated", T::Started, D::Migrated, S::Running, R::Migrated},
    Row{VIR_DOMAIN_EVENT_STARTED, VIR_DOMAIN_EVENT_STARTED_RESTORED, "restored", T::Started, D::Restored, S::Running, R::Restored},
    Row{VIR_DOMAIN_EVENT_STARTED, VIR_DOMAIN_EVENT_STARTED_FROM_SNAPSHOT, "from-snapshot", T::Started, D::FromSnapshot, S::Running, R::FromSnapshot},
    Row{VIR_DOMAIN_EVENT_STARTED, VIR_DOMAIN_EVENT_STARTED_WAKEUP, "wakeup", T::Started, D::Wakeup, S::Running, R::Wakeup},
    // Suspended: vCPUs stopped (by us, by an I/O error, by the watchdog, or by QEMU on a panic).
    Row{VIR_DOMAIN_EVENT_SUSPENDED, VIR_DOMAIN_EVENT_SUSPENDED_PAUSED, "paused", T::Suspended, D::Paused, S::Paused, R::User},
    Row{VIR_DOMAIN_EVENT_SUSPENDED, VIR_DOMAIN_EVENT_SUSPENDED_MIGRATED, "migrated", T::Suspended, D::Migrated, S::Paused, R::Migration},
    Row{VIR_DOMAIN_EVENT_SUSPENDED, VIR_DOMAIN_EVENT_SUSPENDED_IOERROR, "ioerror", T::Suspended, D::IOError, S::Paused, R::IOError},
    Row{VIR_DOMAIN_EVENT_SUSPENDED, VIR_DOMAIN_EVENT_SUSPENDED_WATCHDOG, "watchdog", T::Suspended, D::Watchdog, S::Paused, R::Watchdog},
    Row{VIR_DOMAIN_EVENT_SUSPENDED, VIR_DOMAIN_EVENT_SUSPENDED_RESTORED, "restored", T::Suspended, D::Restored, S::Paused, R::Unknown},
    Row{VIR_DOMAIN_EVENT_SUSPENDED, VIR_DOMAIN_EVENT_SUSPENDED_FROM_SNAPSHOT, "from-snapshot", T::Suspended, D::FromSnapshot, S::Paused, R::Snapshot},
    Row{VIR_DOMAIN_EVENT_SUSPENDED, VIR_DOMAIN_EVENT_SUSPENDED_API_ERROR, "api-error", T::Suspended, D::APIError, S::Paused, R::Unknown},
    Row{VIR_DOMAIN_EVENT_SUSPENDED, VIR_DOMAIN_EVENT_SUSPENDED_POSTCOPY, "postcopy", T::Suspended, D::Migrated, S::Paused, R::Migration},
    Row{VIR_DOMAIN_EVENT_SUSPENDED, VIR_DOMAIN_EVENT_SUSPENDED_POSTCOPY_FAILED, "postcopy-failed", T::Suspended, D::Migrated, S::Paused, R::Migration},
    // Resumed.
    Row{VIR_DOMAIN_EVENT_RESUMED, VIR_DOMAIN_EVENT_RESUMED_UNPAUSED, "unpaused", T::Resumed, D::Unpaused, S::Running, R::Unpaused},
    Row{VIR_DOMAIN_EVENT_RESUMED, VIR_DOMAIN_EVENT_RESUMED_MIGRATED, "migrated", T::Resumed, D::Migrated, S::Running, R::Migrated},
    Row{VIR_DOMAIN_EVENT_RESUMED, VIR_DOMAIN_EVENT_RESUMED_FROM_SNAPSHOT, "from-snapshot", T::Resumed, D::FromSnapshot, S::Running, R::FromSnapshot},
    Row{VIR_DOMAIN_EVENT_RESUMED, VIR_DOMAIN_EVENT_RESUMED_POSTCOPY, "postcopy", T::Resumed, D::Migrated, S::Running, R::Postcopy},
    // Stopped: QEMU is gone (libvirt reaped it before emitting this).
    Row{VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN, "shutdown", T::Stopped, D::Shutdown, S::Shutoff, R::Shutdown},
    Row{VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_DESTROYED, "destroyed", T::Stopped, D::Destroyed, S::Shutoff, R::Destroyed},
    Row{VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_CRASHED, "crashed", T::Stopped, D::Crashed, S::Crashed, R::Unknown},
    Row{VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_MIGRATED, "migrated", T::Stopped, D::Migrated, S::Shutoff, R::Migrated},
    Row{VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_SAVED, "saved", T::Stopped, D::Saved, S::Shutoff, R::Saved},
    Row{VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_FAILED, "failed", T::Stopped, D::Failed, S::Crashed, R::Unknown},
    Row{VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_FROM_SNAPSHOT, "from-snapshot", T::Stopped, D::FromSnapshot, S::Shutoff, R::FromSnapshot},
    // Shutdown: QEMU reported the guest's power-off (SHUTDOWN); Stopped follows once libvirt has
    // ended QEMU. libvirt's state is then VIR_DOMAIN_SHUTDOWN with reason
    // VIR_DOMAIN_SHUTDOWN_UNKNOWN (qemuProcessHandleShutdown; only other drivers set _USER), which
    // virt-launcher reports as ShuttingDown/Unknown. Who asked (guest, host) is the event detail.
    Row{VIR_DOMAIN_EVENT_SHUTDOWN, VIR_DOMAIN_EVENT_SHUTDOWN_FINISHED, "finished", T::Shutdown, D::Finished, S::ShuttingDown, R::Unknown},
    Row{VIR_DOMAIN_EVENT_SHUTDOWN, VIR_DOMAIN_EVENT_SHUTDOWN_GUEST, "guest", T::Shutdown, D::Guest, S::ShuttingDown, R::Unknown},
    Row{VIR_DOMAIN_EVENT_SHUTDOWN, VIR_DOMAIN_EVENT_SHUTDOWN_HOST, "host", T::Shutdown, D::Host, S::ShuttingDown, R::Unknown},
    // PM suspend.
    Row{VIR_DOMAIN_EVENT_PMSUSPENDED, VIR_DOMAIN_EVENT_PMSUSPENDED_MEMORY, "memory", T::PMSuspended, D::None, S::PMSuspended, R::Unknown},
    Row{VIR_DOMAIN_EVENT_PMSUSPENDED, VIR_DOMAIN_EVENT_PMSUSPENDED_DISK, "disk", T::PMSuspended, D::None, S::PMSuspended, R::Unknown},
    // Crashed: pvpanic. CRASHLOADED = a crash kernel took over; the guest still runs.
    Row{VIR_DOMAIN_EVENT_CRASHED, VIR_DOMAIN_EVENT_CRASHED_PANICKED, "panicked", T::Crashed, D::Panicked, S::Crashed, R::Panicked},
    Row{VIR_DOMAIN_EVENT_CRASHED, VIR_DOMAIN_EVENT_CRASHED_CRASHLOADED, "crashloaded", T::Crashed, D::CrashLoaded, std::nullopt, R::Unknown},
    // Defined / undefined: a transient domain has no definition to change; reported as is.
    Row{VIR_DOMAIN_EVENT_DEFINED, VIR_DOMAIN_EVENT_DEFINED_ADDED, "added", T::Defined, D::Added, std::nullopt, R::Unknown},
    Row{VIR_DOMAIN_EVENT_DEFINED, VIR_DOMAIN_EVENT_DEFINED_UPDATED, "updated", T::Defined, D::Updated, std::nullopt, R::Unknown},
    Row{VIR_DOMAIN_EVENT_UNDEFINED, VIR_DOMAIN_EVENT_UNDEFINED_REMOVED, "removed", T::Undefined, D::Removed, std::nullopt, R::Unknown},
};
// clang-format on

struct StateRow {
  int state;   // virDomainState
  int reason;  // that state's reason enum (virDomainRunningReason, ...)
  S ours;
  R why;
};

// (virDomainState, reason) -> state and reason, spelled as virt-launcher spells them
// (virtwrap/util: LifeCycleTranslationMap and the per-state reason maps). A reason not listed
// is Unknown.
// clang-format off
constexpr std::array kStates{
    StateRow{VIR_DOMAIN_NOSTATE, 0, S::NoState, R::Unknown},
    StateRow{VIR_DOMAIN_RUNNING, VIR_DOMAIN_RUNNING_BOOTED, S::Running, R::Booted},
    StateRow{VIR_DOMAIN_RUNNING, VIR_DOMAIN_RUNNING_MIGRATED, S::Running, R::Migrated},
    StateRow{VIR_DOMAIN_RUNNING, VIR_DOMAIN_RUNNING_RESTORED, S::Running, R::Restored},
    StateRow{VIR_DOMAIN_RUNNING, VIR_DOMAIN_RUNNING_FROM_SNAPSHOT, S::Running, R::FromSnapshot},
    StateRow{VIR_DOMAIN_RUNNING, VIR_DOMAIN_RUNNING_UNPAUSED, S::Running, R::Unpaused},
    StateRow{VIR_DOMAIN_RUNNING, VIR_DOMAIN_RUNNING_MIGRATION_CANCELED, S::Running, R::MigrationCanceled},
    StateRow{VIR_DOMAIN_RUNNING, VIR_DOMAIN_RUNNING_SAVE_CANCELED, S::Running, R::SaveCanceled},
    StateRow{VIR_DOMAIN_RUNNING, VIR_DOMAIN_RUNNING_WAKEUP, S::Running, R::Wakeup},
    StateRow{VIR_DOMAIN_RUNNING, VIR_DOMAIN_RUNNING_POSTCOPY, S::Running, R::Postcopy},
    StateRow{VIR_DOMAIN_RUNNING, VIR_DOMAIN_RUNNING_POSTCOPY_FAILED, S::Running, R::PostcopyFailed},
    StateRow{VIR_DOMAIN_BLOCKED, 0, S::Blocked, R::Unknown},
    StateRow{VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_USER, S::Paused, R::User},
    StateRow{VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_MIGRATION, S::Paused, R::Migration},
    StateRow{VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_SAVE, S::Paused, R::Save},
    StateRow{VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_DUMP, S::Paused, R::Dump},
    StateRow{VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_IOERROR, S::Paused, R::IOError},
    StateRow{VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_WATCHDOG, S::Paused, R::Watchdog},
    StateRow{VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_FROM_SNAPSHOT, S::Paused, R::FromSnapshot},
    StateRow{VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_SHUTTING_DOWN, S::Paused, R::ShuttingDown},
    StateRow{VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_SNAPSHOT, S::Paused, R::Snapshot},
    StateRow{VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_CRASHED, S::Paused, R::Crashed},
    StateRow{VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_STARTING_UP, S::Paused, R::StartingUp},
    StateRow{VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_POSTCOPY, S::Paused, R::Postcopy},
    StateRow{VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_POSTCOPY_FAILED, S::Paused, R::PostcopyFailed},
    StateRow{VIR_DOMAIN_SHUTDOWN, VIR_DOMAIN_SHUTDOWN_USER, S::ShuttingDown, R::User},
    StateRow{VIR_DOMAIN_SHUTOFF, VIR_DOMAIN_SHUTOFF_SHUTDOWN, S::Shutoff, R::Shutdown},
    StateRow{VIR_DOMAIN_SHUTOFF, VIR_DOMAIN_SHUTOFF_DESTROYED, S::Shutoff, R::Destroyed},
    StateRow{VIR_DOMAIN_SHUTOFF, VIR_DOMAIN_SHUTOFF_CRASHED, S::Shutoff, R::Crashed},
    StateRow{VIR_DOMAIN_SHUTOFF, VIR_DOMAIN_SHUTOFF_MIGRATED, S::Shutoff, R::Migrated},
    StateRow{VIR_DOMAIN_SHUTOFF, VIR_DOMAIN_SHUTOFF_SAVED, S::Shutoff, R::Saved},
    StateRow{VIR_DOMAIN_SHUTOFF, VIR_DOMAIN_SHUTOFF_FAILED, S::Shutoff, R::Failed},
    StateRow{VIR_DOMAIN_SHUTOFF, VIR_DOMAIN_SHUTOFF_FROM_SNAPSHOT, S::Shutoff, R::FromSnapshot},
    StateRow{VIR_DOMAIN_CRASHED, VIR_DOMAIN_CRASHED_PANICKED, S::Crashed, R::Panicked},
    StateRow{VIR_DOMAIN_PMSUSPENDED, 0, S::PMSuspended, R::Unknown},
};
// clang-format on

// The state alone, for a reason the table does not list.
constexpr std::array kStateOnly{
    std::pair{VIR_DOMAIN_RUNNING, S::Running},
    std::pair{VIR_DOMAIN_BLOCKED, S::Blocked},
    std::pair{VIR_DOMAIN_PAUSED, S::Paused},
    std::pair{VIR_DOMAIN_SHUTDOWN, S::ShuttingDown},
    std::pair{VIR_DOMAIN_SHUTOFF, S::Shutoff},
    std::pair{VIR_DOMAIN_CRASHED, S::Crashed},
    std::pair{VIR_DOMAIN_PMSUSPENDED, S::PMSuspended},
};

const char* event_name(int event) {
  switch (event) {
    case VIR_DOMAIN_EVENT_DEFINED:
      return "defined";
    case VIR_DOMAIN_EVENT_UNDEFINED:
      return "undefined";
    case VIR_DOMAIN_EVENT_STARTED:
      return "started";
    case VIR_DOMAIN_EVENT_SUSPENDED:
      return "suspended";
    case VIR_DOMAIN_EVENT_RESUMED:
      return "resumed";
    case VIR_DOMAIN_EVENT_STOPPED:
      return "stopped";
    case VIR_DOMAIN_EVENT_SHUTDOWN:
      return "shutdown";
    case VIR_DOMAIN_EVENT_PMSUSPENDED:
      return "pmsuspended";
    case VIR_DOMAIN_EVENT_CRASHED:
      return "crashed";
    default:
      return "unknown";
  }
}

const Row* find_row(int event, int detail) {
  for (const auto& r : kRows)
    if (r.event == event && r.detail == detail) return &r;
  return nullptr;
}

}  // namespace

std::string libvirt_event_name(int event, int detail) {
  const Row* r = find_row(event, detail);
  return std::string(event_name(event)) + "/" + (r ? r->name : std::to_string(detail));
}

LibvirtState libvirt_domain_state(int state, int reason) {
  for (const auto& r : kStates)
    if (r.state == state && r.reason == reason) return {r.ours, r.why};
  for (const auto& [st, ours] : kStateOnly)
    if (st == state) return {ours, R::Unknown};
  return {S::NoState, R::Unknown};
}

std::vector<DomainEvent> LibvirtEventTracker::on_lifecycle(int event, int detail) {
  const std::string cause = "libvirt/" + libvirt_event_name(event, detail);
  if (finished_) {
    CHL_LOG_DEBUG("events: {} after the domain stopped; ignored", cause);
    return {};
  }
  const Row* row = find_row(event, detail);
  if (!row) {
    CHL_LOG_WARN("events: unknown libvirt event {} detail {}; ignored", event, detail);
    return {};
  }
  // A paused start: Started (QEMU exists, paused), Suspended, then our Resumed = booted.
  if (paused_start_) {
    if (event == VIR_DOMAIN_EVENT_STARTED) {
      started_seen_ = true;
      return {};
    }
    if (event == VIR_DOMAIN_EVENT_SUSPENDED && detail == VIR_DOMAIN_EVENT_SUSPENDED_PAUSED)
      return {};
    if (event == VIR_DOMAIN_EVENT_RESUMED && started_seen_) {
      paused_start_ = false;
      row = find_row(VIR_DOMAIN_EVENT_STARTED, VIR_DOMAIN_EVENT_STARTED_BOOTED);
    } else if (event != VIR_DOMAIN_EVENT_RESUMED) {
      paused_start_ = false;  // anything else ends the start (e.g. it stopped)
    }
  }
  std::optional<S> incoming_state;
  if (incoming_) {
    if (event == VIR_DOMAIN_EVENT_STARTED) {
      incoming_state = S::Paused;  // QEMU waits for the stream, vCPUs stopped
    } else if (event == VIR_DOMAIN_EVENT_RESUMED || event == VIR_DOMAIN_EVENT_SUSPENDED ||
               event == VIR_DOMAIN_EVENT_STOPPED) {
      incoming_ = false;  // received (running, or paused as on the source), or failed
    }
  }
  std::string ev_cause = cause;
  if (row->event != event) ev_cause = "libvirt/started/booted (resumed after a paused start)";
  std::optional<S> state = row->state;
  R reason = row->reason;
  T type = row->type;
  D ours = row->ours;
  if (incoming_state) {
    state = incoming_state;
    reason = R::Migration;
  }
  if (event == VIR_DOMAIN_EVENT_STOPPED) {
    finished_ = true;
    if (state_ == S::Crashed) {
      state = S::Crashed;  // a crash keeps its first reason
      reason = reason_;
    } else if (state == S::Crashed && stop_ == events::StopRequest::Forced) {
      state = S::Shutoff;  // we killed QEMU ourselves
      reason = R::Destroyed;
    } else if (state == S::Shutoff && detail == VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN &&
               stop_ == events::StopRequest::Forced) {
      reason = R::Destroyed;
    }
    if (state == S::Crashed && state_ != S::Crashed)
      CHL_LOG_ERROR("events: QEMU ended without a shutdown ({}) while the domain was {}/{}", cause,
                    events::to_string(state_), events::to_string(reason_));
  }
  // Once a shutdown is under way only the stop (or a crash) changes the state: libvirt keeps
  // the domain VIR_DOMAIN_SHUTDOWN until QEMU is gone, whatever QEMU reports meanwhile.
  if (state_ == S::ShuttingDown && state && (*state == S::Running || *state == S::Paused))
    state.reset();
  if (state) {
    state_ = *state;
    reason_ = reason;
  }
  DomainEvent ev;
  ev.type = type;
  ev.detail = ours;
  ev.state = state_;
  ev.reason = reason_;
  ev.cause = ev_cause;
  return {ev};
}

std::vector<DomainEvent> LibvirtEventTracker::on_reboot() {
  if (finished_) return {};
  // Same row as Cloud Hypervisor's vm/rebooted: Reboot/Booted, Running/Booted; a reset racing a
  // shutdown already under way leaves it ShuttingDown (as libvirt's own state does).
  if (state_ != S::ShuttingDown) {
    state_ = S::Running;
    reason_ = R::Booted;
  }
  DomainEvent ev;
  ev.type = T::Reboot;
  ev.detail = D::Booted;
  ev.state = state_;
  ev.reason = reason_;
  ev.cause = "libvirt/reboot";
  return {ev};
}

std::vector<DomainEvent> LibvirtEventTracker::on_connection_lost(const std::string& why) {
  return ended_unreported("launcher/libvirt-connection-lost", why);
}

std::vector<DomainEvent> LibvirtEventTracker::on_qemu_gone_unreported(const std::string& why) {
  return ended_unreported("launcher/qemu-exited", why);
}

std::vector<DomainEvent> LibvirtEventTracker::on_qemu_gone_migrated(const std::string& why) {
  return ended_unreported("launcher/qemu-exited-migrated", why, true);
}

std::vector<DomainEvent> LibvirtEventTracker::ended_unreported(const std::string& cause,
                                                               const std::string& why,
                                                               bool migrated) {
  if (finished_) return {};
  finished_ = true;
  if (migrated) {
    state_ = S::Shutoff;
    reason_ = R::Migrated;
  } else if (state_ != S::Crashed) {
    state_ = stop_ == events::StopRequest::Forced ? S::Shutoff : S::Crashed;
    reason_ = stop_ == events::StopRequest::Forced ? R::Destroyed : R::Unknown;
  }
  DomainEvent ev;
  ev.type = T::Stopped;
  ev.detail = migrated ? D::Migrated : state_ == S::Crashed ? D::Failed : D::Destroyed;
  ev.state = state_;
  ev.reason = reason_;
  ev.cause = cause;
  ev.properties = {{"error", why}};
  return {ev};
}

void LibvirtEventTracker::on_stop_requested(events::StopRequest kind) {
  if (static_cast<int>(kind) > static_cast<int>(stop_)) stop_ = kind;
}

}  // namespace chl::libvirt

#include "events/event_mapping.hpp"

#include <array>

namespace chl::events {

namespace {
using T = DomainEventType;
using D = EventDetail;
using S = DomainState;
using R = StateReason;
using E = TrackerEffect;
constexpr std::nullopt_t kNone = std::nullopt;

// clang-format off
constexpr std::array kTable = {
  // ---- source "vmm": the VMM process itself (main.rs, lib.rs) ----
  MappingRow{"vmm", "starting", "", kNone, D::None, kNone, R::Unknown, E::None,
             "VMM process started; no VM is defined yet, the state stays NoState"},
  MappingRow{"vmm", "shutdown", "", kNone, D::None, kNone, R::Unknown, E::VmmShutdown,
             "vmm.shutdown or guest power-off: CH deleted the VM (vm/shutdown, vm/deleted came first) and exits 0"},
  // ---- source "vm": lifecycle (lib.rs, vm.rs) ----
  MappingRow{"vm", "booting", "", kNone, D::None, kNone, R::Unknown, E::Pending,
             "vm.boot started; also emitted when the boot is refused (no config, already running): no state change"},
  MappingRow{"vm", "booted", "", T::Started, D::Booted, S::Running, R::Booted, E::Completed,
             "vm.boot succeeded (also a boot after vm.shutdown)"},
  MappingRow{"vm", "pausing", "", kNone, D::None, kNone, R::Unknown, E::Pending,
             "vm.pause started; a refused pause (already paused) emits it alone"},
  MappingRow{"vm", "paused", "", T::Suspended, D::Paused, S::Paused, R::User, E::Completed,
             "vm.pause succeeded; CH pauses only on request (during a migration see vm-paused-for-migration)"},
  MappingRow{"vm", "resuming", "", kNone, D::None, kNone, R::Unknown, E::Pending,
             "vm.resume started; a refused resume (not paused) emits it alone"},
  MappingRow{"vm", "resumed", "", T::Resumed, D::Unpaused, S::Running, R::Unpaused, E::Completed,
             "vm.resume succeeded (also after restore with resume, or a failed outgoing migration)"},
  MappingRow{"vm", "rebooting", "", kNone, D::None, kNone, R::Unknown, E::Pending,
             "vm.reboot or a guest reset started; the VM is being rebuilt"},
  MappingRow{"vm", "rebooted", "", T::Reboot, D::Booted, S::Running, R::Booted, E::Completed,
             "reboot done: the guest runs again from its boot (libvirt's REBOOT event)"},
  MappingRow{"vm", "shutdown", "", T::Stopped, D::Shutdown, S::Shutoff, R::Shutdown, E::Completed,
             "VM stopped: guest power-off, or vm.shutdown; a stop the user forced uses vm-shutdown-forced"},
  MappingRow{"vm", "deleted", "", T::Undefined, D::Removed, kNone, R::Unknown, E::None,
             "vm.delete (or vmm.shutdown): the VM definition is gone; the last state stays"},
  MappingRow{"vm", "snapshotting", "", kNone, D::None, kNone, R::Unknown, E::Pending,
             "vm.snapshot started; refused or failed snapshots emit it alone"},
  MappingRow{"vm", "snapshotted", "", kNone, D::None, kNone, R::Unknown, E::Completed,
             "snapshot taken (the VM was paused and stays paused): no state change"},
  MappingRow{"vm", "restoring", "", kNone, D::None, kNone, R::Unknown, E::Pending,
             "vm.restore started (also during an incoming migration)"},
  MappingRow{"vm", "restored", "", T::Suspended, D::FromSnapshot, S::Paused, R::FromSnapshot, E::Completed,
             "restore done: CH leaves the restored VM paused (vm/resumed follows when resume was asked)"},
  MappingRow{"vm", "resizing", "", kNone, D::None, kNone, R::Unknown, E::Pending,
             "vm.resize started (vCPUs, memory, balloon)"},
  MappingRow{"vm", "resized", "", T::Defined, D::Updated, kNone, R::Unknown, E::Completed,
             "resize done: the definition changed, the state did not"},
  MappingRow{"vm", "device-removed", "", T::DeviceRemoved, D::Removed, kNone, R::Unknown, E::None,
             "the guest released a device after vm.remove-device; properties.id names it"},
  // ---- source "vm": live migration (lib.rs) ----
  MappingRow{"vm", "migration-started", "", T::Migration, D::MigrationStarted, kNone, R::Unknown, E::MigrationBegin,
             "outgoing migration began; the VM keeps running"},
  MappingRow{"vm", "migration-memory-iteration", "", T::Migration, D::MigrationIteration, kNone, R::Unknown, E::None,
             "one pre-copy pass over dirty memory; properties.id is the iteration number"},
  MappingRow{"vm", "migration-finished", "", T::Stopped, D::Migrated, S::Shutoff, R::Migrated, E::MigrationEnd,
             "outgoing migration succeeded: the VM now runs on the destination; this VMM shuts down"},
  MappingRow{"vm", "migration-failed", "", T::Migration, D::MigrationFailed, kNone, R::Unknown, E::MigrationEnd,
             "outgoing migration failed; CH resumes the VM if it had paused it (vm/resumed follows)"},
  MappingRow{"vm", "migration-receive-started", "", T::Migration, D::IncomingStarted, S::Paused, R::Migration, E::MigrationBegin,
             "incoming migration: a VM is being received, not running yet"},
  MappingRow{"vm", "migration-receive-finished", "", T::Started, D::Migrated, S::Running, R::Migrated, E::MigrationEnd,
             "incoming migration done: the received VM runs here"},
  MappingRow{"vm", "migration-receive-failed", "", T::Stopped, D::Failed, S::Shutoff, R::Failed, E::MigrationEnd,
             "incoming migration aborted: the partial VM was dropped"},
  // ---- source "guest": pvpanic (devices/src/pvpanic.rs), properties.event ----
  MappingRow{"guest", "panic", "panic", T::Crashed, D::Panicked, S::Crashed, R::Panicked, E::None,
             "guest kernel panicked (pvpanic bit 0)"},
  MappingRow{"guest", "panic", "crash_loaded", T::Crashed, D::CrashLoaded, kNone, R::Unknown, E::None,
             "guest panicked and is running its crash kernel (pvpanic bit 1): it keeps running"},
  MappingRow{"guest", "panic", "", T::Crashed, D::Panicked, S::Crashed, R::Panicked, E::None,
             "pvpanic wrote another value (CH says unknown_event): treated as a panic"},
  // ---- source "launcher": synthesized by DomainStateTracker ----
  MappingRow{"launcher", "vm-shutdown-forced", "", T::Stopped, D::Destroyed, S::Shutoff, R::Destroyed, E::Completed,
             "vm/shutdown after the user forced the stop (kill, or the grace period ran out)"},
  MappingRow{"launcher", "vm-shutdown-during-reboot", "", kNone, D::None, kNone, R::Unknown, E::None,
             "vm/shutdown while vm/rebooting is pending: older CH versions emit it from inside a reboot; the VM is not stopping"},
  MappingRow{"launcher", "vm-paused-for-migration", "", T::Suspended, D::Migrated, S::Paused, R::Migration, E::Completed,
             "vm/paused while an outgoing migration runs: the final memory pass"},
  MappingRow{"launcher", "vm-restored-for-migration", "", kNone, D::None, S::Paused, R::Migration, E::Completed,
             "vm/restored while an incoming migration runs: not a restore from snapshot"},
  MappingRow{"launcher", "vm-received-paused", "", T::Started, D::Migrated, S::Paused, R::User, E::MigrationEnd,
             "vm/migration-receive-finished with no vm/resumed: a paused VM was migrated (CompletePaused) and stays paused"},
  MappingRow{"launcher", "vmm-exited-clean", "", T::Stopped, D::Shutdown, S::Shutoff, R::Shutdown, E::None,
             "VMM exited after vmm/shutdown while the VM was not yet Shutoff (e.g. never booted)"},
  MappingRow{"launcher", "vmm-exited-clean-forced", "", T::Stopped, D::Destroyed, S::Shutoff, R::Destroyed, E::None,
             "as vmm-exited-clean, after the user forced the stop"},
  MappingRow{"launcher", "vmm-killed-on-request", "", T::Stopped, D::Destroyed, S::Shutoff, R::Destroyed, E::None,
             "VMM exited without vmm/shutdown after the user forced the stop (SIGKILL by the launcher)"},
  MappingRow{"launcher", "vmm-exited-unexpectedly", "", T::Stopped, D::Failed, S::Crashed, R::Unknown, E::None,
             "VMM exited without vmm/shutdown and nobody asked (crash, SIGKILL from outside): Crashed"},
  MappingRow{"launcher", "event-monitor-lost", "", T::Stopped, D::Failed, S::Shutoff, R::Failed, E::None,
             "the event monitor closed while the VMM lived and no stop was under way: the launcher cannot follow the VM and ends the VMM (libvirt on monitor EOF)"},
};
// clang-format on
}  // namespace

std::span<const MappingRow> mapping_table() { return kTable; }

const MappingRow* find_mapping(std::string_view source, std::string_view event,
                               std::string_view qualifier) {
  const MappingRow* fallback = nullptr;
  for (const auto& row : kTable) {
    if (row.source != source || row.event != event) continue;
    if (!row.qualifier.empty() && row.qualifier == qualifier) return &row;
    if (row.qualifier.empty() && fallback == nullptr) fallback = &row;
  }
  return fallback;
}

}  // namespace chl::events

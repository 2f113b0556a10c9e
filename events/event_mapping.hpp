#pragma once
// The mapping from Cloud Hypervisor's events to domain events and states, as data: one row per
// (source, event[, qualifier]) with a comment. Rows with source "launcher" are events the
// launcher synthesizes (the VMM process exiting, a stop the user forced) and are chosen by
// DomainStateTracker; every other row is an event CH's event monitor emits.
// docs/events.md renders this table; tests check every row.
#include <optional>
#include <span>
#include <string_view>

#include "events/domain_state.hpp"

namespace chl::events {

// What a row does to the tracker besides the state.
enum class TrackerEffect : std::uint8_t {
  None,
  Pending,         // a "…ing" event: remember the operation; the state does not change
  Completed,       // a "…ed" event: the pending operation (if any) is done
  MigrationBegin,  // a migration (outgoing or incoming) is in progress
  MigrationEnd,    // the migration is over (finished or failed)
  VmmShutdown,     // CH is exiting cleanly (vmm/shutdown)
};

struct MappingRow {
  std::string_view source;
  std::string_view event;
  std::string_view qualifier;                 // must equal properties["event"]; "" = any
  std::optional<DomainEventType> emits;       // the domain event reported, if any
  EventDetail detail = EventDetail::None;
  std::optional<DomainState> state;           // the state after it; nullopt = unchanged
  StateReason reason = StateReason::Unknown;
  TrackerEffect effect = TrackerEffect::None;
  std::string_view comment;
};

// Every row, CH's events first, then the launcher's.
std::span<const MappingRow> mapping_table();
// The row for an event: an exact qualifier match first, then the row with an empty qualifier.
const MappingRow* find_mapping(std::string_view source, std::string_view event,
                               std::string_view qualifier = {});

// Names of the synthesized rows (source "launcher").
namespace synthetic {
inline constexpr std::string_view kSource = "launcher";
inline constexpr std::string_view kVmShutdownForced = "vm-shutdown-forced";
inline constexpr std::string_view kVmShutdownDuringReboot = "vm-shutdown-during-reboot";
inline constexpr std::string_view kVmPausedForMigration = "vm-paused-for-migration";
inline constexpr std::string_view kVmRestoredForMigration = "vm-restored-for-migration";
inline constexpr std::string_view kVmReceivedPaused = "vm-received-paused";
inline constexpr std::string_view kVmmExitedClean = "vmm-exited-clean";
inline constexpr std::string_view kVmmExitedCleanForced = "vmm-exited-clean-forced";
inline constexpr std::string_view kVmmKilledOnRequest = "vmm-killed-on-request";
inline constexpr std::string_view kVmmExitedUnexpectedly = "vmm-exited-unexpectedly";
inline constexpr std::string_view kEventMonitorLost = "event-monitor-lost";
}  // namespace synthetic

}  // namespace chl::events

#pragma once
// The domain vocabulary the launcher reports in: libvirt's lifecycle states, state reasons and
// event types/details, spelled as KubeVirt's virt-launcher spells them
// (pkg/virt-launcher/virtwrap/api: LifeCycle "Running", StateChangeReason "Booted", ...).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace chl::events {

// virDomainState.
enum class DomainState : std::uint8_t {
  NoState,
  Running,
  Blocked,
  Paused,
  ShuttingDown,
  Shutoff,
  Crashed,
  PMSuspended,
};

// The union of libvirt's per-state reasons (virDomainRunningReason, virDomainPausedReason,
// virDomainShutoffReason, virDomainShutdownReason, virDomainCrashedReason, ...), by name.
enum class StateReason : std::uint8_t {
  Unknown,
  // Running
  Booted,
  Migrated,
  Restored,
  FromSnapshot,
  Unpaused,
  MigrationCanceled,
  SaveCanceled,
  Wakeup,
  Postcopy,
  PostcopyFailed,
  // Paused
  User,
  Migration,
  Save,
  Dump,
  IOError,
  Watchdog,
  ShuttingDown,
  Snapshot,
  StartingUp,
  // Shutoff
  Shutdown,
  Destroyed,
  Crashed,
  Saved,
  Failed,
  // Crashed
  Panicked,
  // NoState
  NonExistent,
};

// virDomainEventType, plus the non-lifecycle libvirt event ids the launcher forwards
// (VIR_DOMAIN_EVENT_ID_REBOOT, _DEVICE_REMOVED, _MIGRATION_ITERATION / _JOB_COMPLETED).
enum class DomainEventType : std::uint8_t {
  Defined,
  Undefined,
  Started,
  Suspended,
  Resumed,
  Stopped,
  Shutdown,
  PMSuspended,
  Crashed,
  Reboot,
  DeviceRemoved,
  Migration,
};

// Event details (virDomainEvent*DetailType), by name; a few are specific to the launcher and
// documented in docs/events.md (VmmExited, the Migration* details).
enum class EventDetail : std::uint8_t {
  None,
  // Defined / Undefined
  Added,
  Updated,
  Removed,
  // Started
  Booted,
  Migrated,
  Restored,
  FromSnapshot,
  Wakeup,
  // Suspended
  Paused,
  IOError,
  Watchdog,
  APIError,
  // Resumed
  Unpaused,
  // Stopped
  Shutdown,
  Destroyed,
  Crashed,
  Saved,
  Failed,
  // Shutdown
  Finished,
  Guest,
  Host,
  // Crashed
  Panicked,
  CrashLoaded,
  // Migration (launcher-specific names)
  MigrationStarted,
  MigrationIteration,
  MigrationCompleted,
  MigrationFailed,
  IncomingStarted,
  IncomingCompleted,
  IncomingFailed,
};

std::string_view to_string(DomainState s);
std::string_view to_string(StateReason r);
std::string_view to_string(DomainEventType t);
std::string_view to_string(EventDetail d);
// Inverse of to_string (exact spelling); nullopt when unknown.
std::optional<DomainState> domain_state_from_string(std::string_view s);
std::optional<StateReason> state_reason_from_string(std::string_view s);

// One event the launcher reports.
struct DomainEvent {
  DomainEventType type = DomainEventType::Defined;
  EventDetail detail = EventDetail::None;
  DomainState state = DomainState::NoState;    // the domain's state after this event
  StateReason reason = StateReason::Unknown;
  std::string cause;                           // "vm/paused", "launcher/vmm-exited-unexpectedly"
  std::uint64_t secs = 0;                      // CH's timestamp (0 for launcher-made events)
  std::uint32_t nanos = 0;
  nlohmann::json properties;                   // e.g. {"id":"disk2"}, {"exit_code":1}
  bool operator==(const DomainEvent&) const = default;
};

// {"type":"Suspended","detail":"Paused","state":"Paused","reason":"User","cause":"vm/paused",
//  "timestamp":{"secs":..,"nanos":..},"properties":...}
nlohmann::json to_json(const DomainEvent& e);

}  // namespace chl::events

#include "events/domain_state.hpp"

#include <array>
#include <utility>

namespace chl::events {

namespace {
template <typename E, std::size_t N>
std::string_view name_of(const std::array<std::pair<E, std::string_view>, N>& names, E v) {
  for (const auto& [e, n] : names)
    if (e == v) return n;
  return "Invalid";
}
template <typename E, std::size_t N>
std::optional<E> value_of(const std::array<std::pair<E, std::string_view>, N>& names,
                          std::string_view s) {
  for (const auto& [e, n] : names)
    if (n == s) return e;
  return std::nullopt;
}

using S = DomainState;
constexpr std::array<std::pair<S, std::string_view>, 8> kStates{{
    {S::NoState, "NoState"},
    {S::Running, "Running"},
    {S::Blocked, "Blocked"},
    {S::Paused, "Paused"},
    {S::ShuttingDown, "ShuttingDown"},
    {S::Shutoff, "Shutoff"},
    {S::Crashed, "Crashed"},
    {S::PMSuspended, "PMSuspended"},
}};

using R = StateReason;
constexpr std::array<std::pair<R, std::string_view>, 27> kReasons{{
    {R::Unknown, "Unknown"},
    {R::Booted, "Booted"},
    {R::Migrated, "Migrated"},
    {R::Restored, "Restored"},
    {R::FromSnapshot, "FromSnapshot"},
    {R::Unpaused, "Unpaused"},
    {R::MigrationCanceled, "MigrationCanceled"},
    {R::SaveCanceled, "SaveCanceled"},
    {R::Wakeup, "Wakeup"},
    {R::Postcopy, "Postcopy"},
    {R::PostcopyFailed, "PostcopyFailed"},
    {R::User, "User"},
    {R::Migration, "Migration"},
    {R::Save, "Save"},
    {R::Dump, "Dump"},
    {R::IOError, "IOError"},
    {R::Watchdog, "Watchdog"},
    {R::ShuttingDown, "ShuttingDown"},
    {R::Snapshot, "Snapshot"},
    {R::StartingUp, "StartingUp"},
    {R::Shutdown, "Shutdown"},
    {R::Destroyed, "Destroyed"},
    {R::Crashed, "Crashed"},
    {R::Saved, "Saved"},
    {R::Failed, "Failed"},
    {R::Panicked, "Panicked"},
    {R::NonExistent, "NonExistent"},
}};

using T = DomainEventType;
constexpr std::array<std::pair<T, std::string_view>, 12> kTypes{{
    {T::Defined, "Defined"},
    {T::Undefined, "Undefined"},
    {T::Started, "Started"},
    {T::Suspended, "Suspended"},
    {T::Resumed, "Resumed"},
    {T::Stopped, "Stopped"},
    {T::Shutdown, "Shutdown"},
    {T::PMSuspended, "PMSuspended"},
    {T::Crashed, "Crashed"},
    {T::Reboot, "Reboot"},
    {T::DeviceRemoved, "DeviceRemoved"},
    {T::Migration, "Migration"},
}};

using D = EventDetail;
constexpr std::array<std::pair<D, std::string_view>, 31> kDetails{{
    {D::None, "None"},
    {D::Added, "Added"},
    {D::Updated, "Updated"},
    {D::Removed, "Removed"},
    {D::Booted, "Booted"},
    {D::Migrated, "Migrated"},
    {D::Restored, "Restored"},
    {D::FromSnapshot, "FromSnapshot"},
    {D::Wakeup, "Wakeup"},
    {D::Paused, "Paused"},
    {D::IOError, "IOError"},
    {D::Watchdog, "Watchdog"},
    {D::APIError, "APIError"},
    {D::Unpaused, "Unpaused"},
    {D::Shutdown, "Shutdown"},
    {D::Destroyed, "Destroyed"},
    {D::Crashed, "Crashed"},
    {D::Saved, "Saved"},
    {D::Failed, "Failed"},
    {D::Finished, "Finished"},
    {D::Guest, "Guest"},
    {D::Host, "Host"},
    {D::Panicked, "Panicked"},
    {D::CrashLoaded, "CrashLoaded"},
    {D::MigrationStarted, "MigrationStarted"},
    {D::MigrationIteration, "MigrationIteration"},
    {D::MigrationCompleted, "MigrationCompleted"},
    {D::MigrationFailed, "MigrationFailed"},
    {D::IncomingStarted, "IncomingStarted"},
    {D::IncomingCompleted, "IncomingCompleted"},
    {D::IncomingFailed, "IncomingFailed"},
}};
}  // namespace

std::string_view to_string(DomainState s) { return name_of(kStates, s); }
std::string_view to_string(StateReason r) { return name_of(kReasons, r); }
std::string_view to_string(DomainEventType t) { return name_of(kTypes, t); }
std::string_view to_string(EventDetail d) { return name_of(kDetails, d); }
std::optional<DomainState> domain_state_from_string(std::string_view s) { return value_of(kStates, s); }
std::optional<StateReason> state_reason_from_string(std::string_view s) { return value_of(kReasons, s); }

nlohmann::json to_json(const DomainEvent& e) {
  nlohmann::json j;
  j["type"] = std::string(to_string(e.type));
  j["detail"] = std::string(to_string(e.detail));
  j["state"] = std::string(to_string(e.state));
  j["reason"] = std::string(to_string(e.reason));
  j["cause"] = e.cause;
  j["timestamp"] = {{"secs", e.secs}, {"nanos", e.nanos}};
  j["properties"] = e.properties;
  return j;
}

}  // namespace chl::events

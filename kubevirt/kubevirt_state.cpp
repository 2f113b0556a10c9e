#include "kubevirt/kubevirt_state.hpp"

#include <array>

namespace chl::kubevirt {

namespace {
using S = events::DomainState;
using R = events::StateReason;

// StateChangeReason: KubeVirt translates reasons for these four states only (ConvReason); every
// other state, Running included, says "Unknown". NoState/NonExistent is the launcher's own
// "the domain is gone" (sent with ObjectMeta.deletionTimestamp), not a libvirt reason.
constexpr std::array<ReasonRow, 27> kReasons{{
    // ShuttingDown: the guest is handling a shutdown request.
    {S::ShuttingDown, R::Unknown, "Unknown"},
    {S::ShuttingDown, R::User, "User"},
    // Shutoff: why the domain stopped.
    {S::Shutoff, R::Unknown, "Unknown"},
    {S::Shutoff, R::Shutdown, "Shutdown"},    // the guest powered off
    {S::Shutoff, R::Destroyed, "Destroyed"},  // forced off (Kill, grace period over)
    {S::Shutoff, R::Crashed, "Crashed"},      // the VMM died
    {S::Shutoff, R::Migrated, "Migrated"},
    {S::Shutoff, R::Saved, "Saved"},
    {S::Shutoff, R::Failed, "Failed"},  // it never started
    {S::Shutoff, R::FromSnapshot, "FromSnapshot"},
    // Crashed.
    {S::Crashed, R::Unknown, "Unknown"},
    {S::Crashed, R::Panicked, "Panicked"},  // guest panic (pvpanic)
    // Paused: who paused it.
    {S::Paused, R::Unknown, "Unknown"},
    {S::Paused, R::User, "User"},  // Pause RPC, virtctl pause
    {S::Paused, R::Migration, "Migration"},
    {S::Paused, R::Save, "Save"},
    {S::Paused, R::Dump, "Dump"},
    {S::Paused, R::IOError, "IOError"},  // a disk error stopped the CPUs
    {S::Paused, R::Watchdog, "Watchdog"},
    {S::Paused, R::FromSnapshot, "FromSnapshot"},
    {S::Paused, R::ShuttingDown, "ShuttingDown"},
    {S::Paused, R::Snapshot, "Snapshot"},
    {S::Paused, R::Crashed, "Crashed"},
    {S::Paused, R::StartingUp, "StartingUp"},  // VMM up, vCPUs not yet running
    {S::Paused, R::Postcopy, "Postcopy"},
    {S::Paused, R::PostcopyFailed, "PostcopyFailed"},
    // NoState: the domain no longer exists.
    {S::NoState, R::NonExistent, "NonExistent"},
}};
}  // namespace

std::span<const ReasonRow> reason_table() { return kReasons; }

KubevirtState to_kubevirt_state(events::DomainState state, events::StateReason reason) {
  // KubeVirt's LifeCycle strings (ConvState) are the launcher's own state names, libvirt's
  // shutdown included ("ShuttingDown"); test_kubevirt_state checks all eight.
  KubevirtState out{events::to_string(state), "Unknown"};
  for (const auto& row : kReasons)
    if (row.state == state && row.reason == reason) out.reason = row.kubevirt_reason;
  return out;
}

}  // namespace chl::kubevirt

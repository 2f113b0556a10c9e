#pragma once
// Turns Cloud Hypervisor's events plus what the launcher itself knows (the VMM process exited
// with a status; the user asked for a stop) into domain events and the current (state, reason),
// using the table in event_mapping.hpp.
//
// Rules beyond the table:
// - "…ing" events never change the state (CH emits them for refused transitions too); the
//   operation is remembered as pending() until its "…ed" event.
// - A guest power-off is vm/shutdown, vm/deleted, vmm/shutdown, exit 0: Shutoff/Shutdown.
//   After a forced stop request, vm/shutdown is reported as Shutoff/Destroyed.
// - The VMM exiting: if the VM is already Shutoff nothing changes; after vmm/shutdown it is a
//   clean exit; after a forced stop request it is Shutoff/Destroyed; otherwise the VMM died
//   under the VM: Crashed/Unknown (a Crashed/Panicked domain keeps its reason).
// - vm/shutdown while vm/rebooting is pending is part of the reboot (CH versions before v52
//   emitted it from Vm::shutdown inside vm_reboot): no state change.
// - Once Shutoff, further "stopped" rows are not reported again.
// - Events after the VMM exited are ignored (logged).
// - The event monitor closing while the VMM lives (on_event_monitor_lost, the launcher then ends
//   the VMM): Shutoff/Failed, as libvirt's qemuProcessHandleMonitorEOF; nothing changes when
//   the VM was already stopping on its own (Shutoff, vmm/shutdown seen), has crashed (a panic
//   stays Crashed/Panicked), or the user forced the stop (the VMM is being destroyed anyway, as
//   libvirt's beingDestroyed).
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "events/domain_state.hpp"
#include "events/event_mapping.hpp"
#include "events/vmm_event.hpp"

namespace chl::events {

enum class StopRequest : std::uint8_t {
  None,
  Graceful,  // ACPI power button: the guest decides; a power-off is still Shutoff/Shutdown
  Forced,    // vm.shutdown / vmm.shutdown / SIGKILL by the launcher: Shutoff/Destroyed
};

// How the VMM process ended, from waitpid's status.
struct VmmExit {
  bool signaled = false;
  int code = 0;  // exit code, or the signal number when signaled
  // Killed by a signal the launcher did not send (it died on its own, e.g. while a forced stop
  // was still on its way): Crashed even if a stop was requested.
  bool died_on_its_own = false;
  static VmmExit from_wait_status(int wait_status);
  [[nodiscard]] std::string describe() const;  // "exit status 0", "killed by signal 9 (Killed)"
};

class DomainStateTracker {
 public:
  DomainStateTracker() = default;

  // One event from CH's stream; returns the domain events it causes (0 or 1 today).
  std::vector<DomainEvent> on_vmm_event(const VmmEvent& e);
  // The VMM process was reaped.
  std::vector<DomainEvent> on_vmm_exited(const VmmExit& exit);
  // The event monitor closed (EOF or read error) while the VMM still runs; returns the domain
  // event it causes (Stopped/Failed, or none: see the rules above).
  std::vector<DomainEvent> on_event_monitor_lost();
  // The user asked to stop the VM; a Forced request overrides a Graceful one. Emits nothing.
  void on_stop_requested(StopRequest kind);

  [[nodiscard]] DomainState state() const { return state_; }
  [[nodiscard]] StateReason reason() const { return reason_; }
  // The "…ing" event still waiting for its "…ed" (e.g. "vm/pausing"), if any.
  [[nodiscard]] const std::optional<std::string>& pending() const { return pending_; }
  [[nodiscard]] bool vmm_shutdown_seen() const { return vmm_shutdown_seen_; }
  [[nodiscard]] bool vmm_exited() const { return vmm_exited_; }
  [[nodiscard]] bool event_monitor_lost() const { return event_monitor_lost_; }
  [[nodiscard]] bool migrating() const { return migrating_; }
  [[nodiscard]] StopRequest stop_requested() const { return stop_; }
  [[nodiscard]] bool vm_defined() const { return vm_defined_; }
  // True when the VM will not run again in this VMM: Shutoff, Crashed by VMM exit, or VMM gone.
  [[nodiscard]] bool finished() const;
  // {"state":"Running","reason":"Booted","pending":null,"vmm_exited":false,...}
  [[nodiscard]] nlohmann::json to_json() const;

 private:
  std::vector<DomainEvent> apply(const MappingRow& row, std::string cause, std::uint64_t secs,
                                 std::uint32_t nanos, nlohmann::json properties);

  DomainState state_ = DomainState::NoState;
  StateReason reason_ = StateReason::Unknown;
  std::optional<std::string> pending_;
  bool vmm_shutdown_seen_ = false;
  bool vmm_exited_ = false;
  bool event_monitor_lost_ = false;
  bool migrating_ = false;
  bool vm_defined_ = false;
  StopRequest stop_ = StopRequest::None;
};

}  // namespace chl::events

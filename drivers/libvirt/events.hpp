#pragma once
// libvirt's domain events, translated into the launcher's domain events (events/domain_state.hpp)
// — the same vocabulary Cloud Hypervisor's event stream is translated into. libvirt already
// speaks it, so the table (libvirt_events.cpp) is mostly one row per (event, detail); the rules
// beyond the table keep both drivers to one contract:
// - A paused start (the driver starts QEMU paused, attaches the console, then resumes) reports
//   one Started/Booted, when the guest really runs: the Suspended and Resumed of that start
//   are not reported.
// - A crash keeps its first reason: Crashed/Panicked stays so when QEMU is then stopped.
// - QEMU ending without a shutdown (libvirt's Stopped/Failed or Stopped/Crashed) is
//   Crashed/Unknown, unless the launcher asked for a forced stop: then Shutoff/Destroyed.
// - libvirt's Shutdown event (QEMU saw the guest power off, or the host asked) makes the domain
//   ShuttingDown/Unknown, as libvirt's own state is then (VIR_DOMAIN_SHUTDOWN, reason UNKNOWN)
//   and as virt-launcher reports it; only the Stopped that follows (or a crash) changes it again.
// - An incoming live migration (expect_incoming): libvirt's Started/Migrated is the domain that
//   receives, Paused/Migration (QEMU waits for the stream, vCPUs stopped), until Resumed/Migrated
//   (Running/Migrated) or, for a VM that was paused on the source, Suspended/Paused (Paused/User).
// - Stopped/Migrated (the VM now runs on the target) is Shutoff/Migrated, as libvirt's own
//   state (VIR_DOMAIN_SHUTOFF_MIGRATED) and virt-launcher say.
// - Once the domain stopped it is finished; later events are ignored.
#include <vector>

#include "events/domain_state.hpp"
#include "events/domain_state_tracker.hpp"

namespace chl::libvirt {

class LibvirtEventTracker {
 public:
  // The next start is a paused start (VIR_DOMAIN_START_PAUSED followed by a resume).
  void expect_paused_start() { paused_start_ = true; }
  // The domain is a live migration's incoming one (libvirt creates it).
  void expect_incoming() { incoming_ = true; }
  // A VIR_DOMAIN_EVENT_ID_LIFECYCLE callback: virDomainEventType and its detail.
  std::vector<events::DomainEvent> on_lifecycle(int event, int detail);
  // VIR_DOMAIN_EVENT_ID_REBOOT: the guest was reset (by itself or by virDomainReset).
  std::vector<events::DomainEvent> on_reboot();
  // The connection to libvirtd broke: the domain is out of reach.
  std::vector<events::DomainEvent> on_connection_lost(const std::string& why);
  // QEMU is gone and libvirt has not said so (launcher/qemu-exited): Shutoff/Destroyed when the
  // launcher forced the stop, else Crashed/Unknown — what libvirt's Stopped would have said.
  std::vector<events::DomainEvent> on_qemu_gone_unreported(const std::string& why);
  // QEMU is gone after the outgoing migration's call succeeded, and libvirt has not said so:
  // Shutoff/Migrated, what its Stopped/Migrated says (the VM runs on the target).
  std::vector<events::DomainEvent> on_qemu_gone_migrated(const std::string& why);
  void on_stop_requested(events::StopRequest kind);

  [[nodiscard]] events::DomainState state() const { return state_; }
  [[nodiscard]] events::StateReason reason() const { return reason_; }
  // QEMU is gone: the domain stopped (or libvirt is out of reach).
  [[nodiscard]] bool finished() const { return finished_; }
  [[nodiscard]] events::StopRequest stop_requested() const { return stop_; }

 private:
  // The end libvirt did not report: Crashed/Unknown (Shutoff/Destroyed after a forced stop), or
  // Shutoff/Migrated when `migrated` (the outgoing migration's call succeeded).
  std::vector<events::DomainEvent> ended_unreported(const std::string& cause,
                                                    const std::string& why, bool migrated = false);
  events::DomainState state_ = events::DomainState::NoState;
  events::StateReason reason_ = events::StateReason::Unknown;
  events::StopRequest stop_ = events::StopRequest::None;
  bool paused_start_ = false;
  bool incoming_ = false;      // receiving: Started is Paused/Migration until Resumed or Suspended
  bool started_seen_ = false;  // during a paused start: Started arrived, waiting for Resumed
  bool finished_ = false;
};

// libvirt's domain state and reason (virDomainGetState) as virt-launcher reports them
// (ConvState / ConvReason in its virtwrap/util): VIR_DOMAIN_SHUTDOWN is ShuttingDown, a reason
// libvirt leaves UNKNOWN (or one without a name here) is Unknown.
struct LibvirtState {
  events::DomainState state = events::DomainState::NoState;
  events::StateReason reason = events::StateReason::Unknown;
};
LibvirtState libvirt_domain_state(int state, int reason);

// "Started/Booted" for logs: libvirt's names of an event and its detail.
std::string libvirt_event_name(int event, int detail);

}  // namespace chl::libvirt

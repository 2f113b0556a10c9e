#pragma once
// Fault injection for the double, read once from the environment at start (tests set them
// through a wrapper script, since the launcher gives the VMM a clean environment):
//   VMM_DOUBLE_CRASH_AT=<phase>            SIGKILL itself at that phase: no events, no answer,
//                                          the API socket file stays behind (as a real crash).
//   VMM_DOUBLE_EXIT_WITHOUT_EVENTS=<phase> exit(0) at that phase without shutdown events
//                                          (socket file removed as on a normal exit).
//   VMM_DOUBLE_CLOSE_EVENTS_AT=<phase>     close the event-monitor fd at that phase and keep
//                                          running (API and guest go on; no more events).
//     phases: start (right after vmm/starting), create (on vm.create, before answering),
//             boot (on vm.boot, before vm/booting), running (shortly after the VM is Running),
//             paused (shortly after it is Paused), snapshot (vm.snapshot, after config.json is
//             written and before state.json: a half-written snapshot), shutdown (on vm.shutdown),
//             restore (on vm.restore, before reading the snapshot); for CRASH_AT also any
//             endpoint name (vm.add-disk, vm.send-migration, ...): on that request, unanswered
//   VMM_DOUBLE_HANG=<endpoint>[,<endpoint>...]  take the request and never answer it; the API
//                                          stays blocked behind it (as a hung CH VMM thread).
//   VMM_DOUBLE_FAIL=<endpoint>[,<endpoint>...]  answer 500 with CH's error array for that
//                                          endpoint ending in "vmm-double: injected failure";
//                                          the "…ing" event CH emits first is still emitted.
//   VMM_DOUBLE_GARBAGE_EVENTS=1            write junk into the event stream after every event.
//   VMM_DOUBLE_EVENT_LAG_MS=<n>            write each event n ms after it happened: the API's
//                                          answer comes first (CH's event_log() hands events to
//                                          its monitor thread, event_monitor/src/lib.rs).
//   VMM_DOUBLE_BOOT_DELAY_MS=<n>           vm.boot takes n ms (vm/booting at once, vm/booted
//                                          and the 204 after n ms; other API calls wait).
//   VMM_DOUBLE_PHASE_DELAY_MS=<n>          delay before the running/paused faults fire (20).
//   VMM_DOUBLE_HEARTBEAT_MS=<n>            the pretend guest prints "heartbeat N" every n ms
//                                          while running (off by default).
//   VMM_DOUBLE_POWEROFF_TEARDOWN_MS=<n>    after a guest power-off the VMM takes n ms tearing
//                                          the VM down before its events and its exit (CH's
//                                          control loop in vmm_shutdown): API requests wait
//                                          meanwhile and are answered as CH answers them then
//                                          (0 by default: at once).
//   VMM_DOUBLE_VFIO_ROOT=<dir>             a directory standing for / where VFIO devices are
//                                          looked up (<dir>/dev/vfio/vfio, <dir><path>/iommu_group,
//                                          <dir>/dev/vfio/<group>): a machine with VFIO, for the
//                                          double only (vfio.hpp; it does no VFIO ioctls).
// Endpoint names are as in the URL: vm.boot, vmm.ping, vm.add-net, ...
#include <set>
#include <string>

namespace chl::vmm_double {

struct Faults {
  std::string crash_at;
  std::string exit_without_events;
  std::string close_events_at;
  std::set<std::string> hang;
  std::set<std::string> fail;
  bool garbage_events = false;
  int event_lag_ms = 0;
  int boot_delay_ms = 0;
  int boot_answer_delay_ms = 0;  // `booted` at once, the 204 of vm.boot held this long
  int phase_delay_ms = 20;
  int heartbeat_ms = 0;
  int poweroff_teardown_ms = 0;
  std::string vfio_root;  // "": the machine's own /dev/vfio and /sys

  static Faults from_env();
  [[nodiscard]] bool crash(const std::string& phase) const { return crash_at == phase; }
  [[nodiscard]] bool quit(const std::string& phase) const { return exit_without_events == phase; }
  [[nodiscard]] bool close_events(const std::string& phase) const { return close_events_at == phase; }
};

}  // namespace chl::vmm_double

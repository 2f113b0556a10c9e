#pragma once
// The virt-handler stand-in's reconcile loop for a VM's end of life, in virt-handler's order and
// timing (pkg/virt-handler/vm.go: sync :1320-1497, helperVmShutdown :1621-1701, processVmDelete
// :1703, processVmCleanup :1499; ../shared/reference/kubevirt-domain-contract.md §2.1-2.5):
// - one worker, one pending key: a pass runs on a domain event (the informer) or when a requeue
//   falls due, and reads the informer cache WHEN it runs, not when the event came;
// - a busy worker: a pass triggered by an event that shows the domain stopped (or gone) runs only
//   `busy_delay` later, so the race of §2.5 shows (a launcher that leaves meanwhile → Failed);
// - shutdown: Ping first (a failed Ping is an error: requeue); no grace period on the domain →
//   Kill at once; else Shutdown re-sent every <= 5 s until GracePeriod.DeletionTimestamp + grace,
//   then Kill; ShuttingDown → nothing re-sent and no requeue;
// - delete: Ping, and DeleteDomain only when it answers (a failed Ping skips it silently); then
//   the launcher client is closed, and with it the notify pipe's listener (the socket file goes,
//   open connections stay: TestNotifyServer::close_pipe); the domain leaves the cache, and the
//   VMI's phase is written from the same domain object;
// - a Running VMI whose phase matches is Synced again on every pass (shouldUpdate).
// The domain is read from the raw JSON of the notifications (virt_handler_phase.hpp).
#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/kubevirt/test_notify_server.hpp"
#include "tests/kubevirt/virt_handler_phase.hpp"

namespace chl::test {

struct VirtHandlerLoopOptions {
  std::filesystem::path launcher_socket;  // <share>/sockets/launcher-sock
  std::string vmi_json;                   // the VMI as virt-handler sends it (its phase is ours)
  std::chrono::milliseconds busy_delay{3000};
  std::chrono::milliseconds error_requeue{1000};  // the rate limiter's retry after an error
};

class VirtHandlerLoop {
 public:
  struct Action {
    double at_s = 0;   // seconds since the loop started
    std::int64_t wall_s = 0;  // Unix seconds (whole) when recorded: the clock of DeletionTimestamp
    std::string what;  // Ping, Shutdown, Kill, DeleteDomain, Sync, Phase
    bool ok = true;
    std::string detail;  // the error, or the new phase
  };

  VirtHandlerLoop(VirtHandlerLoopOptions options, TestNotifyServer& informer,
                  std::string phase = "Running");
  ~VirtHandlerLoop();

  // The VMI gets a deletionTimestamp (kubectl delete / virtctl stop).
  void delete_vmi() { vmi_.deleting = true; }
  // Reconcile until the VMI is final and its domain deleted and cleaned up, or `timeout`; true
  // when it got there.
  bool run(std::chrono::milliseconds timeout);
  // One pass now (sync); the delay of the requeue it asked for, if any.
  std::optional<std::chrono::milliseconds> reconcile();

  [[nodiscard]] const std::string& phase() const { return vmi_.phase; }
  [[nodiscard]] const std::vector<Action>& actions() const { return actions_; }
  [[nodiscard]] std::vector<Action> actions(const std::string& what) const;
  [[nodiscard]] std::string log() const;  // one line per action, for failure messages
  [[nodiscard]] bool cleaned_up() const { return cleaned_up_; }

  struct Rpc;

 private:
  const nlohmann::json* cached();  // the informer's latest domain (nullptr: none, or removed)
  vh::Launcher launcher_state();
  void record(const std::string& what, bool ok, const std::string& detail = {});
  // helperVmShutdown: the requeue it asks for; error → error_requeue.
  std::optional<std::chrono::milliseconds> shutdown(const nlohmann::json* domain);
  // processVmDelete + processVmCleanup; false on an error other than a disconnect.
  bool delete_domain();
  bool sync_vmi();

  VirtHandlerLoopOptions opts_;
  TestNotifyServer& informer_;
  vh::VmiView vmi_;
  std::unique_ptr<Rpc> rpc_;
  std::chrono::steady_clock::time_point t0_;
  std::vector<Action> actions_;
  nlohmann::json cache_;  // the domain as of the last pass
  std::size_t seen_ = 0;  // notifications taken into the cache
  bool removed_ = false;  // processVmCleanup removed the domain (until a newer event)
  bool cleaned_up_ = false;
  bool launcher_seen_ = false;  // the launcher's socket was found once (initialized)
};

}  // namespace chl::test

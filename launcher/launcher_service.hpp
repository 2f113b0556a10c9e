#pragma once
// The launcher's one core: keeps a VM alive under a Driver for as long as it should live,
// reports what happens in libvirt's vocabulary (events::EventBus), and obeys lifecycle
// commands. Transports (the HTTP command socket today, KubeVirt's gRPC cmd protocol later)
// are thin layers that call these methods on the io_context thread and hand back the reply.
//
// Threads: everything here runs on the io_context thread, except the Driver's blocking calls,
// which run one at a time on a worker thread and post their result back.
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "launcher/driver.hpp"
#include "launcher/launch_options.hpp"
#include "launcher/state_waiters.hpp"
#include "common/error.hpp"
#include "events/event_bus.hpp"
#include "sandbox/seccomp_filter.hpp"

namespace chl::console_bridge {
class Bridge;
}

namespace chl::launcher {

// Who the VM is, for status and logs.
struct VmIdentity {
  std::string name;
  std::string namespace_;
  std::string uid;
};

struct ServiceOptions {
  VmIdentity vmi;
  std::filesystem::path state_dir;
  std::filesystem::path launcher_socket;   // command socket
  std::filesystem::path console_socket;    // virt-serial0
  // The guest's console log: nullopt = <state dir>/virt-serial0-log; an empty path = none
  // (virt-launcher mode: KubeVirt's <private>/<uid>/virt-serial0-log, or none when its
  // serial console log is off).
  std::optional<std::filesystem::path> console_log;
  std::chrono::seconds grace_period{30};
  std::chrono::seconds vmm_exit_timeout{5};  // after vmm.shutdown, before SIGKILL
  // After that SIGKILL, how long the VMM's end may take to be reported before the launcher
  // leaves without it (LauncherService::abandon): Kill and SIGTERM are bounded by it.
  std::chrono::seconds end_report_timeout{5};
  bool console_take_over = false;
  // The launcher confines itself once its VMM runs (sandbox/seccomp_policy.cpp), on both paths:
  // the filter is built for the driver (the qemu-kvm one adds the libvirt rows).
  sandbox::SeccompMode seccomp = sandbox::SeccompMode::Enforce;
  // Start from a snapshot (`run --restore DIR`) instead of creating and booting the VM: the VMM
  // restores it paused, the console is attached, then it is resumed.
  std::optional<std::filesystem::path> restore_from;
  // Receive the VM from a live migration on this URL ("unix:<path>") instead of creating it.
  std::optional<std::string> incoming_migration;
};

class LauncherService {
 public:
  using Reply = std::function<void(common::Result<nlohmann::json>)>;

  LauncherService(boost::asio::io_context& io, ServiceOptions options, std::unique_ptr<Driver> driver);
  ~LauncherService();
  LauncherService(const LauncherService&) = delete;
  LauncherService& operator=(const LauncherService&) = delete;

  // Start everything and run the loop until the VM is gone. Returns the exit code (ExitCode).
  int run();

  // ---- commands (io thread); each answers through `reply` exactly once ----
  void status(Reply reply);
  void pause(Reply reply);
  void resume(Reply reply);
  // Reset: the hypervisor's reboot (Driver::reboot); Acpi: a soft reboot without the guest agent
  // (Driver::acpi_reboot).
  enum class Reboot { Reset, Acpi };
  void reboot(Reply reply, Reboot how = Reboot::Reset);
  // Graceful: ACPI power button, then after the grace period a forced stop.
  void shutdown(std::optional<std::chrono::seconds> grace, Reply reply);
  // Forced, at once, whatever is pending (a graceful stop, a forced one: then the VMM is killed
  // now). Succeeds when the VM is already off.
  void kill(Reply reply);
  // The ACPI power button alone, as libvirt's virDomainShutdown: no grace timer of ours (the
  // caller forces the stop when it decides to: virt-launcher mode, where virt-handler does).
  // Running only; replies {"pressed": true}.
  void power_button(Reply reply);
  void snapshot(const std::filesystem::path& dir, Reply reply);
  void restore(const std::filesystem::path& dir, Reply reply);
  void add_disk(const nlohmann::json& disk, Reply reply);
  void remove_device(const std::string& id, Reply reply);
  // A VFIO device into the running VM (Driver::add_host_device), Running or Paused; replies the
  // hypervisor's answer about it.
  void add_host_device(const std::string& id, const std::string& path, Reply reply);
  // CPU/memory hotplug (Driver::resize), Running or Paused; replies {"vcpus", "memory"} as asked.
  void resize(std::optional<std::uint32_t> vcpus, std::optional<std::uint64_t> memory_bytes, Reply reply);
  // Live migration out (Driver::send_migration), Running or Paused; replies once it ended.
  void migrate(MigrationSend m, Reply reply);
  // Abort the outgoing migration under way (Driver::abort_migration; any thread).
  common::Status abort_migration();

  // SIGTERM/SIGINT handled another way (virt-launcher mode: KubeVirt's monitor marks the domain
  // for graceful shutdown and lets virt-handler stop it, pkg/virt-launcher/monitor.go): `hook`
  // runs on the loop at the first signal instead of the graceful stop, and the VM is forced off
  // only if it still runs when the grace period has passed since. Later signals change nothing.
  // Set before run().
  void on_terminate_signal(std::function<void()> hook) { terminate_hook_ = std::move(hook); }
  // Confine the launcher (seccomp) once the VM has booted rather than once its VMM runs: a boot
  // the VMM refuses then leaves the process able to start the next VMM (virt-launcher mode,
  // where virt-handler's next Sync retries). Set before run().
  void confine_after_boot() { confine_after_boot_ = true; }
  // A transport's stop function, called when the VM is gone (after the final event went out).
  void add_transport_stopper(std::function<void()> stop) { stoppers_.push_back(std::move(stop)); }

  // The guest agent through the driver's channel (Driver::agent_transport), null when none.
  [[nodiscard]] std::shared_ptr<guest_agent::CommandTransport> agent_transport() {
    return driver_->agent_transport();
  }
  // The domain events as they happen (the current state is domain_json()).
  events::EventBus& bus() { return bus_; }
  // {"state":…, "reason":…, "name":…, "namespace":…, "uid":…, "hypervisor":…, "vmm":{…}, …}
  [[nodiscard]] nlohmann::json domain_json() const;
  [[nodiscard]] boost::asio::io_context& io() { return io_; }

 private:
  template <typename F>
  void on_worker(F&& work, Reply reply);
  void on_domain_event(const events::DomainEvent& e);
  void refresh_console();
  void begin_graceful_stop(std::chrono::seconds grace);
  // The first SIGTERM/SIGINT with a terminate hook: the hook, then the grace period's timer.
  void terminate_hooked();
  void begin_forced_stop(const std::string& why);
  // The launcher ends by `within` from now whatever happens (SIGTERM, a forced stop).
  void bound_exit(std::chrono::seconds within, const std::string& why);
  // Leave without the VM's final event: the VMM is killed, the end is reported as Shutoff
  // (Destroyed), and a driver call that never returned is left behind (~LauncherService).
  void abandon(const std::string& why);
  void check_finished();
  void teardown();
  common::Status start_console();
  // Load the seccomp filter (after the VMM started, before the VM boots).
  common::Status confine();
  int exit_code() const;
  common::Result<nlohmann::json> state_error(const std::string& action, const std::string& need) const;
  // A driver call's answer, held until `reached()` (state_waiters.hpp: CH answers before its event).
  Reply answer_in_state(std::function<bool()> reached, Reply reply);

  boost::asio::io_context& io_;
  ServiceOptions opts_;
  std::unique_ptr<Driver> driver_;
  events::EventBus bus_;
  StateWaiters waiters_;

  // The worker's side: whether a driver call is in progress, and whether the service still
  // takes its results (a call that never returns outlives the service, see the destructor).
  struct WorkerLink {
    std::mutex mu;
    bool alive = true;
    std::atomic<bool> busy{false};
  };
  std::shared_ptr<WorkerLink> worker_link_ = std::make_shared<WorkerLink>();
  std::unique_ptr<boost::asio::io_context> worker_io_ = std::make_unique<boost::asio::io_context>();
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>>
      worker_guard_;
  std::thread worker_;

  boost::asio::signal_set signals_;
  boost::asio::steady_timer grace_timer_;
  boost::asio::steady_timer kill_timer_;
  boost::asio::steady_timer exit_deadline_;
  std::optional<std::chrono::steady_clock::time_point> exit_by_;
  std::unique_ptr<console_bridge::Bridge> bridge_;
  std::vector<std::function<void()>> stoppers_;
  std::function<void()> terminate_hook_;
  bool confine_after_boot_ = false;
  boost::asio::steady_timer terminate_timer_;

  std::optional<std::string> pty_;
  bool booted_ = false;
  bool seccomp_applied_ = false;
  bool launch_failed_ = false;
  std::string launch_error_;
  bool stopping_ = false;
  bool forced_ = false;
  bool torn_down_ = false;
  bool abandoned_ = false;
  std::chrono::steady_clock::time_point started_at_;
};

// A driver call on the worker thread, its result handed to `reply` back on the event loop (never
// once the service is gone: worker_link_).
template <typename F>
void LauncherService::on_worker(F&& work, Reply reply) {
  boost::asio::post(*worker_io_, [io = &io_, link = worker_link_, work = std::forward<F>(work),
                                  reply = std::move(reply)]() mutable {
    link->busy = true;
    common::Result<nlohmann::json> r = work();
    link->busy = false;
    std::lock_guard lk(link->mu);
    if (!link->alive) return;
    boost::asio::post(
        *io, [r = std::move(r), reply = std::move(reply)]() mutable { reply(std::move(r)); });
  });
}

}  // namespace chl::launcher

#pragma once
// Cloud Hypervisor behind the Driver interface: starts the VMM (API socket bound by us and
// passed as fd, event monitor as a pipe), reads its event stream and its exit (pidfd) on the
// io_context, translates them through events::DomainStateTracker, and drives the REST API
// through vmm_api::Client on the worker thread.
#include <mutex>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "launcher/driver.hpp"
#include "drivers/cloud_hypervisor/vmm_process.hpp"
#include "events/domain_state_tracker.hpp"
#include "events/event_stream_parser.hpp"
#include "vmm_api/client.hpp"
#include "vmm_api/types.hpp"

namespace chl::cloud_hypervisor {

struct ChDriverOptions {
  std::string vmm_binary = "cloud-hypervisor";
  std::filesystem::path state_dir;        // API socket, VMM log and event copy live here
  bool seccomp = true;
  int verbosity = 0;
  vmm_api::ClientOptions client;
  std::function<void(pid_t)> on_vmm_started;  // e.g. record the pid in the state directory
  // Pod network taps, cold-added with vm.add-net between vm.create and vm.boot (CH takes no fds
  // on vm.create): the config and the tap fds (one per queue pair), passed with SCM_RIGHTS.
  // The fds stay owned by the caller (the wired network), which outlives the driver's use.
  struct NetAttachment {
    vmm_api::NetConfig config;
    std::vector<int> fds;
  };
  std::vector<NetAttachment> nets;
  // isolateEmulatorThread (launcher::PlannedCpus::emulator_cpus; thread_isolation.hpp): the VMM
  // starts on these CPUs, so every thread it starts inherits them, and the launcher's own threads
  // join them; the vCPUs pin themselves through cpus.affinity. Empty = not isolated.
  std::vector<std::uint32_t> emulator_cpus;
  // realtime (launcher::PlannedCpus::realtime_vcpus; vcpu_realtime.hpp): these vCPUs' threads are
  // made SCHED_FIFO at realtime_priority right after boot, all or the start fails.
  bool realtime = false;
  std::vector<std::uint32_t> realtime_vcpus;
  int realtime_priority = 1;
  // The event monitor closing while the VMM lives leaves the launcher blind: after this long
  // (time for a VMM that is exiting to be seen dead), the VMM is ended and the domain reported
  // Shutoff/Failed (libvirt's qemuProcessHandleMonitorEOF).
  std::chrono::milliseconds event_monitor_grace{2000};
};

class CloudHypervisorDriver final : public launcher::Driver {
 public:
  CloudHypervisorDriver(boost::asio::io_context& io, ChDriverOptions options, vmm_api::VmConfig config);
  ~CloudHypervisorDriver() override;

  [[nodiscard]] std::string hypervisor() const override { return "cloud-hypervisor"; }

  common::Status launch(EventSink sink, ExitHandler on_exit) override;
  void request_stop(events::StopRequest kind) override { tracker_.on_stop_requested(kind); }
  void kill_vmm() override;
  [[nodiscard]] events::DomainState state() const override { return tracker_.state(); }
  [[nodiscard]] events::StateReason reason() const override { return tracker_.reason(); }
  [[nodiscard]] bool finished() const override;
  [[nodiscard]] nlohmann::json vmm_identity() const override;

  common::Result<std::optional<std::string>> create_and_boot() override;
  common::Status pause() override;
  common::Status resume() override;
  common::Status reboot() override;
  common::Status acpi_reboot() override;
  common::Status power_button() override;
  common::Status force_off() override;
  common::Result<nlohmann::json> info() override;
  common::Result<std::optional<std::string>> console_pty() override;
  common::Result<nlohmann::json> counters() override;
  common::Status snapshot(const std::filesystem::path& dir) override;
  common::Status restore(const std::filesystem::path& dir) override;
  common::Result<nlohmann::json> add_disk(const nlohmann::json& disk) override;
  common::Status remove_device(const std::string& id) override;
  common::Result<nlohmann::json> add_host_device(const std::string& id, const std::string& path) override;
  common::Status resize(std::optional<std::uint32_t> vcpus, std::optional<std::uint64_t> memory_bytes) override;
  common::Status send_migration(const launcher::MigrationSend& m) override;
  common::Status receive_migration(const std::string& receiver) override;

  [[nodiscard]] const events::DomainStateTracker& tracker() const { return tracker_; }

 private:
  void read_events();
  void watch_exit();
  void on_bytes(std::string_view bytes);
  void drain_events();
  void on_exit();
  void on_event_monitor_closed(const boost::system::error_code& ec);
  [[nodiscard]] bool vmm_dead() const;  // exited (reaped or a zombie not reaped yet)
  // Worker thread, after a refused or broken API call: whether the VM is ending or gone (the
  // VMM exiting, or no longer reporting a running VM), and then the call is done: nothing is
  // left for it to act on. A timeout is no such sign (a hung VMM is not an ending one).
  [[nodiscard]] bool vmm_going() const;
  [[nodiscard]] bool vm_ending();
  common::Status unless_ending(common::Status r, std::string_view what);
  void learn_version();  // vmm.ping after boot or restore, on the API worker
  void deliver(const std::vector<events::DomainEvent>& evs);
  // isolateEmulatorThread: put the VMM's non-vCPU threads back on the emulator CPUs (after boot,
  // after a hotplug); a no-op when not isolated.
  common::Status keep_threads_isolated(std::string_view after);
  // vCPU i's dedicated CPU, from cpus.affinity.
  [[nodiscard]] std::vector<std::uint32_t> vcpu_cpus() const;

  boost::asio::io_context& io_;
  ChDriverOptions opts_;
  vmm_api::VmConfig config_;
  vmm_api::Client client_;
  std::optional<VmmProcess> vmm_;
  std::optional<boost::asio::posix::stream_descriptor> events_;
  std::optional<boost::asio::posix::stream_descriptor> pidfd_;
  boost::asio::steady_timer monitor_timer_;  // event_monitor_grace after the stream closed
  common::UniqueFd event_copy_;   // events.log: the raw stream, for post-mortems
  std::uint64_t event_copy_bytes_ = 0;
  events::EventStreamParser parser_;
  events::DomainStateTracker tracker_;
  EventSink sink_;
  ExitHandler on_exit_;
  char buf_[8192];
  // The VMM's build version from vmm.ping, set on the API worker, read on the event loop.
  mutable std::mutex version_mutex_;
  std::string version_;
  bool killed_by_us_ = false;  // kill_vmm() sent SIGKILL to a live VMM
  // Set by launch(), read by the worker thread (vmm_going) without touching the ChildProcess
  // that the io thread reaps.
  pid_t vmm_pid_ = -1;
  int vmm_pidfd_ = -1;
};

}  // namespace chl::cloud_hypervisor

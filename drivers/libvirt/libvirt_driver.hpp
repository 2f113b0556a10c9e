#pragma once
// QEMU/KVM through libvirt behind the Driver interface (driver.hpp), held to the same contract
// as CloudHypervisorDriver: the same domain events, console, stop logic and exit codes.
//
// - The domain is transient (virDomainCreateXML, with AUTODESTROY: if the launcher dies, libvirtd
//   destroys it). It is started paused; the driver opens the console PTY from the live XML and
//   keeps it open (so QEMU's pty chardev sees a reader and the guest's first lines are kept for
//   the console bridge, instead of being dropped), then resumes.
// - libvirt's events arrive on a LibvirtEventLoop thread and are posted to the io_context,
//   where LibvirtEventTracker turns them into domain events.
// - kill_vmm() sends SIGKILL to QEMU itself (non-blocking, like the CH driver) through a pidfd
//   opened on the pid libvirt recorded and verified then (its command line names our domain);
//   libvirt then reports the stop. The same pidfd tells the driver when QEMU is gone: if libvirt
//   has not reported the stop kQemuGoneEventWait later (a destroy stuck behind a job, a daemon
//   that stopped answering), the driver ends the domain itself (launcher/qemu-exited).
//   force_off() is virDomainDestroyFlags(0): SIGTERM, SIGKILL after libvirt's own 10 s.
// - The driver may own the libvirt daemons it talks to (libvirt_daemon.hpp): they are released
//   after the domain is gone, when the driver is destroyed (what the libvirt module does).
// - Live migration (migration.cpp): virDomainMigrateToURI3 with KubeVirt's flags and parameters
//   between the two pods' own daemons; the target adopts the domain libvirt creates. A domain
//   that may migrate is created without AUTODESTROY (driver_options.hpp).
// - The guest agent: libvirt holds its channel; agent_transport() carries commands through
//   virDomainQemuAgentCommand and libvirt's agent lifecycle event (agent_transport.hpp).
// - Snapshot, restore and hotplug answer "not supported by qemu-kvm" (not wired yet).
#include <sys/types.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>

#include "common/unique_fd.hpp"
#include "drivers/libvirt/accel_probe.hpp"
#include "drivers/libvirt/agent_transport.hpp"
#include "drivers/libvirt/daemon.hpp"
#include "drivers/libvirt/driver_options.hpp"
#include "drivers/libvirt/event_loop.hpp"
#include "drivers/libvirt/events.hpp"
#include "drivers/libvirt/handles.hpp"
#include "launcher/driver.hpp"

namespace chl::libvirt {

class LibvirtDriver final : public launcher::Driver {
 public:
  LibvirtDriver(boost::asio::io_context& io, LibvirtDriverOptions options,
                std::optional<LibvirtDaemons> daemons = std::nullopt);
  ~LibvirtDriver() override;

  [[nodiscard]] std::string hypervisor() const override { return "qemu-kvm"; }

  common::Status launch(EventSink sink, ExitHandler on_exit) override;
  void request_stop(events::StopRequest kind) override { tracker_.on_stop_requested(kind); }
  void kill_vmm() override;
  void abandon() override;
  [[nodiscard]] events::DomainState state() const override { return tracker_.state(); }
  [[nodiscard]] events::StateReason reason() const override { return tracker_.reason(); }
  [[nodiscard]] bool finished() const override {
    return tracker_.finished() || start_failed_.load();
  }
  [[nodiscard]] nlohmann::json vmm_identity() const override;
  // The guest agent through libvirt (agent_transport.hpp).
  [[nodiscard]] std::shared_ptr<guest_agent::CommandTransport> agent_transport() override {
    return agent_;
  }

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
  common::Status resize(std::optional<std::uint32_t> vcpus, std::optional<std::uint64_t> memory_bytes) override;
  // Live migration as KubeVirt's virt-launcher does it (migration.cpp).
  common::Status send_migration(const launcher::MigrationSend& m) override;
  common::Status receive_migration(const std::string& receiver) override;
  common::Status abort_migration() override;

  // What libvirt's callbacks post (public for the C callbacks; io thread only).
  void on_lifecycle(int event, int detail);
  void on_reboot();
  void on_connection_closed(int reason);
  void on_agent_lifecycle(int state);
  // How long QEMU may be gone before libvirt's Stopped event is given up on.
  static constexpr std::chrono::seconds kQemuGoneEventWait{3};

  // Shared with the callbacks: they find the driver through it while it lives.
  struct Link {
    std::mutex mu;
    LibvirtDriver* driver = nullptr;
    boost::asio::io_context* io = nullptr;
    std::string name;
  };

 private:
  void deliver(const std::vector<events::DomainEvent>& evs);
  common::Status connect();
  common::Result<std::optional<std::string>> pty_from_live_xml();
  common::Result<std::string> live_xml();
  common::Status resize_memory(std::uint64_t bytes);
  void cleanup();
  pid_t read_qemu_pid() const;
  // Open a pidfd on QEMU's pid and keep it if the process is ours (worker thread, at start).
  void take_qemu_pidfd(pid_t pid);
  void watch_qemu();  // io thread
  void on_qemu_gone();
  void await_qemu_gone_report();  // gone_timer_: libvirt's Stopped, or the end said without it
  common::Status need_domain() const;
  // A domain of our name found at start may be destroyed: it records our state directory, or
  // one no live launcher holds. Fails, naming why, for another live launcher's domain or one
  // without ch-launcher's metadata.
  common::Status check_stale_domain(virDomainPtr old) const;

  // First member, so destroyed last: the daemons are released once the domain and the
  // connection are gone.
  std::optional<LibvirtDaemons> daemons_;
  boost::asio::io_context& io_;
  LibvirtDriverOptions opts_;
  std::shared_ptr<Link> link_;
  LibvirtEventLoop loop_;
  VirConnect conn_;
  VirDomain dom_;
  std::vector<int> callbacks_;
  bool close_cb_ = false;
  common::UniqueFd pty_hold_;  // the console PTY kept open: QEMU writes only while a reader exists
  LibvirtEventTracker tracker_;
  // Made with the driver (its thread starts before the launcher confines itself).
  std::shared_ptr<LibvirtAgentTransport> agent_;
  EventSink sink_;
  ExitHandler on_exit_;
  bool exit_reported_ = false;
  std::atomic<bool> start_failed_{false};
  std::atomic<pid_t> qemu_pid_{-1};
  common::UniqueFd qemu_pidfd_;  // guarded by id_mu_: the verified QEMU
  std::optional<boost::asio::posix::stream_descriptor> qemu_watch_;
  boost::asio::steady_timer gone_timer_;
  // libvirt stopped answering (QEMU ended without its event): the exit makes no more libvirt
  // calls, which would wait for ever (the client library has no call timeout).
  bool libvirt_silent_ = false;
  mutable std::mutex id_mu_;
  std::string qemu_version_;
  // Live migration (migration.cpp): an outgoing one under way (abort_migration may then use
  // dom_ from another thread); a receive given up (the launcher ends).
  std::atomic<bool> migrating_out_{false};
  std::atomic<bool> migrated_out_{false};  // virDomainMigrateToURI3 succeeded: the VM left
  // The outgoing migration's own connection, for the monitor's job stats and every abort: a call
  // sent on conn_ while virDomainMigrateToURI3 holds that client's I/O was seen never to reach
  // libvirtd (migration.cpp). Set for the duration of send_migration, under side_mu_.
  std::mutex side_mu_;
  VirConnect side_conn_;
  VirDomain side_dom_;
  std::atomic<bool> stop_receiving_{false};
  // Open the console PTY and keep it open (create_and_boot, receive_migration).
  common::Result<std::optional<std::string>> hold_console();
};

}  // namespace chl::libvirt

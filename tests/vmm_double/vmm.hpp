#pragma once
// The double's VMM: Cloud Hypervisor's API state machine (vmm/src/lib.rs RequestHandler and
// vm.rs VmState transitions) plus a pretend guest behind the serial line. Single-threaded:
// one poll loop over the API socket and its connections, the serial PTY, the event monitor,
// a signalfd (SIGTERM/SIGINT) and timers.
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"
#include "tests/vmm_double/cli.hpp"
#include "tests/vmm_double/config_schema.hpp"
#include "tests/vmm_double/event_monitor.hpp"
#include "tests/vmm_double/faults.hpp"
#include "tests/vmm_double/http_server.hpp"
#include "tests/vmm_double/migration.hpp"
#include "tests/vmm_double/hybrid_vsock.hpp"
#include "tests/vmm_double/serial_port.hpp"
#include "tests/vmm_double/tap_device.hpp"
#include "tests/vmm_double/vcpu_threads.hpp"
#include "tests/vmm_double/vfio.hpp"
#include "tests/vmm_double/vhost_user.hpp"

namespace chl::vmm_double {

enum class VmState { Created, Running, Shutdown, Paused, BreakPoint };
const char* to_string(VmState s);

// An API answer: HTTP status and body; `hold` keeps the request unanswered for now.
struct Reply {
  int status = 204;
  std::string body;
  bool hold = false;
};

class Vmm final : private MigrationVm {
 public:
  Vmm(CliOptions opts, Faults faults);
  // Runs until vmm.shutdown, guest power-off or SIGTERM/SIGINT; returns the exit code.
  int run();

 private:
  using Clock = std::chrono::steady_clock;
  struct Timer {
    Clock::time_point when;
    std::uint64_t generation;  // guest generation it belongs to (0: always fires)
    std::function<void()> fn;
  };

  // --- API ---
  void serve(HttpRequest& req);
  Reply dispatch(HttpRequest& req, const std::string& endpoint);
  Reply api_error(const std::string& endpoint, std::vector<std::string> chain) const;

  Reply vm_create(const Json& config);
  Reply vm_boot(std::uint64_t conn);
  Reply vm_pause();
  Reply vm_resume();
  Reply vm_shutdown();
  Reply vm_reboot();
  Reply vm_power_button();
  Reply vm_delete();
  Reply vm_info() const;
  Reply vm_counters() const;
  Reply vmm_ping() const;
  Reply vm_add(const std::string& endpoint, const Json& cfg, std::vector<common::UniqueFd>& fds);
  Reply vm_remove_device(const Json& body);
  Reply vm_resize(const Json& body);
  Reply vm_snapshot(const Json& body);
  Reply vm_restore(const Json& body);

  // --- CH internals the endpoints share ---
  // VmConfig::validate: bootable payload, vCPU counts, unique ids. Empty when fine. CH runs it at
  // boot and on every device add (on a copy with the device added, so a VM created without a
  // payload refuses cold adds).
  static std::vector<std::string> validate_config(const Json& cfg);
  // Vm::new + boot checks: validate_config, disks, payload files. Empty when fine.
  std::vector<std::string> check_bootable();
  // DeviceManager::make_virtio_net_device (devices.cpp): the taps of one net config opened as
  // CH v52 opens them (tap_device.hpp), kept in net_devices_ while the VM lives; `fds_key` is
  // where its SCM_RIGHTS fds are in net_fds_. CH's chain below "Error from device manager".
  std::vector<std::string> open_net_device(Json& net, const std::string& fds_key);
  std::vector<std::string> open_net_devices();
  // block/src/factory.rs open_disk: read, write unless readonly, O_DIRECT with `direct`; the
  // file is kept (disk_files_) for CH's advisory lock. CH's chain below "Error from API".
  std::vector<std::string> open_disk(const Json& disk);
  // DeviceManager::try_lock_disks at Vm::boot / restore (devices.cpp): an OFD lock per disk,
  // per lock_granularity; the tail below "Cannot lock images of all block devices".
  std::vector<std::string> lock_disk(std::size_t index);
  std::vector<std::string> lock_disks();
  // DeviceManager::make_virtio_pmem_device's file checks (devices.cpp).
  static std::vector<std::string> open_pmem(const Json& pmem);
  // pre_create_console_devices: open serial/console per config (a new PTY each time).
  std::vector<std::string> open_consoles();
  void close_consoles();
  // The vsock device (config.vsock), created with the VM: hybrid_vsock.hpp. Empty when fine.
  std::vector<std::string> open_vsock();
  void assign_device_ids();
  std::string next_device_name(const std::string& prefix);
  std::string allocate_bdf(const std::string& id);
  bool vm_shutdown_internal();  // CH vm_shutdown(): true when a VM was shut down
  void vm_delete_internal();
  void vmm_shutdown_and_exit(int code);
  // At exit: what CH's HTTP thread answers the requests its ended VMM thread never took.
  void answer_after_vmm_thread();
  void enter_state(VmState s);

  // --- the pretend guest ---
  void guest_start(bool banner);
  void guest_stop();
  void guest_input(const std::string& bytes);
  void guest_line(const std::string& line);
  void guest_poweroff();
  void guest_reboot();
  void guest_panic();
  void guest_power_button();
  void guest_pci_eject();
  [[nodiscard]] bool cmdline_has(const std::string& word) const;

  // --- loop plumbing ---
  void schedule(std::chrono::milliseconds after, std::function<void()> fn, bool guest_bound);
  void run_timers();
  void crash(const std::string& phase) const;
  void quit_without_events(const std::string& phase);
  void close_events(const std::string& phase);
  void log(int level, const std::string& msg) const;

  // --- live migration (vmm_migration.cpp; the protocol in migration.hpp) ---
  Reply vm_send_migration(const Json& body, std::uint64_t conn);
  Reply vm_receive_migration(const Json& body, std::uint64_t conn);
  void migration_event(const std::string& event) override;
  void migration_event(const std::string& event,
                       const std::map<std::string, std::string>& properties) override;
  Json migration_config() override;
  std::uint64_t guest_ram() override;
  std::uint64_t dirty_bytes() override;
  bool pause_for_migration() override;
  Json guest_snapshot() override;
  void send_finished(const std::vector<std::string>& chain) override;
  std::vector<std::string> receive_config(const Json& migration_config) override;
  std::vector<std::string> receive_state(const Json& snapshot) override;
  std::vector<std::string> receive_complete(bool resume) override;
  void receive_finished(bool aborted, const std::vector<std::string>& chain) override;
  void migration_answer(int status, const std::string& body);

  CliOptions opts_;
  Faults faults_;
  EventMonitor events_;
  HttpServer http_;
  common::UniqueFd signal_fd_;
  common::UniqueFd log_fd_;

  std::optional<Json> config_;  // CH: vm_config
  VcpuThreads vcpus_;           // CH: CpuManager's vCPU threads, "vcpu<N>" (vcpu_threads.hpp)
  VfioModel vfio_{faults_.vfio_root};  // CH: DeviceManager's VFIO container and groups
  bool vm_ = false;             // CH: vm.is_some()
  VmState state_ = VmState::Created;
  std::optional<SerialPort> serial_;
  std::optional<SerialPort> console_;
  std::unique_ptr<HybridVsock> vsock_;
  // The device tree: device id -> bdf. vm.remove-device leaves its node in place; CH removes it
  // when the guest ejects the device (guest_pci_eject), which a guest without the note saying
  // so never does.
  std::map<std::string, std::string> bdfs_;
  std::map<std::string, std::vector<common::UniqueFd>> net_fds_;  // by id, or "#<index>" before one
  // Tap files, per net device, while a VM exists.
  std::map<std::string, OpenedTaps> net_devices_;
  // virtio-fs devices' vhost-user connections (socket -> session), held while the VM exists.
  std::map<std::string, VhostUserSession> vhost_user_;
  struct DiskFile {
    common::UniqueFd fd;
    std::string path;
    bool readonly = false;
    bool byte_range = true;  // lock_granularity ByteRange (CH's default) or Full
  };
  // CH's open disk images while a VM exists (their locks with them).
  std::vector<DiskFile> disk_files_;
  unsigned device_counter_ = 0;

  // guest
  std::uint64_t guest_gen_ = 0;  // bumps on every guest start/stop; stale timers skip
  bool guest_running_ = false;
  bool guest_halted_ = false;
  std::uint64_t hotplugged_ram_ = 0;  // ACPI memory hotplug so far (CH: within hotplug_size)
  bool power_button_pending_ = false;
  bool ignore_acpi_ = false;  // the word ignore-acpi, on the command line or typed
  bool no_eject_ = false;     // the word no-eject: the PVH guest ejects no PCI device
  bool ged_reachable_ =
      false;  // the guest maps CH's GED register (acpi_ged.hpp); else the button is never seen
  // The guest ejects a PCI device CH asks it to remove (its note says so, and it maps the GED
  // and the PCI hotplug registers); else removed devices keep their device-tree nodes.
  bool guest_ejects_ = false;
  struct Unplug {
    std::string id;
    std::string disk_path;  // a disk's image: closed (its lock released) when the device goes
  };
  std::vector<Unplug> unplug_pending_;  // removed, not yet ejected (the guest paused…)
  std::string guest_line_;
  unsigned heartbeat_ = 0;

  std::vector<Timer> timers_;
  std::optional<std::uint64_t> held_conn_;  // API blocked behind this request
  bool tearing_down_ = false;  // a guest power-off being handled: the API waits (no request taken)
  std::unique_ptr<Migration> migration_;    // a send or receive in progress (API held)
  std::uint64_t migration_conn_ = 0;
  bool migration_was_running_ = false;
  unsigned dirty_heartbeat_ = 0;            // the heartbeat the last dirty log saw
  std::optional<int> exit_code_;
};

}  // namespace chl::vmm_double

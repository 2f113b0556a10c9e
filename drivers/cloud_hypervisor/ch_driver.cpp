#include "drivers/cloud_hypervisor/ch_driver.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "common/log.hpp"
#include "common/proc_stat.hpp"
#include "common/syscall.hpp"
#include "common/thread_affinity.hpp"
#include "drivers/cloud_hypervisor/thread_isolation.hpp"
#include "drivers/cloud_hypervisor/vcpu_realtime.hpp"
#include "vmm_api/error.hpp"

namespace chl::cloud_hypervisor {
namespace asio = boost::asio;
using common::fail;
using common::Result;
using common::Status;
using nlohmann::json;

namespace {
constexpr std::uint64_t kEventCopyLimit = 4 << 20;  // events.log cap

std::string file_url(const std::filesystem::path& dir) { return "file://" + dir.string(); }
}  // namespace

CloudHypervisorDriver::CloudHypervisorDriver(asio::io_context& io, ChDriverOptions options, vmm_api::VmConfig config)
    : io_(io),
      opts_(std::move(options)),
      config_(std::move(config)),
      client_((opts_.state_dir / "ch-api.sock").string(), opts_.client),
      monitor_timer_(io) {}

CloudHypervisorDriver::~CloudHypervisorDriver() {
  boost::system::error_code ec;
  if (events_) events_->close(ec);
  if (pidfd_) {
    (void)pidfd_->release();  // owned by ChildProcess
  }
  // ChildProcess kills and reaps a VMM still running.
}

Status CloudHypervisorDriver::launch(EventSink sink, ExitHandler on_exit) {
  sink_ = std::move(sink);
  on_exit_ = std::move(on_exit);
  VmmStartOptions so;
  so.binary = opts_.vmm_binary;
  so.api_socket = opts_.state_dir / "ch-api.sock";
  so.log_file = opts_.state_dir / "vmm.log";
  so.seccomp = opts_.seccomp;
  so.verbosity = opts_.verbosity;
  so.cpu_affinity = opts_.emulator_cpus;
  CHL_TRY(auto vmm, start_vmm(so));
  vmm_.emplace(std::move(vmm));
  vmm_pid_ = vmm_->child.pid();
  vmm_pidfd_ = vmm_->child.pidfd();
  if (!opts_.emulator_cpus.empty()) {
    // The launcher is one of the non-vCPU threads too (KubeVirt moves virt-launcher's threads
    // into its housekeeping cpuset with QEMU's: pkg/hypervisor/kvm/runtime.go
    // configureHousekeepingCgroup); threads it starts later inherit the set.
    CHL_TRY(auto moved, common::wrap(pin_non_vcpu_threads(::getpid(), opts_.emulator_cpus),
                                     "isolateEmulatorThread: the launcher's own threads"));
    CHL_LOG_INFO("isolateEmulatorThread: the VMM and {} launcher threads on CPUs {}", moved,
                 common::format_cpu_list(opts_.emulator_cpus));
  }
  if (opts_.on_vmm_started) opts_.on_vmm_started(vmm_->child.pid());
  event_copy_.reset(::open((opts_.state_dir / "events.log").c_str(),
                           O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  events_.emplace(io_, vmm_->events.release());
  int dup = ::fcntl(vmm_->child.pidfd(), F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return common::fail_errno("dup pidfd");
  pidfd_.emplace(io_, dup);
  read_events();
  watch_exit();
  return {};
}

void CloudHypervisorDriver::read_events() {
  events_->async_read_some(asio::buffer(buf_), [this](boost::system::error_code ec, std::size_t n) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) {
      // EOF: the VMM closed the stream (it is exiting, or it broke).
      parser_.finish();
      on_event_monitor_closed(ec);
      return;
    }
    on_bytes(std::string_view(buf_, n));
    read_events();
  });
}

void CloudHypervisorDriver::on_bytes(std::string_view bytes) {
  if (event_copy_ && event_copy_bytes_ < kEventCopyLimit) {
    (void)!::write(event_copy_.get(), bytes.data(), bytes.size());
    event_copy_bytes_ += bytes.size();
  }
  parser_.feed(bytes, [this](events::VmmEvent&& e) {
    CHL_LOG_DEBUG("vmm event {}", e.key());
    deliver(tracker_.on_vmm_event(e));
  });
}

// A VMM that is exiting closes the stream just before its exit is seen on the pidfd: give it
// event_monitor_grace. One still alive then has lost its monitor (or broke it): the launcher can
// no longer see pauses, power-offs or panics, so it does not keep running blind — it reports the
// loss to the tracker (Shutoff/Failed unless a stop was already under way) and ends the VMM.
void CloudHypervisorDriver::on_event_monitor_closed(const boost::system::error_code& ec) {
  if (vmm_dead()) return;  // the pidfd reports it
  const std::string why = ec == asio::error::eof ? std::string("end of stream") : ec.message();
  CHL_LOG_WARN("event monitor of VMM pid {} closed ({}); waiting {} ms for the VMM to exit", vmm_->child.pid(), why,
               opts_.event_monitor_grace.count());
  monitor_timer_.expires_after(opts_.event_monitor_grace);
  monitor_timer_.async_wait([this](boost::system::error_code tec) {
    if (tec || vmm_dead()) return;
    CHL_LOG_ERROR("the event monitor closed while VMM pid {} still runs: the launcher cannot follow the VM; "
                  "ending the VMM", vmm_->child.pid());
    deliver(tracker_.on_event_monitor_lost());
    kill_vmm();
  });
}

bool CloudHypervisorDriver::vmm_dead() const {
  if (!vmm_ || vmm_->child.exit_status().has_value()) return true;
  siginfo_t si{};
  if (::waitid(P_PID, static_cast<id_t>(vmm_->child.pid()), &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid != 0)
    return true;
  // A VMM that broke our API call by dying closes its sockets in do_exit(), before waitid() can
  // see it exited: its PF_EXITING flag already says it is on its way out.
  return common::process_exiting(vmm_->child.pid());
}

// Read what is left in the pipe, synchronously: the VMM has exited, so this cannot block long.
void CloudHypervisorDriver::drain_events() {
  if (!events_ || !events_->is_open()) return;
  for (;;) {
    ssize_t n = common::retry_eintr([&] { return ::read(events_->native_handle(), buf_, sizeof buf_); });
    if (n <= 0) break;
    on_bytes(std::string_view(buf_, static_cast<std::size_t>(n)));
  }
}

void CloudHypervisorDriver::watch_exit() {
  pidfd_->async_wait(asio::posix::stream_descriptor::wait_read, [this](boost::system::error_code ec) {
    if (ec == asio::error::operation_aborted) return;
    on_exit();
  });
}

void CloudHypervisorDriver::on_exit() {
  auto st = vmm_->child.try_wait();
  if (!st || !st->has_value()) {
    watch_exit();  // spurious
    return;
  }
  // Everything the VMM wrote before dying is processed before its death.
  drain_events();
  boost::system::error_code ec;
  events_->cancel(ec);
  monitor_timer_.cancel();
  const common::ExitStatus& es = **st;
  CHL_LOG_INFO("VMM pid {} ended: {}", vmm_->child.pid(), es.describe());
  events::VmmExit exit;
  exit.signaled = !es.exited;
  exit.code = es.exited ? es.code : es.signal;
  exit.died_on_its_own = !es.exited && !killed_by_us_;
  deliver(tracker_.on_vmm_exited(exit));
  ::unlink((opts_.state_dir / "ch-api.sock").c_str());
  if (on_exit_) on_exit_();
}

void CloudHypervisorDriver::deliver(const std::vector<events::DomainEvent>& evs) {
  for (const auto& e : evs) {
    if (sink_) sink_(e);
  }
}

void CloudHypervisorDriver::kill_vmm() {
  if (!vmm_ || !vmm_->child.running()) return;
  // A VMM that already died (a zombie not reaped yet) was not killed by us: its exit must still
  // read as a crash. WNOWAIT leaves it for on_exit() to reap.
  if (vmm_dead()) {
    CHL_LOG_WARN("VMM pid {} already ended; not killing it", vmm_->child.pid());
    return;
  }
  CHL_LOG_WARN("killing VMM pid {}", vmm_->child.pid());
  killed_by_us_ = true;
  (void)vmm_->child.signal(SIGKILL);
}

bool CloudHypervisorDriver::finished() const {
  return !vmm_ || vmm_->child.exit_status().has_value();
}

json CloudHypervisorDriver::vmm_identity() const {
  std::string version;
  {
    std::lock_guard lock(version_mutex_);
    version = version_;
  }
  json j = {{"binary", opts_.vmm_binary}, {"version", version}};
  if (vmm_) j["pid"] = vmm_->child.pid();
  if (vmm_ && !opts_.emulator_cpus.empty() && vmm_->child.running()) {
    // Read now, from /proc: where every VMM thread may run, against where it should.
    auto threads = common::read_thread_affinities(vmm_->child.pid());
    j["cpu_isolation"] = threads ? isolation_report(*threads, vcpu_cpus(), opts_.emulator_cpus)
                                 : json{{"error", threads.error().message()}, {"isolated", false}};
  }
  if (vmm_ && opts_.realtime && vmm_->child.running())
    j["realtime"] = realtime_report(vmm_->child.pid(), opts_.realtime_vcpus, opts_.realtime_priority);
  return j;
}

Result<std::optional<std::string>> CloudHypervisorDriver::create_and_boot() {
  CHL_TRY_VOID(common::wrap(client_.vm_create(config_), "creating the VM"));
  CHL_TRY(auto info, common::wrap(client_.vm_info(), "reading the created VM"));
  if (info.state != vmm_api::VmState::Created)
    return fail(std::errc::protocol_error, "creating the VM: VMM reports state " + std::string(vmm_api::to_string(info.state)) + ", expected Created");
  std::optional<std::string> pty;
  if (info.config.serial && info.config.serial->mode == vmm_api::ConsoleMode::Pty) pty = info.config.serial->file;
  for (const auto& net : opts_.nets) {
    const std::string id = net.config.id.value_or("net");
    CHL_TRY(auto added, common::wrap(client_.vm_add_net(net.config, net.fds), "attaching the pod network tap " + id));
    (void)added;
  }
  CHL_TRY_VOID(common::wrap(client_.vm_boot(), "booting the VM"));
  CHL_TRY_VOID(keep_threads_isolated("boot"));
  if (opts_.realtime && vmm_) {
    CHL_TRY_VOID(make_vcpus_realtime(vmm_->child.pid(), opts_.realtime_vcpus, opts_.realtime_priority));
    CHL_LOG_INFO("realtime: vCPUs {} SCHED_FIFO priority {}", common::format_cpu_list(opts_.realtime_vcpus),
                 opts_.realtime_priority);
  }
  learn_version();
  return pty;
}

std::vector<std::uint32_t> CloudHypervisorDriver::vcpu_cpus() const {
  std::vector<std::uint32_t> out;
  if (!config_.cpus || !config_.cpus->affinity) return out;
  for (const auto& a : *config_.cpus->affinity) {
    if (a.host_cpus.size() != 1) continue;
    if (out.size() <= a.vcpu) out.resize(a.vcpu + 1, 0);
    out[a.vcpu] = a.host_cpus[0];
  }
  return out;
}

Status CloudHypervisorDriver::keep_threads_isolated(std::string_view after) {
  if (opts_.emulator_cpus.empty() || !vmm_) return {};
  const std::string what = "isolateEmulatorThread after " + std::string(after);
  CHL_TRY(auto moved, common::wrap(pin_non_vcpu_threads(vmm_->child.pid(), opts_.emulator_cpus), what));
  if (moved) {
    CHL_LOG_INFO("isolateEmulatorThread: {} VMM threads put back on CPUs {} after {}", moved,
                 common::format_cpu_list(opts_.emulator_cpus), after);
  }
  // Then every thread where it should be (on the API worker, never the event loop): the vCPU
  // threads move themselves as they start, so they are given a moment; one that cannot (a CPU
  // outside the pod's set) has ended, and the VM is not claimed to run as asked.
  json report;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    auto threads = common::read_thread_affinities(vmm_->child.pid());
    report = threads ? isolation_report(*threads, vcpu_cpus(), opts_.emulator_cpus)
                     : json{{"isolated", false}, {"problems", {threads.error().message()}}};
    if (report.value("isolated", false)) return {};
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string problems;
  for (const auto& p : report.value("problems", json::array()))
    problems += (problems.empty() ? "" : "; ") + p.get<std::string>();
  return fail(std::errc::operation_canceled, what + ": the VMM's threads are not where they must be: " + problems);
}

void CloudHypervisorDriver::learn_version() {
  // From the running VMM's vmm.ping (microseconds on the API socket), not from a `--version`
  // child before the start (a process spawn on the launch path). Informative only.
  auto ping = client_.vmm_ping();
  if (!ping) {
    CHL_LOG_DEBUG("vmm.ping: {}", ping.error().message());
    return;
  }
  std::lock_guard lock(version_mutex_);
  version_ = ping->build_version.value_or(ping->version);
}

Status CloudHypervisorDriver::pause() { return client_.vm_pause(); }
Status CloudHypervisorDriver::resume() { return client_.vm_resume(); }
Status CloudHypervisorDriver::reboot() { return client_.vm_reboot(); }
// Cloud Hypervisor v52 has no ACPI reboot: its API (vmm/src/api/openapi/cloud-hypervisor.yaml)
// has vm.reboot (the VMM resets the VM) and vm.power-button (the ACPI power button, which a
// guest takes as a power-off). So the soft reboot without an agent is vm.reboot here
// (docs/guest-agent.md).
Status CloudHypervisorDriver::acpi_reboot() { return client_.vm_reboot(); }
// The power button of a VM that is already powering off, or gone, has nothing to press: success,
// as libvirt's driver answers (libvirt_driver.cpp) and KubeVirt's SignalShutdownVMI treats a
// domain that is not running (pkg/virt-launcher/virtwrap/manager.go:2158-2166, 2176-2192).
Status CloudHypervisorDriver::power_button() { return unless_ending(client_.vm_power_button(), "vm.power-button"); }

Status CloudHypervisorDriver::force_off() {
  // Each step is tried even if the previous one failed: the goal is a VMM that is gone. One that
  // is ending on its own already (a guest power-off under way) is that goal too.
  auto vm = client_.vm_shutdown();
  if (!vm) CHL_LOG_WARN("vm.shutdown: {}", vm.error().message());
  auto vmm = unless_ending(client_.vmm_shutdown(), "vmm.shutdown");
  if (!vmm) return tl::unexpected(vmm.error().wrap("ending the VMM"));
  return {};
}

// Cloud Hypervisor v52 while a VM ends (guest power-off, vmm.shutdown, SIGTERM): the control loop
// runs vmm_shutdown (the VM torn down, then vm/shutdown, vm/deleted, vmm/shutdown) and breaks out
// (vmm/src/lib.rs:1708-1731), the VMM thread returns and drops its API receiver with whatever
// request was queued, and the HTTP thread answers until main() has joined the VMM thread and
// shut it down (cloud-hypervisor/src/main.rs:764-772). A call in that window gets
//   500 ["Error from API","API response receive error","receiving on a closed channel"]: queued
//       while the VM was torn down, its answer channel dropped (vmm/src/api/mod.rs:617-620);
//   500 ["Error from API","API request send error","sending on a closed channel"]: sent after;
//   500 [...,"VM is not running"] / [...,"VM is not created"]: the VM shut down or deleted while
//       the VMM lives on (vmm/src/lib.rs:2486-2492, vm.rs:189-199);
//   no answer: the connection closed under it, refused, or no socket once the VMM has exited.
// Which one is a matter of microseconds, and the driver's own "VM stopped" event follows a moment
// later on the io thread. What they share is that the VM no longer runs: so after a failed call
// the driver asks that, of the process and of the VMM, rather than reading CH's words.
bool CloudHypervisorDriver::vmm_going() const {
  if (vmm_pidfd_ < 0) return true;
  pollfd p{vmm_pidfd_, POLLIN, 0};
  if (::poll(&p, 1, 0) > 0) return true;  // exited (a pidfd stays readable once reaped)
  return common::process_exiting(vmm_pid_);  // closing its sockets in do_exit()
}

bool CloudHypervisorDriver::vm_ending() {
  if (vmm_going()) return true;
  auto info = client_.vm_info();
  if (info) return info->state != vmm_api::VmState::Running && info->state != vmm_api::VmState::Paused;
  // CH answered but has no VM to report (not created, or its control loop has ended), or nobody
  // serves its API any more.
  if (vmm_api::http_status(info.error())) return true;
  const auto kind = vmm_api::api_errc(info.error());
  return kind == vmm_api::ApiErrc::socket_missing || kind == vmm_api::ApiErrc::connection_refused ||
         kind == vmm_api::ApiErrc::connection_closed;
}

Status CloudHypervisorDriver::unless_ending(Status r, std::string_view what) {
  if (r || vmm_api::is(r.error(), vmm_api::ApiErrc::timeout) || !vm_ending()) return r;
  CHL_LOG_INFO("{}: the VM is already ending, nothing to do (the VMM answered: {})", what, r.error().message());
  return {};
}

Result<json> CloudHypervisorDriver::info() {
  CHL_TRY(auto info, client_.vm_info());
  return json(info);
}

Result<std::optional<std::string>> CloudHypervisorDriver::console_pty() {
  CHL_TRY(auto info, client_.vm_info());
  if (info.config.serial && info.config.serial->mode == vmm_api::ConsoleMode::Pty) return info.config.serial->file;
  return std::optional<std::string>{};
}

Result<json> CloudHypervisorDriver::counters() {
  CHL_TRY(auto c, client_.vm_counters());
  return json(c);
}

Status CloudHypervisorDriver::snapshot(const std::filesystem::path& dir) {
  vmm_api::VmSnapshotConfig sc;
  sc.destination_url = file_url(dir);
  return client_.vm_snapshot(sc);
}

Status CloudHypervisorDriver::restore(const std::filesystem::path& dir) {
  vmm_api::RestoreConfig rc;
  rc.source_url = file_url(dir);
  CHL_TRY_VOID(client_.vm_restore(rc));
  learn_version();
  return {};
}

// CH v52 vm.send-migration / vm.receive-migration (vmm/src/lib.rs:2502-2640): both run on the
// VMM's control thread until the migration ends, so every other API call waits behind them;
// the client's migration budget (ClientOptions::migration_timeout) is set long by the caller.
Status CloudHypervisorDriver::send_migration(const launcher::MigrationSend& m) {
  vmm_api::SendMigrationData tx;
  tx.destination_url = m.destination;
  tx.connections = 1;  // unix: allows one connection only (VmSendMigrationData::validate)
  if (m.downtime_ms > 0) tx.downtime_ms = m.downtime_ms;
  if (m.timeout_s > 0) tx.timeout_s = m.timeout_s;
  tx.timeout_strategy = m.ignore_timeout ? "Ignore" : "Cancel";
  return client_.vm_send_migration(tx);
}

Status CloudHypervisorDriver::receive_migration(const std::string& receiver) {
  vmm_api::ReceiveMigrationData rx;
  rx.receiver_url = receiver;
  CHL_TRY_VOID(client_.vm_receive_migration(rx));
  // CH v52 answers 204 after an aborted receive too (migration-receive-failed): only a VM that
  // exists now was received.
  CHL_TRY(auto info, client_.vm_info());
  if (info.state != vmm_api::VmState::Running && info.state != vmm_api::VmState::Paused)
    return fail(std::errc::io_error, std::string("the incoming migration did not complete: the VM is ") + std::string(vmm_api::to_string(info.state)));
  learn_version();
  return {};
}

Result<json> CloudHypervisorDriver::add_disk(const json& disk) {
  auto parsed = vmm_api::from_json_value<vmm_api::DiskConfig>(disk, "disk");
  if (!parsed) return tl::unexpected(parsed.error());
  CHL_TRY(auto added, client_.vm_add_disk(*parsed));
  if (auto st = keep_threads_isolated("adding disk " + parsed->id.value_or("?")); !st)
    CHL_LOG_ERROR("{}", st.error().message());
  if (!added) return json::object();
  return json(*added);
}

// vm.add-device (CH v52 vmm/src/api/mod.rs VmAddDevice; DeviceConfig path and id, as the
// VFIO devices of vm.create in translate.cpp): on CH's error answer its chain is the error.
Result<json> CloudHypervisorDriver::add_host_device(const std::string& id, const std::string& path) {
  vmm_api::DeviceConfig d;
  d.path = path;
  d.id = id;
  CHL_TRY(auto added, client_.vm_add_device(d));
  if (auto st = keep_threads_isolated("adding host device " + id); !st)
    CHL_LOG_ERROR("{}", st.error().message());
  if (!added) return json::object();
  return json(*added);
}

Status CloudHypervisorDriver::remove_device(const std::string& id) {
  vmm_api::VmRemoveDevice rd;
  rd.id = id;
  return client_.vm_remove_device(rd);
}

Status CloudHypervisorDriver::resize(std::optional<std::uint32_t> vcpus, std::optional<std::uint64_t> memory_bytes) {
  if (memory_bytes) {
    // Cloud Hypervisor's ACPI memory hotplug adds regions of whole 128 MiB
    // (memory_manager.rs hotplug_ram_region): say so, rather than CH's "not a valid size".
    constexpr std::uint64_t kStep = 128ULL << 20;
    CHL_TRY(auto info, client_.vm_info());
    const std::uint64_t now = info.config.memory ? info.config.memory->size : 0;
    if (*memory_bytes > now && (*memory_bytes - now) % kStep != 0)
      return fail(std::errc::invalid_argument,
                  "memory hotplug: Cloud Hypervisor adds memory in steps of 128 MiB: " +
                      std::to_string((*memory_bytes - now) >> 20) + " MiB more (" + std::to_string(now >> 20) + " to " +
                      std::to_string(*memory_bytes >> 20) + " MiB) is not one");
  }
  vmm_api::VmResize r;
  r.desired_vcpus = vcpus;
  r.desired_ram = memory_bytes;
  return client_.vm_resize(r);
}

}  // namespace chl::cloud_hypervisor

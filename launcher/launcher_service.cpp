#include "launcher/launcher_service.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include "common/log.hpp"
#include "console_bridge/bridge.hpp"

namespace chl::launcher {
namespace asio = boost::asio;
using common::fail;
using common::Result;
using events::DomainState;
using nlohmann::json;

namespace {
// What a state error answers: the command socket maps this code to HTTP 409.
const std::error_code kWrongState = std::make_error_code(std::errc::operation_not_permitted);
}  // namespace

LauncherService::LauncherService(asio::io_context& io, ServiceOptions options, std::unique_ptr<Driver> driver)
    : io_(io),
      opts_(std::move(options)),
      driver_(std::move(driver)),
      waiters_(io),
      signals_(io, SIGTERM, SIGINT),
      grace_timer_(io),
      kill_timer_(io),
      exit_deadline_(io),
      terminate_timer_(io) {
  worker_guard_.emplace(worker_io_->get_executor());
  worker_ = std::thread([w = worker_io_.get()] { w->run(); });
}

LauncherService::~LauncherService() {
  {
    std::lock_guard lk(worker_link_->mu);
    worker_link_->alive = false;
  }
  worker_guard_.reset();
  worker_io_->stop();
  // A call in progress normally returns within milliseconds; give it a moment.
  for (int i = 0; i < 200 && worker_link_->busy.load(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (worker_link_->busy.load()) {
    // A driver call that never returned (a hypervisor that stopped answering; libvirt's client
    // has no call timeout): joining would wait for ever. The thread, its io_context and the
    // driver it is inside are left to the process's exit; the driver posts nothing more.
    CHL_LOG_ERROR("a {} call never returned: leaving it behind", driver_->hypervisor());
    driver_->abandon();
    worker_.detach();
    (void)worker_io_.release();
    (void)driver_.release();
    return;
  }
  if (worker_.joinable()) worker_.join();
}

int LauncherService::run() {
  started_at_ = std::chrono::steady_clock::now();
  // SIGPIPE is never wanted: a client that vanished is an error value, not a signal.
  ::signal(SIGPIPE, SIG_IGN);
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (ec) return;
    // Whatever state the VM is in, the launcher is gone by the grace period, the forced stop's
    // VMM exit timeout and the time to see the end (virt-launcher mode's hook included).
    bound_exit(opts_.grace_period + opts_.vmm_exit_timeout + opts_.end_report_timeout,
               sig == SIGTERM ? "SIGTERM" : "SIGINT");
    if (terminate_hook_) return terminate_hooked();
    CHL_LOG_INFO("received {}: stopping the VM (grace period {} s)",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT", opts_.grace_period.count());
    if (forced_) {
      driver_->kill_vmm();  // a forced stop is already under way: do not wait for it
    } else if (stopping_) {
      begin_forced_stop("second signal");
    } else {
      begin_graceful_stop(opts_.grace_period);
    }
    // Keep listening: a second signal forces the stop.
    signals_.async_wait([this](boost::system::error_code ec2, int) {
      if (ec2) return;
      if (forced_) driver_->kill_vmm();
      begin_forced_stop("second signal");
    });
  });

  if (auto st = start_console(); !st) {
    CHL_LOG_ERROR("console: {}", st.error().message());
    launch_failed_ = true;
    launch_error_ = "console: " + st.error().message();
    teardown();
    return kExitLaunchFailed;
  }
  if (auto st = driver_->launch([this](const events::DomainEvent& e) { on_domain_event(e); },
                                [this] { check_finished(); });
      !st) {
    launch_failed_ = true;
    launch_error_ = "starting the VMM: " + st.error().message();
    CHL_LOG_ERROR("{}", launch_error_);
    teardown();
    return kExitLaunchFailed;
  }
  // The VMM runs: from here on the launcher never starts a program, opens a network socket or
  // changes the system; it confines itself to what relaying and supervising need (or once the VM
  // has booted: confine_after_boot).
  if (auto st = confine_after_boot_ ? common::Status{} : confine(); !st) {
    launch_failed_ = true;
    launch_error_ = st.error().message();
    CHL_LOG_ERROR("{}", launch_error_);
    driver_->request_stop(events::StopRequest::Forced);
    driver_->kill_vmm();
    io_.run();
    return exit_code();
  }

  on_worker([this]() -> Result<json> {
    std::optional<std::string> pty;
    if (opts_.incoming_migration) {
      // An empty VMM receives the VM from the migration source; it arrives running (or paused).
      CHL_TRY_VOID(common::wrap(driver_->receive_migration(*opts_.incoming_migration), "receiving the migrating VM"));
      CHL_TRY(auto p, common::wrap(driver_->console_pty(), "reading the received VM's console"));
      pty = std::move(p);
    } else if (opts_.restore_from) {
      const std::string from = opts_.restore_from->string();
      CHL_TRY_VOID(common::wrap(driver_->restore(*opts_.restore_from), "restoring the VM from " + from));
      CHL_TRY(auto p, common::wrap(driver_->console_pty(), "reading the restored VM's console"));
      pty = std::move(p);
      CHL_TRY_VOID(common::wrap(driver_->resume(), "resuming the restored VM"));
    } else {
      CHL_TRY(auto p, driver_->create_and_boot());
      pty = std::move(p);
    }
    json j = json::object();
    if (pty) j["pty"] = *pty;
    return j;
  }, [this](Result<json> r) {
    if (!r) {
      launch_failed_ = true;
      launch_error_ = r.error().message();
      CHL_LOG_ERROR("starting the VM failed: {}", launch_error_);
      driver_->request_stop(events::StopRequest::Forced);
      // A VMM that broke the call by dying (no answer, connection reset) is given a moment to be
      // seen dead, so that it reads as Crashed rather than as killed by us; a live one is killed.
      auto t = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(200));
      t->async_wait([this, t](boost::system::error_code ec) {
        if (ec) return;
        driver_->kill_vmm();
        check_finished();
      });
      check_finished();
      return;
    }
    booted_ = true;
    if (confine_after_boot_) {
      if (auto st = confine(); !st) {
        launch_failed_ = true;
        launch_error_ = st.error().message();
        CHL_LOG_ERROR("{}", launch_error_);
        driver_->request_stop(events::StopRequest::Forced);
        driver_->kill_vmm();
        check_finished();
        return;
      }
    }
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_at_);
    CHL_LOG_INFO("VM booted in {} ms", ms.count());
    if (r->contains("pty")) {
      pty_ = (*r)["pty"].get<std::string>();
      if (bridge_) {
        if (auto st = bridge_->attach_pty_path(*pty_); !st)
          CHL_LOG_ERROR("console: attaching {}: {}", *pty_, st.error().message());
      }
    }
    check_finished();
  });

  io_.run();
  return exit_code();
}

common::Status LauncherService::confine() {
  if (opts_.seccomp == sandbox::SeccompMode::Off) {
    CHL_LOG_WARN("seccomp: off (--seccomp off): the launcher is not confined");
    return {};
  }
  // The filter is built for the driver: qemu-kvm runs libvirt's client library in this process
  // (sandbox/seccomp_policy.cpp: the common list plus the libvirt additions).
  const std::string hv = driver_->hypervisor();
  sandbox::DriverKind kind = sandbox::DriverKind::CloudHypervisor;
  if (hv == "qemu-kvm") {
    kind = sandbox::DriverKind::Libvirt;
  } else if (hv != "cloud-hypervisor") {
    return fail(std::errc::invalid_argument, "confining the launcher: no seccomp policy for the " + hv + " driver");
  }
  auto filter = sandbox::build_launcher_filter(opts_.seccomp, kind);
  if (!filter) return tl::unexpected(filter.error().wrap("confining the launcher"));
  if (auto st = filter->load(); !st) return tl::unexpected(st.error().wrap("confining the launcher"));
  seccomp_applied_ = true;
  CHL_LOG_INFO("seccomp: launcher confined ({}, {} policy, {} rules)", sandbox::to_string(opts_.seccomp),
               sandbox::to_string(kind), filter->rules());
  return {};
}

common::Status LauncherService::start_console() {
  console_bridge::BridgeOptions bo;
  bo.socket_path = opts_.console_socket;
  bo.log_path = opts_.console_log ? *opts_.console_log : opts_.state_dir / "virt-serial0-log";
  bo.write_log = !bo.log_path.empty();
  bo.take_over = opts_.console_take_over;
  bridge_ = std::make_unique<console_bridge::Bridge>(io_, bo);
  return bridge_->start();
}

void LauncherService::on_domain_event(const events::DomainEvent& e) {
  CHL_LOG_INFO("domain event {} ({}) -> state {} reason {}", events::to_string(e.type), e.cause,
               events::to_string(e.state), events::to_string(e.reason));
  bus_.publish(e);
  waiters_.check();
  // A panicked guest is dead: end its VMM, as libvirt's default on_crash=destroy does, so the
  // VMI's owner sees Crashed (Panicked) and can restart it. No stop is requested, so the
  // domain keeps its Crashed state and reason through the VMM's exit.
  if (e.state == DomainState::Crashed && !torn_down_ && !forced_) {
    CHL_LOG_WARN("the guest crashed ({}): ending the VMM", events::to_string(e.reason));
    driver_->kill_vmm();
  }
  // A new VM run (reboot, restore) comes with a new console PTY.
  if (booted_ && (e.cause == "vm/rebooted" || e.cause == "vm/booted" || e.cause == "vm/restored")) refresh_console();
  check_finished();
}

void LauncherService::refresh_console() {
  on_worker([this]() -> Result<json> {
    CHL_TRY(auto pty, driver_->console_pty());
    return pty ? json(*pty) : json();
  }, [this](Result<json> r) {
    if (!r) {
      CHL_LOG_WARN("console: reading the PTY after a new VM run: {}", r.error().message());
      return;
    }
    if (!r->is_string() || !bridge_ || torn_down_) return;
    std::string pty = r->get<std::string>();
    if (pty_ && *pty_ == pty) return;
    CHL_LOG_INFO("console: the VM's PTY is now {}", pty);
    pty_ = pty;
    if (auto st = bridge_->attach_pty_path(pty); !st)
      CHL_LOG_ERROR("console: attaching {}: {}", pty, st.error().message());
  });
}

void LauncherService::check_finished() {
  if (torn_down_ || !driver_->finished()) return;
  // The VMM is gone: the VM will not run again in this launcher.
  teardown();
}

void LauncherService::teardown() {
  if (torn_down_) return;
  torn_down_ = true;
  boost::system::error_code ec;
  signals_.cancel(ec);
  grace_timer_.cancel();
  kill_timer_.cancel();
  exit_deadline_.cancel();
  terminate_timer_.cancel();
  waiters_.release_all();
  if (bridge_) bridge_->stop();
  for (auto& stop : stoppers_) stop();
  if (abandoned_)
    CHL_LOG_INFO("VM abandoned: driver state {} reason {}, launcher exits {}",
                 events::to_string(driver_->state()), events::to_string(driver_->reason()),
                 exit_code());
  else
    CHL_LOG_INFO("VM ended: state {} reason {}, launcher exits {}",
                 events::to_string(driver_->state()), events::to_string(driver_->reason()),
                 exit_code());
  // Let the last writes (event streams, replies) go out, then end the loop.
  auto done = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(100));
  done->async_wait([this, done](boost::system::error_code) { io_.stop(); });
}

int LauncherService::exit_code() const {
  if (launch_failed_) return kExitLaunchFailed;
  switch (driver_->state()) {
    case DomainState::Shutoff:
      // Failed: the VM ended without anyone asking (the launcher lost its VMM's event monitor
      // and ended it): to the VMI's owner that is a crash, not a requested stop.
      if (driver_->reason() == events::StateReason::Failed) return kExitCrashed;
      // Migrated: the VM went to another launcher, which runs it now.
      if (driver_->reason() == events::StateReason::Migrated) return kExitClean;
      return driver_->reason() == events::StateReason::Shutdown ? kExitClean : kExitForcedOff;
    case DomainState::Crashed:
      return kExitCrashed;
    default:
      return forced_ ? kExitForcedOff : kExitCrashed;
  }
}

json LauncherService::domain_json() const {
  json j = {{"name", opts_.vmi.name},
            {"namespace", opts_.vmi.namespace_},
            {"uid", opts_.vmi.uid},
            {"hypervisor", driver_->hypervisor()},
            {"state", events::to_string(driver_->state())},
            {"reason", events::to_string(driver_->reason())},
            {"vmm", driver_->vmm_identity()},
            {"state_dir", opts_.state_dir.string()},
            {"console", {{"socket", opts_.console_socket.string()}}},
            {"stopping", stopping_},
            {"seccomp", seccomp_applied_ ? sandbox::to_string(opts_.seccomp) : "off"}};
  if (pty_) j["console"]["pty"] = *pty_;
  if (launch_failed_) j["error"] = launch_error_;
  if (bridge_) {
    auto s = bridge_->stats();
    j["console"]["client_connected"] = s.client_connected;
  }
  return j;
}

Result<json> LauncherService::state_error(const std::string& action, const std::string& need) const {
  return fail(kWrongState, "cannot " + action + ": the VM is " + std::string(events::to_string(driver_->state())) +
                               (need.empty() ? "" : ", not " + need));
}

void LauncherService::status(Reply reply) {
  // The VMM's `booted` event comes before its answer to vm.boot (Cloud Hypervisor v52 emits it
  // inside Vmm::vm_boot, vmm/src/lib.rs, then answers), and a Sync is answered at that event: a
  // VM the VMM reports running has its info read too, queued behind the boot call on the worker
  // (not while an incoming migration holds the worker: that call lasts as long as the migration).
  const auto st = driver_->state();
  const bool vm_up =
      booted_ || (!opts_.incoming_migration && (st == DomainState::Running || st == DomainState::Paused));
  if (torn_down_ || driver_->finished() || !vm_up) {
    reply(domain_json());
    return;
  }
  on_worker([this]() -> Result<json> {
    json extra = json::object();
    if (auto info = driver_->info()) extra["info"] = *info;
    else extra["info_error"] = info.error().message();
    if (auto c = driver_->counters()) extra["counters"] = *c;
    return extra;
  }, [this, reply = std::move(reply)](Result<json> r) {
    json j = domain_json();
    if (r) j.update(*r);
    reply(j);
  });
}

LauncherService::Reply LauncherService::answer_in_state(std::function<bool()> reached, Reply reply) {
  return [this, reached = std::move(reached), reply = std::move(reply)](Result<json> r) mutable {
    if (!r || torn_down_) return reply(std::move(r));
    waiters_.wait(std::move(reached), std::chrono::seconds(2),
                  [reply = std::move(reply), r = std::move(r)]() mutable { reply(std::move(r)); });
  };
}

void LauncherService::pause(Reply reply) {
  if (driver_->state() != DomainState::Running || stopping_) return reply(state_error("pause", "Running"));
  on_worker([this]() -> Result<json> {
    CHL_TRY_VOID(driver_->pause());
    return json{{"state", "Paused"}};
  }, answer_in_state([this] { return driver_->state() != DomainState::Running; }, std::move(reply)));
}

void LauncherService::resume(Reply reply) {
  if (driver_->state() != DomainState::Paused || stopping_) return reply(state_error("resume", "Paused"));
  on_worker([this]() -> Result<json> {
    CHL_TRY_VOID(driver_->resume());
    return json{{"state", "Running"}};
  }, answer_in_state([this] { return driver_->state() != DomainState::Paused; }, std::move(reply)));
}

void LauncherService::reboot(Reply reply, Reboot how) {
  if (driver_->state() != DomainState::Running || stopping_) return reply(state_error("reboot", "Running"));
  on_worker([this, how]() -> Result<json> {
    if (how == Reboot::Acpi) {
      CHL_TRY_VOID(driver_->acpi_reboot());
      return json{{"rebooting", true}, {"through", "ACPI"}};
    }
    CHL_TRY_VOID(driver_->reboot());
    return json{{"rebooting", true}};
  }, std::move(reply));
}

void LauncherService::shutdown(std::optional<std::chrono::seconds> grace, Reply reply) {
  if (torn_down_ || driver_->finished()) return reply(state_error("stop", ""));
  if (stopping_) return reply(fail(kWrongState, "cannot stop: a stop is already in progress"));
  begin_graceful_stop(grace.value_or(opts_.grace_period));
  reply(json{{"stopping", true}, {"grace_period_seconds", grace.value_or(opts_.grace_period).count()}});
}

void LauncherService::kill(Reply reply) {
  // Kill is final: a VM already off is what it asks for.
  if (torn_down_ || driver_->finished())
    return reply(json{{"killing", false}, {"state", events::to_string(driver_->state())}});
  if (forced_) {
    // A forced stop is under way (a second Kill, a Kill after the grace period): the VMM is
    // killed now rather than given the rest of its exit timeout.
    CHL_LOG_WARN("kill requested during the forced stop: killing the VMM now");
    driver_->kill_vmm();
    return reply(json{{"killing", true}});
  }
  begin_forced_stop("kill requested");
  reply(json{{"killing", true}});
}

void LauncherService::power_button(Reply reply) {
  if (torn_down_ || driver_->state() != DomainState::Running) return reply(state_error("press the power button", "Running"));
  // The guest decides: a power-off it does is still Shutoff/Shutdown.
  driver_->request_stop(events::StopRequest::Graceful);
  on_worker([this]() -> Result<json> {
    CHL_TRY_VOID(driver_->power_button());
    return json{{"pressed", true}};
  }, std::move(reply));
}

void LauncherService::terminate_hooked() {
  CHL_LOG_INFO("received SIGTERM: marked for graceful shutdown; forced off if still running in {} s",
               opts_.grace_period.count());
  terminate_hook_();
  terminate_timer_.expires_after(opts_.grace_period);
  terminate_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) begin_forced_stop("the grace period after SIGTERM has passed");
  });
}

void LauncherService::begin_graceful_stop(std::chrono::seconds grace) {
  if (stopping_ || torn_down_) return;
  stopping_ = true;
  // Running comes from the VMM's event, which can precede the answer to the boot call: a guest
  // the VMM says runs gets the power button (queued on the worker behind the boot call).
  const bool running = booted_ || driver_->state() == DomainState::Running;
  if (!running || driver_->state() == DomainState::Paused) {
    // A guest that is not running cannot answer the power button.
    begin_forced_stop(booted_ ? "the VM is paused" : "the VM has not booted");
    return;
  }
  driver_->request_stop(events::StopRequest::Graceful);
  CHL_LOG_INFO("pressing the ACPI power button; forcing off in {} s", grace.count());
  on_worker([this]() -> Result<json> {
    CHL_TRY_VOID(driver_->power_button());
    return json::object();
  }, [this](Result<json> r) {
    if (!r) {
      CHL_LOG_WARN("power button: {}", r.error().message());
      begin_forced_stop("the power button failed");
    }
  });
  grace_timer_.expires_after(grace);
  grace_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    begin_forced_stop("the guest did not power off within the grace period");
  });
}

void LauncherService::begin_forced_stop(const std::string& why) {
  if (forced_ || torn_down_) return;
  forced_ = true;
  stopping_ = true;
  grace_timer_.cancel();
  CHL_LOG_WARN("forcing the VM off: {}", why);
  driver_->request_stop(events::StopRequest::Forced);
  on_worker([this]() -> Result<json> {
    CHL_TRY_VOID(driver_->force_off());
    return json::object();
  }, [this](Result<json> r) {
    if (!r) {
      CHL_LOG_WARN("{}; killing the VMM", r.error().message());
      driver_->kill_vmm();
    }
  });
  kill_timer_.expires_after(opts_.vmm_exit_timeout);
  kill_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    CHL_LOG_WARN("VMM still running {} s after shutdown: SIGKILL", opts_.vmm_exit_timeout.count());
    driver_->kill_vmm();
  });
  bound_exit(opts_.vmm_exit_timeout + opts_.end_report_timeout, "the forced stop (" + why + ")");
}

void LauncherService::snapshot(const std::filesystem::path& dir, Reply reply) {
  auto st = driver_->state();
  if ((st != DomainState::Running && st != DomainState::Paused) || stopping_)
    return reply(state_error("snapshot", "Running or Paused"));
  if (!dir.is_absolute()) return reply(fail(std::errc::invalid_argument, "snapshot directory must be absolute: " + dir.string()));
  // Never overwrite: the directory must be new (created here, 0700) or empty.
  bool created = true;
  if (::mkdir(dir.c_str(), 0700) != 0) {
    std::error_code ec;
    if (errno != EEXIST || !std::filesystem::is_directory(dir, ec) || !std::filesystem::is_empty(dir, ec))
      return reply(fail(std::errc::file_exists, "snapshot directory " + dir.string() + " exists and is not empty"));
    created = false;
  }
  const bool was_running = st == DomainState::Running;
  on_worker([this, dir, was_running, created]() -> Result<json> {
    // A failed snapshot leaves nothing half-written: the directory was new or empty, so what is
    // in it now is the VMM's partial output.
    auto discard = [&] {
      std::error_code ec;
      if (created) {
        std::filesystem::remove_all(dir, ec);
      } else {
        for (const auto& e : std::filesystem::directory_iterator(dir, ec)) std::filesystem::remove_all(e.path(), ec);
      }
      if (ec) CHL_LOG_WARN("removing the partial snapshot in {}: {}", dir.string(), ec.message());
    };
    // Cloud Hypervisor snapshots a paused VM only: pause around it, as virsh does.
    if (was_running) {
      if (auto p = driver_->pause(); !p) {
        discard();
        return tl::unexpected(p.error().wrap("pausing for the snapshot"));
      }
    }
    auto snap = driver_->snapshot(dir);
    if (was_running) {
      auto res = driver_->resume();
      if (!res) CHL_LOG_ERROR("resuming after the snapshot: {}", res.error().message());
    }
    if (!snap) {
      discard();
      return tl::unexpected(snap.error().wrap("snapshot"));
    }
    return json{{"snapshot", dir.string()}};
  }, std::move(reply));
}

void LauncherService::restore(const std::filesystem::path& dir, Reply reply) {
  (void)dir;
  reply(fail(std::errc::operation_not_supported,
             "restore into a running launcher is not supported: the VMM can only restore before a VM exists; start a "
             "new launcher with `run --restore " + dir.string() + "`"));
}

void LauncherService::add_disk(const json& disk, Reply reply) {
  auto st = driver_->state();
  if ((st != DomainState::Running && st != DomainState::Paused) || stopping_)
    return reply(state_error("add a disk", "Running or Paused"));
  on_worker([this, disk]() -> Result<json> { return driver_->add_disk(disk); }, std::move(reply));
}

void LauncherService::remove_device(const std::string& id, Reply reply) {
  auto st = driver_->state();
  if ((st != DomainState::Running && st != DomainState::Paused) || stopping_)
    return reply(state_error("remove a device", "Running or Paused"));
  on_worker([this, id]() -> Result<json> {
    CHL_TRY_VOID(driver_->remove_device(id));
    return json{{"removed", id}};
  }, std::move(reply));
}

void LauncherService::add_host_device(const std::string& id, const std::string& path, Reply reply) {
  auto st = driver_->state();
  if ((st != DomainState::Running && st != DomainState::Paused) || stopping_)
    return reply(state_error("add a host device", "Running or Paused"));
  on_worker([this, id, path]() -> Result<json> {
    CHL_TRY(json added, driver_->add_host_device(id, path));
    CHL_LOG_INFO("host device {} ({}) added: {}", id, path, added.dump());
    return added;
  }, std::move(reply));
}

void LauncherService::resize(std::optional<std::uint32_t> vcpus, std::optional<std::uint64_t> memory_bytes,
                             Reply reply) {
  auto st = driver_->state();
  if ((st != DomainState::Running && st != DomainState::Paused) || stopping_)
    return reply(state_error("resize", "Running or Paused"));
  on_worker([this, vcpus, memory_bytes]() -> Result<json> {
    CHL_TRY_VOID(driver_->resize(vcpus, memory_bytes));
    json j = json::object();
    if (vcpus) j["vcpus"] = *vcpus;
    if (memory_bytes) j["memory"] = *memory_bytes;
    CHL_LOG_INFO("resized: {}", j.dump());
    return j;
  }, std::move(reply));
}

void LauncherService::migrate(MigrationSend m, Reply reply) {
  auto st = driver_->state();
  if ((st != DomainState::Running && st != DomainState::Paused) || stopping_)
    return reply(state_error("migrate", "Running or Paused"));
  // On the worker for the whole migration: the VMM answers nothing else meanwhile, so the
  // calls queued behind it wait too (the transport answers from its own state).
  on_worker([this, m = std::move(m)]() -> Result<json> {
    CHL_LOG_INFO("live migration to {} (timeout {} s)", m.destination, m.timeout_s);
    CHL_TRY_VOID(driver_->send_migration(m));
    return json{{"migrated", m.destination}};
  }, std::move(reply));
}

common::Status LauncherService::abort_migration() { return driver_->abort_migration(); }

}  // namespace chl::launcher

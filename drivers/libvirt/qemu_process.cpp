// LibvirtDriver's hold on its QEMU process (libvirt_driver.hpp): the pidfd opened on the pid
// libvirt recorded and verified then, the SIGKILL sent through it, and the end of QEMU seen
// through it when libvirt does not report it. Split from libvirt_driver.cpp by concern.
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/log.hpp"
#include "drivers/libvirt/daemon.hpp"
#include "drivers/libvirt/libvirt_driver.hpp"

namespace chl::libvirt {
namespace asio = boost::asio;

namespace {

// Does /proc/<pid>/cmdline name our domain (guards against a recycled pid)?
bool is_our_qemu(pid_t pid, const std::string& name) {
  if (pid <= 0 || !process_alive(pid)) return false;
  std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return cmd.find("guest=" + name + ",") != std::string::npos ||
         cmd.find("guest=" + name + '\0') != std::string::npos;
}

}  // namespace

void LibvirtDriver::take_qemu_pidfd(pid_t pid) {
  if (pid <= 0) {
    CHL_LOG_WARN("libvirt: no QEMU pid in {}: the launcher cannot kill QEMU itself",
                 (opts_.qemu_pid_dir / (opts_.domain_name + ".pid")).string());
    return;
  }
  // The pidfd first, then the check: while the pidfd is open the pid cannot be reused, so the
  // process checked is the one the pidfd signals later.
  common::UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!fd) {
    CHL_LOG_WARN("libvirt: pidfd_open on QEMU pid {}: {}", pid, std::strerror(errno));
    return;
  }
  if (!is_our_qemu(pid, opts_.domain_name)) {
    CHL_LOG_WARN("libvirt: pid {} from libvirt's pid file is not QEMU for domain {}: not kept", pid,
                 opts_.domain_name);
    return;
  }
  {
    std::lock_guard lk(id_mu_);
    qemu_pidfd_ = std::move(fd);
  }
  // Watch it from the io thread (the link guards against a driver already gone).
  std::lock_guard lk(link_->mu);
  asio::post(io_, [l = link_]() {
    std::lock_guard lk2(l->mu);
    if (l->driver) l->driver->watch_qemu();
  });
}

void LibvirtDriver::watch_qemu() {
  int dup = -1;
  {
    std::lock_guard lk(id_mu_);
    if (qemu_pidfd_) dup = ::fcntl(qemu_pidfd_.get(), F_DUPFD_CLOEXEC, 0);
  }
  if (dup < 0) return;
  qemu_watch_.emplace(io_, dup);
  qemu_watch_->async_wait(asio::posix::stream_descriptor::wait_read,
                          [this](boost::system::error_code ec) {
                            if (!ec) on_qemu_gone();
                          });
}

// QEMU exited. libvirt reports it (Stopped) within milliseconds when it can; when it does not —
// a virDomainDestroy still waiting for a job ignores QEMU's end of file (priv->beingDestroyed),
// or the daemon stopped answering — the domain is over all the same.
void LibvirtDriver::on_qemu_gone() {
  if (tracker_.finished()) return;
  CHL_LOG_INFO("libvirt: QEMU pid {} exited; waiting up to {} s for libvirt to report it",
               qemu_pid_.load(), kQemuGoneEventWait.count());
  await_qemu_gone_report();
}

void LibvirtDriver::await_qemu_gone_report() {
  gone_timer_.expires_after(kQemuGoneEventWait);
  gone_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || tracker_.finished()) return;
    // An outgoing migration ends with the source's QEMU gone, and libvirt reports it
    // (Stopped/Migrated) from its Confirm phase, inside virDomainMigrateToURI3: under load that
    // came over 3 s after QEMU's exit. The call's end, bounded by the migration's own timeouts,
    // decides: wait for it.
    if (migrating_out_.load()) {
      CHL_LOG_INFO("libvirt: QEMU exited during the outgoing migration; waiting for its call to end");
      return await_qemu_gone_report();
    }
    if (migrated_out_.load()) {
      CHL_LOG_WARN("libvirt: the VM migrated and its QEMU exited, but libvirt has not reported the "
                   "stop: Shutoff/Migrated");
      libvirt_silent_ = true;
      return deliver(tracker_.on_qemu_gone_migrated(
          "QEMU exited after the migration; libvirt did not report the stop"));
    }
    CHL_LOG_ERROR(
        "libvirt: QEMU pid {} exited {} s ago and libvirt has not reported it: the domain is over",
        qemu_pid_.load(), kQemuGoneEventWait.count());
    libvirt_silent_ = true;
    deliver(
        tracker_.on_qemu_gone_unreported("QEMU exited; libvirt did not report the stop within " +
                                         std::to_string(kQemuGoneEventWait.count()) + " s"));
  });
}

void LibvirtDriver::kill_vmm() {
  stop_receiving_ = true;  // a target still waiting for its VM gives up
  std::lock_guard lk(id_mu_);
  const pid_t pid = qemu_pid_.load();
  if (!qemu_pidfd_) {
    CHL_LOG_WARN("libvirt: no verified QEMU process to kill (pid {})", pid);
    return;
  }
  if (!process_alive(pid)) return;  // gone (or a zombie libvirtd has not reaped yet)
  CHL_LOG_WARN("killing QEMU pid {} (verified at start: its command line names domain {})", pid,
               opts_.domain_name);
  if (::syscall(SYS_pidfd_send_signal, qemu_pidfd_.get(), SIGKILL, nullptr, 0) != 0 &&
      errno != ESRCH)
    CHL_LOG_ERROR("libvirt: SIGKILL to QEMU pid {}: {}", pid, std::strerror(errno));
}

void LibvirtDriver::abandon() {
  stop_receiving_ = true;
  {
    std::lock_guard lk(link_->mu);
    link_->driver = nullptr;
    link_->io = nullptr;
  }
  boost::system::error_code ec;
  if (qemu_watch_) qemu_watch_->close(ec);
  gone_timer_.cancel();
}

}  // namespace chl::libvirt

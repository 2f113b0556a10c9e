#include "kubevirt/migration_relay.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "common/log.hpp"
#include "common/unix_socket.hpp"
#include "kubevirt/migration_stream.hpp"

namespace chl::kubevirt {

common::Result<std::unique_ptr<MigrationRelay>> MigrationRelay::start(
    std::filesystem::path listen_path, std::filesystem::path destination, Options options) {
  std::unique_ptr<MigrationRelay> r(new MigrationRelay());
  r->options_ = options;
  r->progress_ = std::chrono::steady_clock::now().time_since_epoch().count();
  r->path_ = std::move(listen_path);
  r->destination_ = std::move(destination);
  std::error_code ec;
  std::filesystem::remove(r->path_, ec);
  auto l = common::listen_unix(r->path_, 1);
  if (!l) return tl::unexpected(l.error().wrap("migration relay"));
  r->listener_ = std::move(*l);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return common::fail_errno("migration relay: pipe");
  r->wake_read_.reset(fds[0]);
  r->wake_write_.reset(fds[1]);
  r->thread_ = std::thread([raw = r.get()] { raw->run(); });
  return r;
}

MigrationRelay::~MigrationRelay() {
  abort();
  if (thread_.joinable()) thread_.join();
  std::error_code ec;
  std::filesystem::remove(path_, ec);
}

void MigrationRelay::abort() {
  abort_ = true;
  (void)!::write(wake_write_.get(), "x", 1);
  // A write blocked on a stalled peer returns at once (EPIPE) after a shutdown.
  std::lock_guard lock(mu_);
  if (vmm_fd_ >= 0) ::shutdown(vmm_fd_, SHUT_RDWR);
  if (proxy_fd_ >= 0) ::shutdown(proxy_fd_, SHUT_RDWR);
}

void MigrationRelay::throttle(std::chrono::steady_clock::time_point since) {
  if (options_.bandwidth == 0) return;
  // A token bucket without burst: `sent_` bytes may have left `sent_ / bandwidth` seconds after
  // the first one. Waiting on the wake pipe keeps abort() immediate.
  const auto due =
      since +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(
          static_cast<double>(sent_.load()) / static_cast<double>(options_.bandwidth)));
  while (!abort_) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= due) return;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(due - now).count() + 1;
    pollfd p = {wake_read_.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<long long>(ms, 1000))) < 0 && errno != EINTR)
      return;
    if (p.revents) return;
  }
}

void MigrationRelay::run() {
  // Wait for the VMM's connection, then dial the proxy's socket.
  pollfd first[2] = {{listener_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
  while (!abort_) {
    if (::poll(first, 2, -1) < 0 && errno != EINTR) return;
    if (first[0].revents) break;
  }
  if (abort_) return;
  common::UniqueFd vmm(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!vmm) {
    CHL_LOG_WARN("migration relay: accept: {}", std::strerror(errno));
    return;
  }
  auto proxy = common::connect_unix(destination_);
  if (!proxy) {
    // The VMM sees its connection closed: its send fails naming a socket error.
    CHL_LOG_WARN("migration relay: {}", proxy.error().message());
    return;
  }
  common::UniqueFd out = std::move(*proxy);
  {
    std::lock_guard lock(mu_);
    vmm_fd_ = vmm.get();
    proxy_fd_ = out.get();
  }
  // Both directions, blocking writes (the thread does nothing else): VMM -> proxy carries the
  // guest, proxy -> VMM the receiver's answers.
  // Paced, the reads are small enough for the rate to be even (a 64 KiB read is 1/16 s at 1 MiB/s).
  char buf[1 << 16];
  const std::size_t chunk =
      options_.bandwidth == 0 ? sizeof buf
                              : std::clamp<std::size_t>(options_.bandwidth / 16, 4096, sizeof buf);
  const auto started = std::chrono::steady_clock::now();
  MigrationStreamEditor editor;
  std::string edited;
  bool vmm_open = true, proxy_open = true;
  while (!abort_ && (vmm_open || proxy_open)) {
    pollfd p[3] = {{vmm_open ? vmm.get() : -1, POLLIN, 0},
                   {proxy_open ? out.get() : -1, POLLIN, 0},
                   {wake_read_.get(), POLLIN, 0}};
    if (::poll(p, 3, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[2].revents) break;  // abort
    for (int i = 0; i < 2; ++i) {
      if (!p[i].revents) continue;
      const int from = i == 0 ? vmm.get() : out.get();
      const int to = i == 0 ? out.get() : vmm.get();
      const ssize_t n = ::recv(from, buf, i == 0 ? chunk : sizeof buf, 0);
      if (n <= 0) {
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        // End of one direction: pass it on (a reset ends both).
        ::shutdown(to, SHUT_WR);
        if (i == 0)
          vmm_open = false;
        else
          proxy_open = false;
        if (n < 0) vmm_open = proxy_open = false;
        continue;
      }
      // The VMM's stream, until its Config request has passed, through the editor.
      const char* data = buf;
      std::size_t len = static_cast<std::size_t>(n);
      if (i == 0 && options_.forget_tap_host_mac && !editor.through()) {
        edited.clear();
        editor.feed(std::string_view(buf, len), edited);
        data = edited.data();
        len = edited.size();
        if (editor.through() && editor.nets_edited() > 0 && nets_edited_ == 0) {
          nets_edited_ = editor.nets_edited();
          CHL_LOG_INFO("migration relay: host_mac of {} tap NIC(s) left to the target's VMM",
                       editor.nets_edited());
        }
      }
      std::size_t off = 0;
      while (off < len) {
        const ssize_t w = ::send(to, data + off, len - off, MSG_NOSIGNAL);
        if (w < 0) {
          if (errno == EINTR) continue;
          vmm_open = proxy_open = false;
          break;
        }
        off += static_cast<std::size_t>(w);
      }
      if (i == 0 && off > 0) {
        sent_ += off;
        progress_ = std::chrono::steady_clock::now().time_since_epoch().count();
        throttle(started);
      }
    }
  }
  // Aborted or done: both ends closed (the VMM's send fails if it was still sending).
  std::lock_guard lock(mu_);
  ::shutdown(vmm.get(), SHUT_RDWR);
  ::shutdown(out.get(), SHUT_RDWR);
  vmm_fd_ = proxy_fd_ = -1;
}

}  // namespace chl::kubevirt

#include "console_bridge/console_client.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>

#include <array>
#include <cstring>
#include <optional>
#include <string>

#include "common/syscall.hpp"
#include "common/unique_fd.hpp"
#include "common/unix_socket.hpp"
#include "console_bridge/notices.hpp"
#include "console_bridge/raw_terminal.hpp"

namespace chl::console_bridge {

using common::fail;
using common::fail_errno;
using common::Result;
using common::Status;
using common::UniqueFd;

namespace {

constexpr std::size_t kChunk = 16 * 1024;
constexpr std::array kExitSignals = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// Blocks the exit signals and reads them from a signalfd; SIGPIPE ignored (errors come back as
// EPIPE). Restores the mask and the SIGPIPE action when destroyed.
class SignalGuard {
 public:
  static Result<SignalGuard> install() {
    SignalGuard g;
    sigset_t set;
    sigemptyset(&set);
    for (int s : kExitSignals) sigaddset(&set, s);
    if (::pthread_sigmask(SIG_BLOCK, &set, &g.old_mask_) != 0) return fail_errno("blocking signals");
    g.mask_set_ = true;
    g.fd_.reset(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!g.fd_) return fail_errno("signalfd");
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    if (::sigaction(SIGPIPE, &ign, &g.old_pipe_) != 0) return fail_errno("ignoring SIGPIPE");
    g.pipe_set_ = true;
    return g;
  }
  SignalGuard(SignalGuard&& o) noexcept
      : fd_(std::move(o.fd_)), old_mask_(o.old_mask_), old_pipe_(o.old_pipe_),
        mask_set_(std::exchange(o.mask_set_, false)), pipe_set_(std::exchange(o.pipe_set_, false)) {}
  SignalGuard& operator=(SignalGuard&&) = delete;
  ~SignalGuard() {
    if (pipe_set_) ::sigaction(SIGPIPE, &old_pipe_, nullptr);
    if (mask_set_) ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  [[nodiscard]] int fd() const { return fd_.get(); }

 private:
  SignalGuard() { sigemptyset(&old_mask_); }
  UniqueFd fd_;
  sigset_t old_mask_{};
  struct sigaction old_pipe_ {};
  bool mask_set_ = false;
  bool pipe_set_ = false;
};

// Write everything to `fd`, waiting for it if it is non-blocking.
Status write_all(int fd, const char* p, std::size_t len) {
  while (len > 0) {
    ssize_t n = common::retry_eintr([&] { return ::write(fd, p, len); });
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd w{fd, POLLOUT, 0};
      (void)common::retry_eintr([&] { return ::poll(&w, 1, -1); });
      continue;
    }
    if (n < 0) return fail_errno("writing output");
    p += n;
    len -= static_cast<std::size_t>(n);
  }
  return {};
}

void note(int fd, const std::string& text) { (void)write_all(fd, text.data(), text.size()); }

}  // namespace

int ClientResult::exit_code() const {
  switch (end) {
    case ClientEnd::refused: return 1;
    case ClientEnd::signalled: return 128 + signal;
    default: return 0;
  }
}

Result<ClientResult> ConsoleClient::run() {
  CHL_TRY(UniqueFd sock, common::connect_unix(opts_.socket_path));
  const bool tty = ::isatty(opts_.in_fd) == 1;
  // Declared before the terminal guard: on the way out the terminal is restored first, then
  // the signal mask (a signal still pending then acts on a sane terminal).
  CHL_TRY(SignalGuard signals, SignalGuard::install());
  std::optional<RawTerminal> raw;
  if (tty) {
    CHL_TRY(RawTerminal r, RawTerminal::enter(opts_.in_fd));
    raw.emplace(std::move(r));
    note(opts_.err_fd, "Connected to " + opts_.socket_path.string() +
                           ". Escape sequence is ^] (Ctrl+]).\r\n");
  }

  std::string to_sock;  // input not yet taken by the socket (one write in flight)
  std::size_t to_sock_off = 0;
  bool in_open = true;
  bool escaped = false;
  std::string received_head;  // the first bytes, to recognise a refusal
  std::size_t received = 0;
  std::optional<std::chrono::steady_clock::time_point> linger_until;
  std::array<char, kChunk> buf{};

  auto send_pending = [&]() -> Status {
    while (to_sock_off < to_sock.size()) {
      ssize_t n = common::retry_eintr([&] {
        return ::send(sock.get(), to_sock.data() + to_sock_off, to_sock.size() - to_sock_off,
                      MSG_NOSIGNAL | MSG_DONTWAIT);
      });
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return {};
      if (n < 0) return fail_errno("sending to " + opts_.socket_path.string());
      to_sock_off += static_cast<std::size_t>(n);
    }
    to_sock.clear();
    to_sock_off = 0;
    return {};
  };
  auto finish = [&](ClientEnd end, int sig = 0) -> Result<ClientResult> {
    if (end == ClientEnd::remote_closed && received == received_head.size() &&
        received_head == kSessionActiveNotice) {
      end = ClientEnd::refused;
    }
    if (raw) {
      (void)raw->restore();
      if (end == ClientEnd::remote_closed) note(opts_.err_fd, "\nconsole connection closed\n");
      if (end == ClientEnd::escaped) note(opts_.err_fd, "\n");
    }
    return ClientResult{end, sig};
  };

  for (;;) {
    if (!in_open && !linger_until && to_sock.empty()) {
      linger_until = std::chrono::steady_clock::now() + opts_.linger;
    }
    std::array<pollfd, 3> fds{};
    fds[0] = {sock.get(), static_cast<short>(POLLIN | (to_sock.empty() ? 0 : POLLOUT)), 0};
    fds[1] = {(in_open && to_sock.empty()) ? opts_.in_fd : -1, POLLIN, 0};
    fds[2] = {signals.fd(), POLLIN, 0};
    int timeout = -1;
    if (linger_until) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*linger_until -
                                                                        std::chrono::steady_clock::now());
      timeout = static_cast<int>(std::max<long>(0, left.count()));
    }
    int r = ::poll(fds.data(), fds.size(), timeout);
    if (r < 0) {
      if (errno == EINTR) continue;
      return fail_errno("poll");
    }
    if (r == 0 && linger_until) return finish(ClientEnd::input_ended);

    if (fds[2].revents & POLLIN) {
      signalfd_siginfo si{};
      if (::read(signals.fd(), &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
        return finish(ClientEnd::signalled, static_cast<int>(si.ssi_signo));
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = common::retry_eintr([&] { return ::read(sock.get(), buf.data(), buf.size()); });
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return finish(ClientEnd::remote_closed);
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        return fail_errno("reading from " + opts_.socket_path.string());
      }
      if (n > 0) {
        if (received_head.size() < kSessionActiveNotice.size()) {
          received_head.append(buf.data(),
                               std::min<std::size_t>(static_cast<std::size_t>(n),
                                                     kSessionActiveNotice.size() - received_head.size()));
        }
        received += static_cast<std::size_t>(n);
        CHL_TRY_VOID(write_all(opts_.out_fd, buf.data(), static_cast<std::size_t>(n)));
      }
    }
    if (fds[0].revents & POLLOUT) CHL_TRY_VOID(send_pending());
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = common::retry_eintr([&] { return ::read(opts_.in_fd, buf.data(), buf.size()); });
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return fail_errno("reading input");
      if (n == 0) in_open = false;
      if (n > 0) {
        std::size_t len = static_cast<std::size_t>(n);
        if (tty) {
          if (auto* e = static_cast<char*>(std::memchr(buf.data(), opts_.escape, len))) {
            len = static_cast<std::size_t>(e - buf.data());
            escaped = true;
          }
        }
        to_sock.append(buf.data(), len);
        CHL_TRY_VOID(send_pending());
        if (escaped) return finish(ClientEnd::escaped);
      }
    }
  }
}

}  // namespace chl::console_bridge

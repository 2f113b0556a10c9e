#include "console_bridge/bridge.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/log.hpp"
#include "common/syscall.hpp"
#include "console_bridge/client_session.hpp"
#include "console_bridge/console_log.hpp"
#include "console_bridge/notices.hpp"
#include "console_bridge/scrollback.hpp"
#include "console_bridge/unix_listener.hpp"

namespace chl::console_bridge {

using common::fail;
using common::fail_errno;
using common::Result;
using common::Status;
using common::UniqueFd;
namespace asio = boost::asio;

namespace {

constexpr std::size_t kReadBuffer = 64 * 1024;   // guest output gathered per wakeup
constexpr std::size_t kInputBuffer = 16 * 1024;  // client input read at once
constexpr std::chrono::milliseconds kAcceptRetry{100};

// True when the PTY end reports a hangup (the other side is closed) or is unusable.
bool pty_hung_up(int fd) {
  pollfd p{fd, POLLIN, 0};
  int r = common::retry_eintr([&] { return ::poll(&p, 1, 0); });
  return r < 0 || (p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0;
}

// Whether two fds are the same file (the same PTY end): device, inode and device number.
bool same_file(int a, int b) {
  struct stat sa{};
  struct stat sb{};
  if (::fstat(a, &sa) != 0 || ::fstat(b, &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino && sa.st_rdev == sb.st_rdev;
}

Status set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return fail_errno("fcntl F_GETFL");
  if ((flags & O_NONBLOCK) == 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return fail_errno("fcntl F_SETFL O_NONBLOCK");
  }
  return {};
}

Status make_raw(int fd, const std::filesystem::path& path) {
  if (!::isatty(fd)) return {};
  termios t{};
  if (::tcgetattr(fd, &t) != 0) return fail_errno("tcgetattr " + path.string());
  ::cfmakeraw(&t);
  if (::tcsetattr(fd, TCSANOW, &t) != 0) return fail_errno("tcsetattr raw " + path.string());
  return {};
}

Result<UniqueFd> open_pty_path(const std::filesystem::path& path, bool raw) {
  int fd = common::retry_eintr(
      [&] { return ::open(path.c_str(), O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC); });
  if (fd < 0) return fail_errno("opening PTY " + path.string());
  UniqueFd owned(fd);
  if (raw) CHL_TRY_VOID(make_raw(fd, path));
  return owned;
}

}  // namespace

class Bridge::Impl : public std::enable_shared_from_this<Bridge::Impl> {
 public:
  Impl(asio::io_context& io, BridgeOptions o)
      : opts(std::move(o)),
        acceptor_(io),
        pty_(io),
        reopen_timer_(io),
        accept_retry_timer_(io),
        read_buf_(kReadBuffer),
        input_buf_(kInputBuffer),
        scrollback_(opts.scrollback_bytes) {
    if (opts.client_buffer_bytes < opts.scrollback_bytes) opts.client_buffer_bytes = opts.scrollback_bytes;
    if (opts.log_path.empty()) {
      opts.log_path = opts.socket_path;
      opts.log_path += "-log";
    }
  }

  Status start();
  Status attach(std::optional<std::filesystem::path> path, UniqueFd fd);
  void stop();
  BridgeStats stats() const;

  BridgeOptions opts;

 private:
  // PTY side.
  Status adopt(UniqueFd fd, bool wait_for_guest = false);
  void release_pty(bool keep_parked);
  void arm_pty_read();
  void on_pty_readable();
  void deliver(std::span<const char> data);
  void hangup(const std::string& why);
  void arm_reopen();
  void try_return();
  void flush_input();
  void arm_pty_write();
  // Client side.
  void arm_accept();
  void on_accept(const boost::system::error_code& ec, asio::local::stream_protocol::socket socket);
  void arm_client_read();
  void on_client_readable();

  asio::local::stream_protocol::acceptor acceptor_;
  asio::posix::stream_descriptor pty_;
  UniqueFd parked_;  // the hung-up PTY fd, out of the event loop: watched (fd) or pinned (path)
  std::optional<std::filesystem::path> pty_path_;
  asio::steady_timer reopen_timer_;
  asio::steady_timer accept_retry_timer_;
  bool started_ = false;
  bool stopped_ = false;
  bool pty_up_ = false;
  bool pty_read_armed_ = false;
  bool pty_write_armed_ = false;
  bool reopen_armed_ = false;
  // fd mode after a hangup: the master no longer reports the hangup, but whether a slave is open
  // again cannot be seen from the master (input written now could be lost with the old slave),
  // so client input waits until the guest side writes something.
  bool input_waits_for_guest_ = false;
  std::uint64_t generation_ = 0;  // bumped when the PTY fd changes; stale handlers ignore themselves
  std::vector<char> read_buf_;
  std::vector<char> input_buf_;
  std::string pending_input_;  // client input not yet taken by the PTY (one write in flight)
  std::size_t pending_off_ = 0;
  std::shared_ptr<ClientSession> client_;
  std::uint64_t next_client_id_ = 1;
  Scrollback scrollback_;
  std::optional<ConsoleLog> log_;

  struct Counters {
    std::atomic<std::uint64_t> bytes_from_pty{0}, bytes_to_pty{0}, clients_accepted{0},
        clients_refused{0}, clients_dropped{0}, clients_taken_over{0}, pty_hangups{0},
        pty_returns{0}, pty_wakeups{0}, log_errors{0};
    std::atomic<bool> pty_up{false}, client_connected{false};
  } counters_;
};

// ---- lifecycle ---------------------------------------------------------------------------

Status Bridge::Impl::start() {
  if (started_) return fail(std::errc::operation_in_progress, "console bridge already started");
  if (stopped_) return fail(std::errc::operation_canceled, "console bridge was stopped");
  if (opts.socket_path.empty()) return fail(std::errc::invalid_argument, "console bridge: no socket path");
  if (opts.write_log) {
    CHL_TRY(auto log, ConsoleLog::open(opts.log_path, opts.log_max_bytes));
    log_.emplace(std::move(log));
  }
  ListenerOptions lo;
  lo.path = opts.socket_path;
  lo.mode = opts.socket_group ? 0660 : 0600;
  lo.group = opts.socket_group;
  CHL_TRY(UniqueFd fd, listen_unix(lo));
  boost::system::error_code ec;
  int raw = fd.release();
  acceptor_.assign(asio::local::stream_protocol(), raw, ec);
  if (ec) {
    ::close(raw);
    ::unlink(opts.socket_path.c_str());
    return fail(ec, "watching console socket " + opts.socket_path.string());
  }
  started_ = true;
  CHL_LOG_INFO("console bridge listening on {} (log {})", opts.socket_path.string(),
               opts.write_log ? opts.log_path.string() : std::string("off"));
  arm_accept();
  return {};
}

void Bridge::Impl::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ec;
  if (started_) {
    acceptor_.close(ec);
    ::unlink(opts.socket_path.c_str());
  }
  accept_retry_timer_.cancel();
  reopen_timer_.cancel();
  if (client_) {
    auto c = std::move(client_);
    c->close("console bridge stopped");
  }
  release_pty(false);
  pty_path_.reset();
  log_.reset();
  counters_.client_connected = false;
}

Status Bridge::Impl::attach(std::optional<std::filesystem::path> path, UniqueFd fd) {
  if (!started_ || stopped_) {
    return fail(std::errc::operation_not_permitted, "console bridge is not running (call start() first)");
  }
  release_pty(false);
  reopen_timer_.cancel();
  pty_path_ = std::move(path);
  if (pty_path_) {
    CHL_TRY(UniqueFd opened, open_pty_path(*pty_path_, opts.raw_pty));
    fd = std::move(opened);
  }
  if (!fd) return fail(std::errc::bad_file_descriptor, "console bridge: invalid PTY fd");
  return adopt(std::move(fd));
}

BridgeStats Bridge::Impl::stats() const {
  BridgeStats s;
  s.bytes_from_pty = counters_.bytes_from_pty;
  s.bytes_to_pty = counters_.bytes_to_pty;
  s.clients_accepted = counters_.clients_accepted;
  s.clients_refused = counters_.clients_refused;
  s.clients_dropped = counters_.clients_dropped;
  s.clients_taken_over = counters_.clients_taken_over;
  s.pty_hangups = counters_.pty_hangups;
  s.pty_returns = counters_.pty_returns;
  s.pty_wakeups = counters_.pty_wakeups;
  s.log_errors = counters_.log_errors;
  s.pty_up = counters_.pty_up;
  s.client_connected = counters_.client_connected;
  return s;
}

// ---- PTY side ------------------------------------------------------------------------------

Status Bridge::Impl::adopt(UniqueFd fd, bool wait_for_guest) {
  CHL_TRY_VOID(set_nonblocking(fd.get()).map_error([](common::Error e) { return e.wrap("PTY"); }));
  boost::system::error_code ec;
  int raw = fd.release();
  pty_.assign(raw, ec);
  if (ec) {
    ::close(raw);
    return fail(ec, "watching PTY");
  }
  ++generation_;
  pty_up_ = true;
  input_waits_for_guest_ = wait_for_guest;
  counters_.pty_up = true;
  ++counters_.pty_returns;
  CHL_LOG_INFO("console bridge: PTY {} attached", pty_path_ ? pty_path_->string() : "fd");
  arm_pty_read();
  flush_input();
  if (pending_input_.empty()) arm_client_read();
  return {};
}

// Take the PTY fd out of the event loop; close it, or keep it parked to watch for its return.
void Bridge::Impl::release_pty(bool keep_parked) {
  ++generation_;
  pty_up_ = false;
  counters_.pty_up = false;
  pty_read_armed_ = false;
  pty_write_armed_ = false;
  if (!keep_parked) parked_.reset();
  if (!pty_.is_open()) return;
  int fd = pty_.release();  // cancels the pending waits; they complete as aborted
  if (keep_parked) {
    parked_.reset(fd);
  } else {
    ::close(fd);
  }
}

void Bridge::Impl::arm_pty_read() {
  if (!pty_up_ || pty_read_armed_) return;
  pty_read_armed_ = true;
  pty_.async_wait(asio::posix::stream_descriptor::wait_read,
                  [self = shared_from_this(), gen = generation_](const boost::system::error_code& ec) {
                    if (gen != self->generation_) return;
                    self->pty_read_armed_ = false;
                    if (ec || self->stopped_) return;
                    self->on_pty_readable();
                  });
}

void Bridge::Impl::on_pty_readable() {
  ++counters_.pty_wakeups;
  std::size_t filled = 0;
  std::string hangup_reason;
  // Gather up to one buffer per wakeup (one log write, one client write): a PTY read returns
  // at most what the line discipline holds (4 KiB), so read until EAGAIN or the buffer is full.
  while (filled < read_buf_.size()) {
    std::size_t want = read_buf_.size() - filled;
    ssize_t n = common::retry_eintr([&] { return ::read(pty_.native_handle(), read_buf_.data() + filled, want); });
    if (n > 0) {
      filled += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) {
      hangup_reason = "end of file";
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
      hangup_reason = std::strerror(errno);  // EIO: the other side of the PTY is closed
    }
    break;
  }
  if (filled > 0) {
    deliver({read_buf_.data(), filled});
    if (input_waits_for_guest_) {  // the guest side is back: held input may go now
      input_waits_for_guest_ = false;
      flush_input();
      if (pending_input_.empty()) arm_client_read();
    }
  }
  if (stopped_) return;
  if (!hangup_reason.empty()) {
    hangup(hangup_reason);
  } else {
    arm_pty_read();  // re-arming re-checks readiness: what is left is reported at once
  }
}

void Bridge::Impl::deliver(std::span<const char> data) {
  // The client first (latency), then the log and the scrollback.
  if (client_) client_->send(data);  // may drop the client (it resets client_ then)
  if (log_) {
    if (auto st = log_->append(data); !st) {
      auto n = ++counters_.log_errors;
      if (n == 1 || n % 1024 == 0) CHL_LOG_ERROR("console log ({} errors): {}", n, st.error().message());
    }
  }
  scrollback_.append(data);
  counters_.bytes_from_pty += data.size();  // after the log: a reader of stats() finds it there
}

void Bridge::Impl::hangup(const std::string& why) {
  if (!pty_up_) return;
  ++counters_.pty_hangups;
  CHL_LOG_WARN("console bridge: PTY hung up ({}); waiting for it to come back", why);
  // Keep the hung-up fd (parked, out of the event loop). By fd: it is watched for the other side's
  // return. By path: holding it keeps the kernel from giving its /dev/pts/N number to the next
  // terminal opened on this machine; closing it and reopening the path later would attach the
  // bridge to whatever terminal got the number (another PTY pair, someone's shell) and read its
  // input. See try_return().
  release_pty(true);
  arm_reopen();
}

void Bridge::Impl::arm_reopen() {
  if (reopen_armed_ || stopped_) return;
  reopen_armed_ = true;
  reopen_timer_.expires_after(opts.reopen_interval);
  reopen_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    self->reopen_armed_ = false;
    if (ec || self->stopped_ || self->pty_up_) return;
    self->try_return();
  });
}

void Bridge::Impl::try_return() {
  ++counters_.pty_wakeups;
  if (!parked_) return;  // nothing to wait for: a new PTY must be attached
  if (!pty_path_) {
    // By fd: the master stops reporting the hangup once the old slave is released.
    if (!pty_hung_up(parked_.get())) {
      if (auto st = adopt(std::move(parked_), true); !st) CHL_LOG_ERROR("console bridge: {}", st.error().message());
      return;
    }
  } else if (auto fd = open_pty_path(*pty_path_, false); fd) {
    // By path: the slave was hung up (vhangup) while its master stayed open, so the path still
    // leads to the same PTY — the parked fd pins its number, so it cannot be another terminal's.
    // When the master is gone the path does not exist (open fails): the VMM's next PTY comes
    // with a new number through attach_pty_path(). Identity is checked before anything (raw
    // mode) is done to the terminal.
    if (same_file(fd->get(), parked_.get()) && !pty_hung_up(fd->get())) {
      Status st = opts.raw_pty ? make_raw(fd->get(), *pty_path_) : Status{};
      if (st) st = adopt(std::move(*fd));
      if (st) {
        parked_.reset();
        return;
      }
      CHL_LOG_ERROR("console bridge: {}", st.error().message());
    }
  }
  arm_reopen();
}

void Bridge::Impl::flush_input() {
  if (!pty_up_ || pty_write_armed_ || input_waits_for_guest_) return;
  while (pending_off_ < pending_input_.size()) {
    const char* p = pending_input_.data() + pending_off_;
    std::size_t len = pending_input_.size() - pending_off_;
    ssize_t n = common::retry_eintr([&] { return ::write(pty_.native_handle(), p, len); });
    if (n > 0) {
      pending_off_ += static_cast<std::size_t>(n);
      counters_.bytes_to_pty += static_cast<std::uint64_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      arm_pty_write();  // the PTY is full: the client is not read until it drains
      return;
    }
    hangup(n == 0 ? std::string("write returned 0") : std::string(std::strerror(errno)));
    return;
  }
  pending_input_.clear();
  pending_off_ = 0;
}

void Bridge::Impl::arm_pty_write() {
  pty_write_armed_ = true;
  pty_.async_wait(asio::posix::stream_descriptor::wait_write,
                  [self = shared_from_this(), gen = generation_](const boost::system::error_code& ec) {
                    if (gen != self->generation_) return;
                    self->pty_write_armed_ = false;
                    if (ec || self->stopped_) return;
                    ++self->counters_.pty_wakeups;
                    self->flush_input();
                    if (self->pending_input_.empty()) self->arm_client_read();
                  });
}

// ---- client side ---------------------------------------------------------------------------

void Bridge::Impl::arm_accept() {
  if (stopped_) return;
  acceptor_.async_accept([self = shared_from_this()](const boost::system::error_code& ec,
                                                     asio::local::stream_protocol::socket socket) {
    self->on_accept(ec, std::move(socket));
  });
}

void Bridge::Impl::on_accept(const boost::system::error_code& ec, asio::local::stream_protocol::socket socket) {
  if (stopped_ || ec == asio::error::operation_aborted) return;
  if (ec) {
    CHL_LOG_ERROR("console bridge: accept on {}: {}", opts.socket_path.string(), ec.message());
    // Out of fds or memory: try again a little later instead of spinning on the backlog.
    accept_retry_timer_.expires_after(kAcceptRetry);
    accept_retry_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& e) {
      if (!e) self->arm_accept();
    });
    return;
  }
  boost::system::error_code nb;
  socket.non_blocking(true, nb);
  auto session = std::make_shared<ClientSession>(std::move(socket), opts.client_buffer_bytes, next_client_id_++);
  if (nb) {
    session->close("setting the client socket non-blocking: " + nb.message());
    arm_accept();
    return;
  }
  if (client_ && client_->is_open() && client_->peer_hung_up()) {
    // The previous client went away; its EOF is just not read yet. Not a second session.
    client_->close("the client disconnected");
  }
  if (client_ && client_->is_open()) {
    if (!opts.take_over) {
      ++counters_.clients_refused;
      session->close_with_notice(kSessionActiveNotice, "refused: a console session is already active");
      arm_accept();
      return;
    }
    ++counters_.clients_taken_over;
    auto old = std::move(client_);
    old->close_with_notice(kTakenOverNotice, "taken over by client " + std::to_string(session->id()));
  }
  ++counters_.clients_accepted;
  std::weak_ptr<Impl> weak = shared_from_this();
  session->set_on_closed([weak](ClientSession& s, const std::string&, bool dropped) {
    auto self = weak.lock();
    if (!self) return;
    if (dropped) ++self->counters_.clients_dropped;
    if (self->client_.get() == &s) {
      self->client_.reset();
      self->counters_.client_connected = false;
    }
  });
  client_ = session;
  counters_.client_connected = true;
  CHL_LOG_INFO("console client {} connected", session->id());
  if (std::string sb = scrollback_.contents(); !sb.empty()) session->send(sb);
  arm_client_read();
  arm_accept();
}

void Bridge::Impl::arm_client_read() {
  if (!client_ || client_->reading || !client_->is_open() || !pending_input_.empty()) return;
  auto s = client_;
  s->reading = true;
  s->socket().async_wait(asio::local::stream_protocol::socket::wait_read,
                         [self = shared_from_this(), s](const boost::system::error_code& ec) {
                           s->reading = false;
                           if (ec || self->stopped_ || s != self->client_ || !s->is_open()) return;
                           self->on_client_readable();
                         });
}

void Bridge::Impl::on_client_readable() {
  auto s = client_;
  ssize_t n = common::retry_eintr(
      [&] { return ::read(s->socket().native_handle(), input_buf_.data(), input_buf_.size()); });
  if (n == 0) {
    s->close("client disconnected");
    return;
  }
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      arm_client_read();
    } else {
      s->close(std::string("reading from client: ") + std::strerror(errno));
    }
    return;
  }
  pending_input_.assign(input_buf_.data(), static_cast<std::size_t>(n));
  pending_off_ = 0;
  flush_input();  // while the PTY is down or full the input waits here and the client is not read
  if (pending_input_.empty()) arm_client_read();
}

// ---- public face ---------------------------------------------------------------------------

Bridge::Bridge(asio::io_context& io, BridgeOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(options))) {}

Bridge::~Bridge() { impl_->stop(); }

Status Bridge::start() { return impl_->start().map_error([](common::Error e) { return e.wrap("console bridge"); }); }

Status Bridge::attach_pty_path(const std::filesystem::path& path) {
  return impl_->attach(path, UniqueFd{}).map_error([](common::Error e) { return e.wrap("console bridge"); });
}

Status Bridge::attach_pty_fd(UniqueFd fd) {
  return impl_->attach(std::nullopt, std::move(fd)).map_error([](common::Error e) {
    return e.wrap("console bridge");
  });
}

void Bridge::stop() { impl_->stop(); }

BridgeStats Bridge::stats() const { return impl_->stats(); }

const BridgeOptions& Bridge::options() const { return impl_->opts; }

}  // namespace chl::console_bridge

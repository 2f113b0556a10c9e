#include "console_bridge/client_session.hpp"

#include <poll.h>

#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "common/log.hpp"
#include "common/syscall.hpp"

namespace chl::console_bridge {

namespace {
constexpr std::size_t kMaxIov = 64;
constexpr int kMaxSendsPerWakeup = 4;
}  // namespace

ClientSession::ClientSession(Socket socket, std::size_t max_queued, std::uint64_t id)
    : socket_(std::move(socket)), max_queued_(max_queued), id_(id) {}

long ClientSession::send_now(const char* data, std::size_t len) {
  ssize_t n = common::retry_eintr(
      [&] { return ::send(socket_.native_handle(), data, len, MSG_NOSIGNAL | MSG_DONTWAIT); });
  if (n >= 0) return n;
  if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
  return -1;
}

bool ClientSession::send(std::span<const char> data) {
  if (!open_) return false;
  if (data.empty()) return true;
  const char* p = data.data();
  std::size_t len = data.size();
  if (queued_ == 0 && !write_waiting_) {  // fast path: straight to the socket
    long n = send_now(p, len);
    if (n < 0) {
      close(std::string("write to client failed: ") + std::strerror(errno));
      return false;
    }
    p += n;
    len -= static_cast<std::size_t>(n);
    if (len == 0) return true;
  }
  if (queued_ + len > max_queued_) {
    close("client is not reading: " + std::to_string(queued_ + len) +
              " bytes of output would pass its buffer of " + std::to_string(max_queued_),
          true);
    return false;
  }
  queue_.emplace_back(p, len);
  queued_ += len;
  if (!write_waiting_) {
    write_waiting_ = true;
    socket_.async_wait(Socket::wait_write,
                       [self = shared_from_this()](const boost::system::error_code& ec) {
                         self->on_writable(ec);
                       });
  }
  return true;
}

void ClientSession::on_writable(const boost::system::error_code& ec) {
  write_waiting_ = false;
  if (!open_) return;
  if (ec) {
    close("waiting to write to client: " + ec.message());
    return;
  }
  flush();
}

void ClientSession::flush() {
  for (int round = 0; round < kMaxSendsPerWakeup && queued_ > 0; ++round) {
    std::array<iovec, kMaxIov> iov{};
    std::size_t count = 0;
    for (auto it = queue_.begin(); it != queue_.end() && count < kMaxIov; ++it, ++count) {
      std::size_t off = (count == 0) ? front_offset_ : 0;
      iov[count].iov_base = const_cast<char*>(it->data() + off);
      iov[count].iov_len = it->size() - off;
    }
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = count;
    ssize_t n = common::retry_eintr(
        [&] { return ::sendmsg(socket_.native_handle(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT); });
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      close(std::string("write to client failed: ") + std::strerror(errno));
      return;
    }
    auto sent = static_cast<std::size_t>(n);
    queued_ -= sent;
    while (sent > 0) {
      std::size_t avail = queue_.front().size() - front_offset_;
      if (sent >= avail) {
        sent -= avail;
        queue_.pop_front();
        front_offset_ = 0;
      } else {
        front_offset_ += sent;
        sent = 0;
      }
    }
  }
  if (queued_ > 0 && !write_waiting_) {
    write_waiting_ = true;
    socket_.async_wait(Socket::wait_write,
                       [self = shared_from_this()](const boost::system::error_code& ec) {
                         self->on_writable(ec);
                       });
  }
}

bool ClientSession::peer_hung_up() {
  if (!open_) return true;
  pollfd p{socket_.native_handle(), POLLIN, 0};
  int r = ::poll(&p, 1, 0);
  // A half-closed peer (shutdown(SHUT_WR), e.g. `echo cmd | socat`) only sets POLLRDHUP and
  // still reads the guest's output: it stays. A closed peer sets POLLHUP on a Unix socket.
  return r > 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0;
}

void ClientSession::close_with_notice(std::string_view notice, const std::string& reason) {
  if (!open_) return;
  if (queued_ == 0) (void)send_now(notice.data(), notice.size());
  close(reason);
}

void ClientSession::close(const std::string& reason, bool dropped) {
  if (!open_) return;
  auto self = shared_from_this();  // the handler may release the last owner
  open_ = false;
  queue_.clear();
  queued_ = 0;
  boost::system::error_code ignored;
  socket_.shutdown(Socket::shutdown_both, ignored);
  socket_.close(ignored);
  if (dropped) {
    CHL_LOG_WARN("console client {} dropped: {}", id_, reason);
  } else {
    CHL_LOG_INFO("console client {} closed: {}", id_, reason);
  }
  if (on_closed_) {
    auto h = std::move(on_closed_);
    h(*this, reason, dropped);
  }
}

}  // namespace chl::console_bridge

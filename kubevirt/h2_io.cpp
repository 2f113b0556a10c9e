#include "kubevirt/h2_io.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace chl::kubevirt {

namespace {
constexpr std::size_t kChunk = 16 * 1024;
constexpr std::size_t kMaxPending = 64 * 1024;
constexpr int kMaxReadsPerPump = 8;  // then poll again: one busy peer does not starve the rest
}  // namespace

bool H2Io::pump_in(nghttp2_session* session, int fd) {
  std::uint8_t buf[kChunk];
  for (int i = 0; i < kMaxReadsPerPump; ++i) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    if (nghttp2_session_mem_recv(session, buf, static_cast<std::size_t>(n)) < 0) return false;
    if (static_cast<std::size_t>(n) < sizeof buf) return true;
  }
  return true;
}

bool H2Io::pump_out(nghttp2_session* session, int fd) {
  for (;;) {
    while (pending_.size() - off_ < kMaxPending) {
      const std::uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session, &data);
      if (n < 0) return false;
      if (n == 0) break;
      if (off_ == pending_.size()) {
        pending_.clear();
        off_ = 0;
      }
      pending_.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
    }
    if (off_ == pending_.size()) return true;
    const ssize_t w = ::send(fd, pending_.data() + off_, pending_.size() - off_, MSG_NOSIGNAL);
    if (w < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    off_ += static_cast<std::size_t>(w);
    if (off_ == pending_.size()) {
      pending_.clear();
      off_ = 0;
    }
  }
}

}  // namespace chl::kubevirt

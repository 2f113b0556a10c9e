#include "vmm_api/unix_http.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/syscall.hpp"
#include "common/unique_fd.hpp"
#include "common/unix_socket.hpp"
#include "vmm_api/error.hpp"

namespace chl::vmm_api {
namespace {

using common::fail;
using common::fail_errno;
using common::Result;
using common::Status;
using common::UniqueFd;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxFds = 253;  // SCM_MAX_FD

// Milliseconds left until the deadline, rounded up; 0 when it has passed.
int remaining_ms(Clock::time_point deadline) {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) {
    return 0;
  }
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(ms);
}

// Wait for `events` on fd until the deadline. Ok(false) on timeout.
Result<bool> wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const int ms = remaining_ms(deadline);
    if (ms == 0) {
      return false;
    }
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, ms);
    if (r < 0) {
      if (errno == EINTR) {
        continue;
      }
      return fail_errno("poll");
    }
    if (r > 0) {
      return true;  // ready, or an error/hangup the next syscall will report
    }
  }
}

Result<UniqueFd> connect_unix(const std::string& path, Clock::time_point deadline) {
  CHL_TRY(sockaddr_un addr, common::wrap(common::unix_address(path), "API socket"));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) {
    return fail_errno("socket(AF_UNIX)");
  }
  for (;;) {
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
      return fd;
    }
    const int err = errno;
    switch (err) {
      case EINTR:
        continue;
      case EISCONN:
        return fd;
      case ENOENT:
      case ENOTDIR:
        return fail(ApiErrc::socket_missing, "API socket " + path + " does not exist");
      case ECONNREFUSED:
        return fail(ApiErrc::connection_refused,
                    "API socket " + path + " refused the connection (nobody listening)");
      case EAGAIN: {
        // The listener's backlog is full (a busy or stuck VMM): try again until the deadline.
        if (remaining_ms(deadline) == 0) {
          return fail(ApiErrc::timeout, "connecting to " + path + ": backlog full until deadline");
        }
        pollfd none{-1, 0, 0};
        ::poll(&none, 1, 2);
        continue;
      }
      case EINPROGRESS: {
        CHL_TRY(bool ready, wait_fd(fd.get(), POLLOUT, deadline));
        if (!ready) {
          return fail(ApiErrc::timeout, "connecting to " + path + ": timed out");
        }
        int so_error = 0;
        socklen_t len = sizeof(so_error);
        if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) {
          return fail_errno("getsockopt(SO_ERROR)");
        }
        if (so_error == 0) {
          return fd;
        }
        if (so_error == ECONNREFUSED) {
          return fail(ApiErrc::connection_refused,
                      "API socket " + path + " refused the connection");
        }
        return fail_errno(so_error, "connecting to " + path);
      }
      default:
        return fail_errno(err, "connecting to " + path);
    }
  }
}

// Write all of `data`; the fds ride on the first sendmsg that moves any byte.
Status send_all(int fd, std::string_view data, std::span<const int> fds,
                Clock::time_point deadline) {
  if (fds.size() > kMaxFds) {
    return fail(std::errc::argument_list_too_long, "cannot pass more than 253 fds in one request");
  }
  std::vector<char> control;
  bool fds_sent = fds.empty();
  while (!data.empty()) {
    iovec iov{const_cast<char*>(data.data()), data.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (!fds_sent) {
      control.assign(CMSG_SPACE(sizeof(int) * fds.size()), 0);
      msg.msg_control = control.data();
      msg.msg_controllen = control.size();
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    const ssize_t n = common::retry_eintr([&] { return ::sendmsg(fd, &msg, MSG_NOSIGNAL); });
    if (n < 0) {
      const int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK) {
        CHL_TRY(bool ready, wait_fd(fd, POLLOUT, deadline));
        if (!ready) {
          return fail(ApiErrc::timeout, "sending the request: timed out");
        }
        continue;
      }
      if (err == EPIPE || err == ECONNRESET) {
        return fail(ApiErrc::connection_closed,
                    "sending the request: the VMM closed the connection");
      }
      return fail_errno(err, "sending the request");
    }
    fds_sent = true;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

Result<HttpResponse> read_response(int fd, Clock::time_point deadline) {
  HttpResponseParser parser;
  char buf[16384];
  for (;;) {
    const ssize_t n = common::retry_eintr([&] { return ::read(fd, buf, sizeof(buf)); });
    if (n > 0) {
      if (parser.feed(std::string_view(buf, static_cast<std::size_t>(n))) !=
          HttpResponseParser::State::need_more) {
        break;
      }
      continue;
    }
    if (n == 0) {
      parser.finish_eof();
      break;
    }
    const int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      CHL_TRY(bool ready, wait_fd(fd, POLLIN, deadline));
      if (!ready) {
        return fail(ApiErrc::timeout, parser.started()
                                          ? "waiting for the rest of the answer: timed out"
                                          : "waiting for the answer: timed out");
      }
      continue;
    }
    if (err == ECONNRESET) {
      return fail(ApiErrc::connection_closed, "reading the answer: connection reset by the VMM");
    }
    return fail_errno(err, "reading the answer");
  }
  if (parser.state() == HttpResponseParser::State::done) {
    return std::move(parser.response());
  }
  if (!parser.started()) {
    return fail(ApiErrc::connection_closed, "the VMM closed the connection without answering");
  }
  return fail(ApiErrc::malformed_response, "malformed response: " + parser.error());
}

}  // namespace

std::string format_request(const HttpRequest& req) {
  // The same header set as Cloud Hypervisor's own api_client: CH's HTTP server (micro_http)
  // refuses a body on body-less actions, so without one we send no Content-Length at all.
  std::string out;
  out.reserve(128 + (req.body ? req.body->size() : 0));
  out.append(req.method).append(" ").append(req.target).append(" HTTP/1.1\r\n");
  out.append("Host: localhost\r\nAccept: */*\r\n");
  if (req.body) {
    out.append("Content-Length: ").append(std::to_string(req.body->size())).append("\r\n");
  }
  out.append("\r\n");
  if (req.body) {
    out.append(*req.body);
  }
  return out;
}

common::Result<HttpResponse> unix_http_request(const std::string& socket_path,
                                               const HttpRequest& req, Clock::time_point deadline) {
  CHL_TRY(UniqueFd fd, connect_unix(socket_path, deadline));
  CHL_TRY_VOID(send_all(fd.get(), format_request(req), req.fds, deadline));
  return read_response(fd.get(), deadline);
}

}  // namespace chl::vmm_api

#include "tests/vmm_double/http_server.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/syscall.hpp"

namespace chl::vmm_double {

namespace {

constexpr std::size_t kMaxHeader = 64 * 1024;
constexpr std::size_t kMaxBody = 4 * 1024 * 1024;
constexpr std::size_t kMaxFdsPerMsg = 64;

void set_nonblock_cloexec(int fd) {
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) (void)::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  const int fdf = ::fcntl(fd, F_GETFD);
  if (fdf >= 0) (void)::fcntl(fd, F_SETFD, fdf | FD_CLOEXEC);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

std::string http_response(int status, const std::string& body) {
  // micro_http: status line without reason phrase; 204 (and 1xx) carry no Content-Length.
  std::string r = "HTTP/1.1 " + std::to_string(status) +
                  " \r\nServer: Cloud Hypervisor API\r\nConnection: keep-alive\r\n";
  if (status != 204) {
    r +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  r += "\r\n";
  if (status != 204) r += body;
  return r;
}

common::Status HttpServer::listen_path(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) {
    return common::fail(std::errc::filename_too_long, "api socket path too long: " + path);
  }
  common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return common::fail_errno("socket");
  ::unlink(path.c_str());  // a stale socket from a crashed run
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return common::fail_errno("bind " + path);
  }
  if (::listen(fd.get(), 64) != 0) return common::fail_errno("listen " + path);
  listener_ = std::move(fd);
  path_ = path;
  return {};
}

common::Status HttpServer::adopt_fd(int fd) {
  int type = 0;
  socklen_t len = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0)
    return common::fail_errno("api socket fd=" + std::to_string(fd));
  int acc = 0;
  len = sizeof acc;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len) != 0 || !acc) {
    return common::fail(std::errc::invalid_argument,
                        "api socket fd=" + std::to_string(fd) + " is not listening");
  }
  listener_.reset(fd);
  set_nonblock_cloexec(fd);
  return {};
}

HttpServer::~HttpServer() { close_listener(); }

void HttpServer::close_listener() {
  listener_.reset();
  if (!path_.empty()) {
    ::unlink(path_.c_str());
    path_.clear();
  }
}

void HttpServer::fill_poll(std::vector<pollfd>& fds, std::vector<std::uint64_t>& tags) const {
  if (listener_) {
    fds.push_back({listener_.get(), POLLIN, 0});
    tags.push_back(0);
  }
  for (const auto& [id, c] : conns_) {
    short ev = 0;
    if (!c.closing && c.in.size() < kMaxHeader + kMaxBody) ev |= POLLIN;
    if (!c.out.empty()) ev |= POLLOUT;
    fds.push_back({c.fd.get(), ev, 0});
    tags.push_back(id);
  }
}

void HttpServer::handle(std::uint64_t tag, short revents) {
  if (tag == 0) {
    accept_all();
    return;
  }
  auto it = conns_.find(tag);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  if (revents & POLLOUT) write_conn(c);
  if (revents & (POLLIN | POLLHUP | POLLERR)) read_conn(tag, c);
  // Closed and nothing left to say (a held request keeps nothing alive: its peer is gone).
  if (!c.fd || (c.closing && c.out.empty())) conns_.erase(it);
}

void HttpServer::accept_all() {
  for (;;) {
    const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN or an error: back to the loop
    Conn c;
    c.fd.reset(fd);
    conns_.emplace(next_id_++, std::move(c));
  }
}

void HttpServer::read_conn(std::uint64_t /*id*/, Conn& c) {
  char buf[65536];
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFdsPerMsg)];
  for (;;) {
    iovec iov{buf, sizeof buf};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf;
    msg.msg_controllen = sizeof cbuf;
    const ssize_t n =
        common::retry_eintr([&] { return ::recvmsg(c.fd.get(), &msg, MSG_CMSG_CLOEXEC); });
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      c.closing = true;
      c.out.clear();
      return;
    }
    for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm != nullptr; cm = CMSG_NXTHDR(&msg, cm)) {
      if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
        c.fds.emplace_back(fd);
      }
    }
    if (n == 0) {
      c.closing = true;
      return;
    }
    c.in.append(buf, static_cast<std::size_t>(n));
    if (c.in.size() >= kMaxHeader + kMaxBody) return;
  }
}

void HttpServer::write_conn(Conn& c) {
  while (!c.out.empty()) {
    const ssize_t n = common::retry_eintr([&] {
      return ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    });
    if (n > 0) {
      c.out.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    c.out.clear();
    c.closing = true;
    return;
  }
}

std::optional<HttpRequest> HttpServer::next_request() {
  for (auto& [id, c] : conns_) {
    if (c.waiting || c.closing || !c.fd) continue;
    const auto head_end = c.in.find("\r\n\r\n");
    if (head_end == std::string::npos) {
      if (c.in.size() > kMaxHeader) {
        c.out += http_response(400, "");
        c.closing = true;
      }
      continue;
    }
    // Request line and headers.
    const std::string head = c.in.substr(0, head_end);
    const auto line_end = head.find("\r\n");
    const std::string line = head.substr(0, line_end);
    const auto sp1 = line.find(' ');
    const auto sp2 = line.find(' ', sp1 == std::string::npos ? 0 : sp1 + 1);
    if (sp1 == std::string::npos || sp2 == std::string::npos) {
      c.out += http_response(400, "");
      c.closing = true;
      continue;
    }
    HttpRequest req;
    req.conn = id;
    req.method = line.substr(0, sp1);
    std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    if (target.rfind("http://", 0) == 0) {
      const auto slash = target.find('/', 7);
      target = slash == std::string::npos ? "/" : target.substr(slash);
    }
    if (const auto q = target.find('?'); q != std::string::npos) target.resize(q);
    req.path = target;
    std::size_t content_length = 0;
    bool expect_continue = false;
    std::size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      auto eol = head.find("\r\n", pos);
      if (eol == std::string::npos) eol = head.size();
      const std::string h = head.substr(pos, eol - pos);
      pos = eol + 2;
      const auto colon = h.find(':');
      if (colon == std::string::npos) continue;
      const std::string name = lower(h.substr(0, colon));
      std::string value = h.substr(colon + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      if (name == "content-length") {
        content_length = static_cast<std::size_t>(std::strtoull(value.c_str(), nullptr, 10));
      } else if (name == "expect" && lower(value) == "100-continue") {
        expect_continue = true;
      }
    }
    if (content_length > kMaxBody) {
      c.out += http_response(400, "");
      c.closing = true;
      continue;
    }
    const std::size_t total = head_end + 4 + content_length;
    if (c.in.size() < total) {
      if (expect_continue && !c.sent_continue) {
        c.out += "HTTP/1.1 100 \r\n\r\n";
        c.sent_continue = true;
        write_conn(c);
      }
      continue;
    }
    if (content_length > 0) req.body = c.in.substr(head_end + 4, content_length);
    c.in.erase(0, total);
    c.sent_continue = false;
    req.fds = std::move(c.fds);
    c.fds.clear();
    c.waiting = true;
    return req;
  }
  return std::nullopt;
}

void HttpServer::respond(std::uint64_t conn, int status, const std::string& body) {
  auto it = conns_.find(conn);
  if (it == conns_.end()) return;  // peer went away while we were busy
  it->second.waiting = false;
  it->second.out += http_response(status, body);
  write_conn(it->second);
}

void HttpServer::drain(int budget_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(budget_ms);
  for (;;) {
    std::vector<pollfd> fds;
    for (auto& [id, c] : conns_) {
      if (!c.out.empty() && c.fd) fds.push_back({c.fd.get(), POLLOUT, 0});
    }
    if (fds.empty()) return;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return;
    (void)::poll(fds.data(), fds.size(), static_cast<int>(left));
    for (auto& [id, c] : conns_) {
      if (!c.out.empty() && c.fd) write_conn(c);
    }
  }
}

}  // namespace chl::vmm_double

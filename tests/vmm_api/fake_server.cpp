#include "tests/vmm_api/fake_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

#include "common/unix_socket.hpp"

namespace chl::test {

using common::UniqueFd;

std::string http_response(int status, const std::string& reason, const std::string& body) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\n";
  out += "Server: fake\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  out += body;
  return out;
}

FakeServer::FakeServer(const std::string& path, Handler handler) : handler_(std::move(handler)) {
  auto bound = chl::common::listen_unix(path);
  if (!bound) throw std::runtime_error("fake server: " + bound.error().message());
  listen_fd_ = std::move(*bound);
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    throw std::runtime_error("fake server: pipe");
  }
  stop_r_.reset(p[0]);
  stop_w_.reset(p[1]);
  thread_ = std::thread([this] { run(); });
}

FakeServer::~FakeServer() {
  const char c = 'x';
  (void)!::write(stop_w_.get(), &c, 1);
  thread_.join();
}

void FakeServer::run() {
  for (;;) {
    pollfd p[2] = {{listen_fd_.get(), POLLIN, 0}, {stop_r_.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      continue;
    }
    if (p[1].revents) {
      return;
    }
    if (p[0].revents & POLLIN) {
      UniqueFd conn(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (conn) {
        serve(conn.get());
      }
    }
  }
}

void FakeServer::serve(int conn) {
  FakeRequest req;
  std::size_t header_end = std::string::npos;
  std::size_t content_length = 0;
  for (;;) {
    pollfd p[2] = {{conn, POLLIN, 0}, {stop_r_.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      continue;
    }
    if (p[1].revents) {
      return;
    }
    char buf[4096];
    char control[CMSG_SPACE(sizeof(int) * 16)];
    iovec iov{buf, sizeof(buf)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(conn, &msg, MSG_CMSG_CLOEXEC);
    if (n <= 0) {
      return;
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < count; ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          req.fds.emplace_back(fd);
        }
      }
    }
    req.raw.append(buf, static_cast<std::size_t>(n));
    if (header_end == std::string::npos) {
      header_end = req.raw.find("\r\n\r\n");
      if (header_end != std::string::npos) {
        const auto cl = req.raw.find("Content-Length: ");
        if (cl != std::string::npos && cl < header_end) {
          content_length = std::stoul(req.raw.substr(cl + 16));
        }
      }
    }
    if (header_end != std::string::npos && req.raw.size() >= header_end + 4 + content_length) {
      break;
    }
  }
  req.body = req.raw.substr(header_end + 4);
  requests_++;
  auto answer = handler_(req);
  pollfd pending{listen_fd_.get(), POLLIN, 0};
  if (::poll(&pending, 1, 0) > 0 && (pending.revents & POLLIN)) {
    concurrent_ = true;
  }
  if (!answer) {
    // Never answer: hold the connection until the client gives up or the server stops.
    for (;;) {
      pollfd p[2] = {{conn, POLLIN, 0}, {stop_r_.get(), POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) {
        continue;
      }
      if (p[1].revents) {
        return;
      }
      char b[256];
      if (::read(conn, b, sizeof(b)) <= 0) {
        return;
      }
    }
  }
  std::string_view rest(*answer);
  while (!rest.empty()) {
    const ssize_t w = ::send(conn, rest.data(), rest.size(), MSG_NOSIGNAL);
    if (w <= 0) {
      return;
    }
    rest.remove_prefix(static_cast<std::size_t>(w));
  }
}

}  // namespace chl::test

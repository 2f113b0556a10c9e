#include "control/command_client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "common/syscall.hpp"
#include "common/unique_fd.hpp"
#include "common/unix_socket.hpp"

namespace chl::control {
using common::fail;
using common::fail_errno;
using common::Result;
using common::UniqueFd;

namespace {

Result<UniqueFd> connect_to(const std::filesystem::path& path) {
  auto fd = common::connect_unix(path);
  if (fd) return fd;
  const std::error_code& ec = fd.error().code;
  if (ec == std::errc::no_such_file_or_directory) return fail(ec, "no launcher socket at " + path.string() + " (is the VM running?)");
  if (ec == std::errc::connection_refused) return fail(ec, "no launcher listening on " + path.string() + " (stale socket)");
  return fd;
}

common::Status send_all(int fd, const std::string& data) {
  std::size_t off = 0;
  while (off < data.size()) {
    ssize_t n = common::retry_eintr([&] { return ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL); });
    if (n < 0) return fail_errno("send");
    off += static_cast<std::size_t>(n);
  }
  return {};
}

std::string request_text(const std::string& method, const std::string& target, const std::string& body) {
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n";
  if (!body.empty()) req += "Content-Type: application/json\r\n";
  req += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  return req;
}

// Parse the status line and split off the header; returns the header length or npos.
std::size_t parse_head(const std::string& buf, int& status) {
  auto end = buf.find("\r\n\r\n");
  if (end == std::string::npos) return std::string::npos;
  auto sp = buf.find(' ');
  status = sp == std::string::npos ? 0 : std::atoi(buf.c_str() + sp + 1);
  return end + 4;
}

}  // namespace

Result<CommandResponse> command_request(const std::filesystem::path& socket, const std::string& method,
                                        const std::string& target, const std::string& body,
                                        std::chrono::milliseconds timeout) {
  CHL_TRY(UniqueFd fd, connect_to(socket));
  CHL_TRY_VOID(send_all(fd.get(), request_text(method, target, body)));
  std::string buf;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char chunk[8192];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return fail(std::errc::timed_out, method + " " + target + ": no answer from the launcher within " + std::to_string(timeout.count()) + " ms");
    pollfd p{fd.get(), POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return fail_errno("poll");
    if (r == 0) continue;
    ssize_t n = common::retry_eintr([&] { return ::read(fd.get(), chunk, sizeof chunk); });
    if (n < 0) return fail_errno("read");
    if (n == 0) break;
    buf.append(chunk, static_cast<std::size_t>(n));
  }
  CommandResponse resp;
  auto head = parse_head(buf, resp.status);
  if (head == std::string::npos || resp.status == 0) return fail(std::errc::bad_message, method + " " + target + ": malformed answer from the launcher");
  resp.body = buf.substr(head);
  return resp;
}

common::Status command_stream(const std::filesystem::path& socket, const std::string& target,
                              const std::function<bool(const std::string&)>& on_line) {
  CHL_TRY(UniqueFd fd, connect_to(socket));
  CHL_TRY_VOID(send_all(fd.get(), request_text("GET", target, {})));
  std::string buf;
  bool in_body = false;
  char chunk[8192];
  for (;;) {
    ssize_t n = common::retry_eintr([&] { return ::read(fd.get(), chunk, sizeof chunk); });
    if (n < 0) return fail_errno("read");
    if (n == 0) return {};
    buf.append(chunk, static_cast<std::size_t>(n));
    if (!in_body) {
      int status = 0;
      auto head = parse_head(buf, status);
      if (head == std::string::npos) continue;
      if (status != 200) return fail(std::errc::protocol_error, "GET " + target + ": HTTP " + std::to_string(status) + ": " + buf.substr(head));
      buf.erase(0, head);
      in_body = true;
    }
    std::size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (!on_line(line)) return {};
    }
  }
}

}  // namespace chl::control

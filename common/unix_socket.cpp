#include "common/unix_socket.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/syscall.hpp"

namespace chl::common {

Result<sockaddr_un> unix_address(const std::filesystem::path& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string& p = path.native();
  if (p.empty()) return fail(std::errc::invalid_argument, "empty socket path");
  if (p.size() >= sizeof addr.sun_path) {
    return fail(std::errc::filename_too_long, "socket path " + p + " is " + std::to_string(p.size()) +
                                                  " bytes, the limit is " + std::to_string(sizeof addr.sun_path - 1));
  }
  std::memcpy(addr.sun_path, p.c_str(), p.size() + 1);
  return addr;
}

Result<UniqueFd> connect_unix(const std::filesystem::path& path) {
  CHL_TRY(sockaddr_un addr, unix_address(path));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return fail_errno("socket(AF_UNIX)");
  if (retry_eintr([&] { return ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr); }) != 0) {
    return fail_errno("connecting to " + path.string());
  }
  return fd;
}

Result<UniqueFd> listen_unix(const std::filesystem::path& path, int backlog) {
  CHL_TRY(sockaddr_un addr, unix_address(path));
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return fail(std::errc::file_exists, path.string() + " exists and is not a socket");
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return fail_errno("removing the stale socket " + path.string());
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return fail_errno("socket(AF_UNIX)");
  const mode_t old = ::umask(0177);
  const int r = ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  const int bind_errno = errno;
  ::umask(old);
  if (r != 0) return fail_errno(bind_errno, "bind " + path.string());
  if (::listen(fd.get(), backlog) != 0) return fail_errno("listen " + path.string());
  return fd;
}

bool unix_socket_answers(const std::filesystem::path& path) { return connect_unix(path).has_value(); }

}  // namespace chl::common

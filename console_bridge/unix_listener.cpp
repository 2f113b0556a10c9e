#include "console_bridge/unix_listener.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "common/syscall.hpp"
#include "common/unix_socket.hpp"

namespace chl::console_bridge {

using common::fail;
using common::fail_errno;
using common::Result;
using common::Status;
using common::UniqueFd;

namespace {

// Fails if `path` exists and is not a stale socket.
Status check_existing(const std::filesystem::path& path, const sockaddr_un& addr) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    return fail_errno("stat " + path.string());
  }
  if (!S_ISSOCK(st.st_mode)) {
    return fail(std::errc::file_exists, path.string() + " exists and is not a socket");
  }
  UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!probe) return fail_errno("socket");
  int r = common::retry_eintr(
      [&] { return ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)); });
  if (r == 0) {
    return fail(std::errc::address_in_use, "another process is listening on " + path.string());
  }
  return {};  // ECONNREFUSED: stale, the rename below replaces it
}

}  // namespace

Result<UniqueFd> listen_unix(const ListenerOptions& opts) {
  CHL_TRY(sockaddr_un final_addr, common::unix_address(opts.path));
  CHL_TRY_VOID(check_existing(opts.path, final_addr));

  std::filesystem::path tmp = opts.path.parent_path() /
                              ("." + opts.path.filename().string() + "." + std::to_string(::getpid()));
  CHL_TRY(sockaddr_un tmp_addr, common::unix_address(tmp));
  if (::unlink(tmp.c_str()) != 0 && errno != ENOENT) return fail_errno("removing " + tmp.string());

  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return fail_errno("socket");
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&tmp_addr), sizeof(tmp_addr)) != 0) {
    return fail_errno("binding " + tmp.string());
  }
  auto cleanup_tmp = [&](tl::unexpected<common::Error> e) {
    ::unlink(tmp.c_str());
    return e;
  };
  if (::chmod(tmp.c_str(), opts.mode) != 0) return cleanup_tmp(fail_errno("chmod " + tmp.string()));
  if (opts.group && ::chown(tmp.c_str(), static_cast<uid_t>(-1), *opts.group) != 0) {
    return cleanup_tmp(fail_errno("chown " + tmp.string() + " to group " + std::to_string(*opts.group)));
  }
  if (::listen(fd.get(), opts.backlog) != 0) return cleanup_tmp(fail_errno("listen on " + tmp.string()));
  if (::rename(tmp.c_str(), opts.path.c_str()) != 0) {
    return cleanup_tmp(fail_errno("renaming " + tmp.string() + " to " + opts.path.string()));
  }
  return fd;
}

}  // namespace chl::console_bridge

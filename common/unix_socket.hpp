#pragma once
// Unix stream sockets: the one place that fills a sockaddr_un and connects to a path. Every
// socket of the launcher is one (CH's API socket, the command socket, virt-serial0, libvirt's).

#include <sys/un.h>

#include <filesystem>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace chl::common {

// The address of `path`; ENAMETOOLONG when it does not fit sun_path (107 bytes), EINVAL when empty.
Result<sockaddr_un> unix_address(const std::filesystem::path& path);

// A blocking, close-on-exec stream socket connected to `path`. The error keeps connect's errno
// (ENOENT: no socket there; ECONNREFUSED: nobody listening) for callers that explain it.
Result<UniqueFd> connect_unix(const std::filesystem::path& path);

// A listening, close-on-exec stream socket bound at `path`, created 0600. A stale socket left at
// `path` (a killed process's) is replaced; anything else there is refused (EEXIST), never removed.
Result<UniqueFd> listen_unix(const std::filesystem::path& path, int backlog = 16);

// Whether something accepts connections on `path` right now.
bool unix_socket_answers(const std::filesystem::path& path);

}  // namespace chl::common

#pragma once
// The listening Unix socket clients connect to (`virt-serial0`). It is bound under a temporary
// name, given its mode (and group) and only then renamed into place, so nobody can connect
// before the permissions are right. A stale socket left by a previous run is replaced; a live
// one (something accepts on it) or a path that is not a socket is an error.
#include <sys/types.h>

#include <filesystem>
#include <optional>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace chl::console_bridge {

struct ListenerOptions {
  std::filesystem::path path;
  mode_t mode = 0600;
  std::optional<gid_t> group;  // chown to this group (the caller sets mode 0660 with it)
  int backlog = 8;
};

// A listening, non-blocking, close-on-exec AF_UNIX stream socket at `opts.path`.
common::Result<common::UniqueFd> listen_unix(const ListenerOptions& opts);

}  // namespace chl::console_bridge

#pragma once
// Tap devices through /dev/net/tun: IFF_TAP|IFF_NO_PI|IFF_VNET_HDR (+IFF_MULTI_QUEUE with more
// than one queue pair), one fd per queue pair. The tap is made persistent so that it survives
// a VMM that closes its copies and can be named to libvirt (managed='no'); opening an existing
// persistent tap of the same name attaches to it (how a restarted launcher reuses it).
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace chl::network {

// Open (creating if needed) tap `name` with `queues` fds. Fails with EINVAL when a tap of that
// name exists with other flags (e.g. single- vs multi-queue): the caller deletes and retries.
common::Result<std::vector<common::UniqueFd>> open_tap(const std::string& name, std::uint32_t queues);
// TUNGETIFF on an fd: the tap's name, or an error if the fd is not a tun/tap device.
common::Result<std::string> tap_name_of_fd(int fd);

}  // namespace chl::network

#include "network/tap.hpp"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstring>

#include "common/syscall.hpp"

namespace chl::network {

common::Result<std::vector<common::UniqueFd>> open_tap(const std::string& name, std::uint32_t queues) {
  if (name.empty() || name.size() >= IFNAMSIZ)
    return common::fail(std::errc::invalid_argument, "tap name '" + name + "' must have 1 to 15 bytes");
  if (queues == 0) queues = 1;
  std::vector<common::UniqueFd> fds;
  for (std::uint32_t q = 0; q < queues; ++q) {
    common::UniqueFd fd(common::retry_eintr([] { return ::open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK); }));
    if (!fd) return common::fail_errno("opening /dev/net/tun for tap " + name);
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    if (queues > 1) ifr.ifr_flags |= IFF_MULTI_QUEUE;
    if (::ioctl(fd.get(), TUNSETIFF, &ifr) < 0)
      return common::fail_errno("TUNSETIFF tap " + name + " queue " + std::to_string(q));
    if (q == 0 && ::ioctl(fd.get(), TUNSETPERSIST, 1) < 0) return common::fail_errno("TUNSETPERSIST tap " + name);
    fds.push_back(std::move(fd));
  }
  return fds;
}

common::Result<std::string> tap_name_of_fd(int fd) {
  ifreq ifr{};
  if (::ioctl(fd, TUNGETIFF, &ifr) < 0) return common::fail_errno("TUNGETIFF on fd " + std::to_string(fd));
  if ((ifr.ifr_flags & IFF_TAP) == 0)
    return common::fail(std::errc::invalid_argument, std::string("fd is a tun device, not a tap: ") + ifr.ifr_name);
  return std::string(ifr.ifr_name);
}

}  // namespace chl::network

#include "tests/vmm_double/tap_device.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <net/if_arp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace chl::vmm_double {

std::string rust_os_error(int err) {
  return std::string(std::strerror(err)) + " (os error " + std::to_string(err) + ")";
}

namespace {

// sizeof(virtio_net_hdr_v1): net_util/src/lib.rs vnet_hdr_len.
constexpr int kVnetHdrLen = 12;

// tap.rs Error::IoctlError: "ioctl ({req}) failed: {io error}", then the io error as its source.
std::vector<std::string> ioctl_error(unsigned long req, int err) {
  return {"ioctl (" + std::to_string(req) + ") failed: " + rust_os_error(err), rust_os_error(err)};
}

std::vector<std::string> chain(std::vector<std::string> head,
                               const std::vector<std::string>& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

ifreq named_ifreq(const std::string& name) {
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  return ifr;
}

// net_util::create_unix_socket: the socket Tap's interface ioctls go through.
common::UniqueFd unix_dgram() {
  return common::UniqueFd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
}

// An ioctl on a fresh AF_UNIX datagram socket, as tap.rs does for every SIOC* call. Empty on
// success, else the tail of CH's chain ("Failed to create a socket" or the IoctlError).
std::vector<std::string> sock_ioctl(unsigned long req, ifreq& ifr) {
  auto sock = unix_dgram();
  if (!sock)
    return {"Failed to create a socket", "Failed to create a socket", rust_os_error(errno)};
  if (::ioctl(sock.get(), req, &ifr) != 0) return ioctl_error(req, errno);
  return {};
}

std::string format_mac(const unsigned char* b) {
  char buf[18];
  std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4],
                b[5]);
  return buf;
}

bool parse_mac(const std::string& s, unsigned char out[6]) {
  unsigned v[6];
  if (std::sscanf(s.c_str(), "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6)
    return false;
  for (int i = 0; i < 6; ++i) out[i] = static_cast<unsigned char>(v[i]);
  return true;
}

// Tap::get_mac_addr: SIOCGIFHWADDR.
std::vector<std::string> get_mac(const std::string& name, std::string& mac) {
  ifreq ifr = named_ifreq(name);
  if (auto e = sock_ioctl(SIOCGIFHWADDR, ifr); !e.empty()) return e;
  mac = format_mac(reinterpret_cast<const unsigned char*>(ifr.ifr_hwaddr.sa_data));
  return {};
}

// Tap::set_mac_addr: nothing when the tap already has it (the unprivileged case), else
// SIOCGIFHWADDR then SIOCSIFHWADDR.
std::vector<std::string> set_mac(const std::string& name, const std::string& want) {
  std::string have;
  if (auto e = get_mac(name, have); !e.empty()) return e;
  unsigned char bytes[6];
  if (!parse_mac(want, bytes)) return {"Error parsing MAC data"};
  if (have == format_mac(bytes)) return {};
  ifreq ifr = named_ifreq(name);
  if (auto e = sock_ioctl(SIOCGIFHWADDR, ifr); !e.empty()) return e;
  std::memcpy(ifr.ifr_hwaddr.sa_data, bytes, 6);
  return sock_ioctl(SIOCSIFHWADDR, ifr);
}

// Tap::set_mtu: SIOCSIFMTU (CAP_NET_ADMIN).
std::vector<std::string> set_mtu(const std::string& name, int mtu) {
  ifreq ifr = named_ifreq(name);
  ifr.ifr_mtu = mtu;
  return sock_ioctl(SIOCSIFMTU, ifr);
}

// Tap::enable: SIOCGIFFLAGS; SIOCSIFFLAGS (CAP_NET_ADMIN) only when the tap is not up yet.
std::vector<std::string> enable(const std::string& name) {
  ifreq ifr = named_ifreq(name);
  if (auto e = sock_ioctl(SIOCGIFFLAGS, ifr); !e.empty()) return e;
  if (ifr.ifr_flags & IFF_UP) return {};
  ifr.ifr_flags = IFF_UP;
  return sock_ioctl(SIOCSIFFLAGS, ifr);
}

// Tap::set_vnet_hdr_size: TUNSETVNETHDRSZ on the tap file.
std::vector<std::string> set_vnet_hdr(int fd) {
  int size = kVnetHdrLen;
  if (::ioctl(fd, TUNSETVNETHDRSZ, &size) != 0) return ioctl_error(TUNSETVNETHDRSZ, errno);
  return {};
}

// Tap::set_ip_addr for IPv4: SIOCSIFADDR (and SIOCSIFNETMASK) on an AF_INET socket.
std::vector<std::string> set_ip(const std::string& name, const std::string& ip,
                                const std::optional<std::string>& mask) {
  common::UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock)
    return {"Failed to create a socket", "Failed to create a socket", rust_os_error(errno)};
  ifreq ifr = named_ifreq(name);
  auto* sin = reinterpret_cast<sockaddr_in*>(&ifr.ifr_addr);
  sin->sin_family = AF_INET;
  if (::inet_pton(AF_INET, ip.c_str(), &sin->sin_addr) != 1)
    return {"vmm-double: only IPv4 tap addresses: " + ip};
  if (::ioctl(sock.get(), SIOCSIFADDR, &ifr) != 0) return ioctl_error(SIOCSIFADDR, errno);
  if (!mask) return {};
  auto* m = reinterpret_cast<sockaddr_in*>(&ifr.ifr_netmask);
  m->sin_family = AF_INET;
  if (::inet_pton(AF_INET, mask->c_str(), &m->sin_addr) != 1)
    return {};  // an IPv6 mask: CH skips it
  if (::ioctl(sock.get(), SIOCSIFNETMASK, &ifr) != 0) return ioctl_error(SIOCSIFNETMASK, errno);
  return {};
}

// Tap::open_named: open /dev/net/tun, TUNGETFEATURES, TUNSETIFF. Error tail below "Open tap
// device failed".
std::vector<std::string> open_named(const std::string& name, unsigned queue_pairs,
                                    common::UniqueFd& out, std::string& if_name) {
  if (name.size() > 15) return {"Interface name too long (max length is 15): " + name};
  common::UniqueFd fd(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
  if (!fd) return {"Couldn't open /dev/net/tun", rust_os_error(errno)};
  unsigned int features = 0;
  if (::ioctl(fd.get(), TUNGETFEATURES, &features) != 0)
    return {"Unable to retrieve features", rust_os_error(errno)};
  if ((features & IFF_MULTI_QUEUE) == 0 && queue_pairs > 1)
    return {"Missing multiqueue support in the kernel"};
  ifreq ifr = named_ifreq(name);
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  if (queue_pairs > 1) ifr.ifr_flags |= IFF_MULTI_QUEUE;
  if (::ioctl(fd.get(), TUNSETIFF, &ifr) != 0)
    return {"Unable to configure tap interface", rust_os_error(errno)};
  if_name = ifr.ifr_name;
  out = std::move(fd);
  return {};
}

bool sysfs_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// open_tap.rs open_tap: check_mq_support, then queue 0 configured (open_tap_rx_q_0), then the
// other queues opened with their vnet header size.
OpenedTaps by_name(const TapRequest& req) {
  OpenedTaps out;
  const std::string name = *req.name;
  const std::vector<std::string> top = {"Failed to open taps"};
  auto fail = [&](std::vector<std::string> what, const std::vector<std::string>& tail) {
    out.queues.clear();
    out.error = chain(chain(top, what), tail);
    return std::move(out);
  };
  // check_mq_support
  if (const std::string flags_path = "/sys/class/net/" + name + "/tun_flags";
      sysfs_exists(flags_path)) {
    std::ifstream f(flags_path);
    std::string text;
    if (!std::getline(f, text))
      return fail({"Failed to read the TAP flags from sysfs"},
                  {rust_os_error(errno ? errno : EIO)});
    unsigned long flags = 0;
    try {
      flags = std::stoul(text, nullptr, 16);
    } catch (const std::exception&) {
      return fail({"Failed to convert an hexadecimal string into an integer"},
                  {"invalid digit found in string"});
    }
    const bool mq = req.queue_pairs > 1;
    if ((flags & IFF_MULTI_QUEUE) && !mq)
      return fail({"Error related to the multiqueue support (no support device side)"}, {});
    if (!(flags & IFF_MULTI_QUEUE) && mq)
      return fail({"Error related to the multiqueue support (no support TAP side)"}, {});
  }
  const bool existed = sysfs_exists("/sys/class/net/" + name);
  common::UniqueFd q0;
  if (auto e = open_named(name, req.queue_pairs, q0, out.if_name); !e.empty())
    return fail({"Open tap device failed"}, e);
  out.queues.push_back(std::move(q0));
  if (!existed && req.ip) {
    if (auto e = set_ip(out.if_name, *req.ip, req.mask); !e.empty())
      return fail({"Setting tap IP and/or netmask failed"}, e);
  }
  if (req.host_mac) {
    if (auto e = set_mac(out.if_name, *req.host_mac); !e.empty())
      return fail({"Setting MAC address failed"}, e);
    out.host_mac = req.host_mac;
  } else {
    std::string mac;
    if (auto e = get_mac(out.if_name, mac); !e.empty())
      return fail({"Getting MAC address failed"}, e);
    out.host_mac = mac;
  }
  if (req.mtu) {
    if (auto e = set_mtu(out.if_name, *req.mtu); !e.empty()) return fail({"Setting MTU failed"}, e);
  }
  if (auto e = enable(out.if_name); !e.empty()) return fail({"Enabling tap interface failed"}, e);
  if (auto e = set_vnet_hdr(out.queues[0].get()); !e.empty())
    return fail({"Setting vnet header size failed"}, e);
  for (unsigned i = 1; i < req.queue_pairs; ++i) {
    common::UniqueFd q;
    std::string n;
    if (auto e = open_named(out.if_name, req.queue_pairs, q, n); !e.empty())
      return fail({"Open tap device failed"}, e);
    if (auto e = set_vnet_hdr(q.get()); !e.empty())
      return fail({"Setting vnet header size failed"}, e);
    out.queues.push_back(std::move(q));
  }
  return out;
}

// net.rs Net::from_tap_fds: per fd dup, Tap::from_tap_fd (O_NONBLOCK, TUNGETIFF, TUNSETIFF
// with EEXIST ignored, TUNSETVNETHDRSZ); then the MTU on the first tap when the config has one.
OpenedTaps by_fds(const TapRequest& req) {
  OpenedTaps out;
  auto fail = [&](const std::vector<std::string>& e) {
    out.queues.clear();
    out.error = e;
    return std::move(out);
  };
  const std::vector<std::string> tap_error = {"Using existing tap"};
  const unsigned pairs = static_cast<unsigned>(req.fds.size());
  for (const int given : req.fds) {
    common::UniqueFd fd(::fcntl(given, F_DUPFD_CLOEXEC, 0));
    if (!fd) return fail({"Error calling dup() on tap fd", rust_os_error(errno)});
    const int fl = ::fcntl(fd.get(), F_GETFL);
    if (fl < 0 || ::fcntl(fd.get(), F_SETFL, fl | O_NONBLOCK) < 0)
      return fail(chain(tap_error, {"Unable to configure tap interface", rust_os_error(errno)}));
    ifreq ifr{};
    if (::ioctl(fd.get(), TUNGETIFF, &ifr) != 0)
      return fail(chain(tap_error, ioctl_error(TUNGETIFF, errno)));
    const std::string name = ifr.ifr_name;
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    if (pairs > 1) ifr.ifr_flags |= IFF_MULTI_QUEUE;
    if (::ioctl(fd.get(), TUNSETIFF, &ifr) != 0 && errno != EEXIST)
      return fail(chain(tap_error, {"Unable to configure tap interface", rust_os_error(errno)}));
    if (auto e = set_vnet_hdr(fd.get()); !e.empty()) return fail(chain(tap_error, e));
    if (out.if_name.empty()) out.if_name = name;
    out.queues.push_back(std::move(fd));
  }
  if (req.mtu) {
    if (auto e = set_mtu(out.if_name, *req.mtu); !e.empty()) return fail(chain(tap_error, e));
  }
  return out;
}

}  // namespace

OpenedTaps open_ch_taps(const TapRequest& req) {
  OpenedTaps out = req.name ? by_name(req) : by_fds(req);
  if (out.error.empty() && !out.if_name.empty()) {
    // Net::new_with_tap: SIOCGIFMTU; a failure only stops VIRTIO_NET_F_MTU being offered.
    ifreq ifr = named_ifreq(out.if_name);
    (void)sock_ioctl(SIOCGIFMTU, ifr);
  }
  return out;
}

}  // namespace chl::vmm_double

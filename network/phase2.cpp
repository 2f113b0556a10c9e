#include "network/phase2.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.hpp"
#include "common/syscall.hpp"
#include "network/resolv_conf.hpp"

namespace chl::network {

using common::Result;
using common::Status;

namespace {

// SIOCGIFMTU on a datagram socket: no privilege needed. 0 when the link is missing.
std::uint32_t link_mtu(int sock, const std::string& name) {
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (::ioctl(sock, SIOCGIFMTU, &ifr) < 0) return 0;
  return static_cast<std::uint32_t>(ifr.ifr_mtu);
}

int prefix_of(const sockaddr* mask, int family) {
  const auto* bytes = family == AF_INET ? reinterpret_cast<const std::uint8_t*>(
                                              &reinterpret_cast<const sockaddr_in*>(mask)->sin_addr)
                                        : reinterpret_cast<const std::uint8_t*>(
                                              &reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr);
  const int n = family == AF_INET ? 4 : 16;
  int ones = 0;
  for (int i = 0; i < n; ++i) ones += __builtin_popcount(bytes[i]);
  return ones;
}

class Phase2Network final : public WiredNetwork {
 public:
  ~Phase2Network() override { (void)teardown(); }
  std::vector<WiredInterface>& interfaces() override { return interfaces_; }
  [[nodiscard]] const std::vector<NetworkPlan>& plans() const override { return plans_; }
  [[nodiscard]] std::uint64_t dhcp_answers() const override { return servers_.dhcp_answers(); }
  [[nodiscard]] std::uint64_t dhcp6_answers() const override { return servers_.dhcp6_answers(); }
  [[nodiscard]] std::uint64_t router_adverts() const override { return servers_.router_adverts(); }
  // Phase 2 owns its fds and sockets only: the devices, addresses and rules are phase 1's.
  Status teardown() override {
    servers_ = {};
    interfaces_.clear();
    return {};
  }
  void abandon() override { (void)teardown(); }

  std::vector<NetworkPlan> plans_;
  std::vector<WiredInterface> interfaces_;
  PodServers servers_;
};

}  // namespace

Result<PodFacts> read_pod_facts(const std::string& resolv_conf) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) < 0) return common::fail_errno("reading the pod's interfaces (getifaddrs)");
  common::UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock) {
    ::freeifaddrs(list);
    return common::fail_errno("reading the pod's interfaces: socket");
  }
  PodFacts facts;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    auto [it, added] = facts.links.try_emplace(a->ifa_name);
    PodLink& l = it->second;
    if (added) {
      l.name = a->ifa_name;
      l.mtu = link_mtu(sock.get(), l.name);
    }
    if (a->ifa_addr == nullptr || a->ifa_netmask == nullptr) continue;
    const int family = a->ifa_addr->sa_family;
    if (family == AF_INET) {
      const auto* sin = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      l.ipv4.push_back(Ipv4Cidr{Ipv4{ntohl(sin->sin_addr.s_addr)}, prefix_of(a->ifa_netmask, AF_INET)});
    } else if (family == AF_INET6) {
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr) || IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr)) continue;
      char text[INET6_ADDRSTRLEN] = {};
      ::inet_ntop(AF_INET6, &sin6->sin6_addr, text, sizeof text);
      l.ipv6.push_back(std::string(text) + "/" + std::to_string(prefix_of(a->ifa_netmask, AF_INET6)));
    }
  }
  ::freeifaddrs(list);
  auto rc = read_resolv_conf(resolv_conf);
  facts.dns_servers = rc.nameservers;
  facts.search_domains = rc.search;
  return facts;
}

Result<std::vector<common::UniqueFd>> attach_tap(const std::string& iface, const std::string& tap,
                                                 std::uint32_t queues) {
  const std::string what = "interface " + iface + ": tap " + tap;
  if (tap.empty() || tap.size() >= IFNAMSIZ) return common::fail(std::errc::invalid_argument, what + ": bad name");
  if (::if_nametoindex(tap.c_str()) == 0)
    return common::fail(std::errc::no_such_device, what + " is missing (phase 1 creates it: virt-handler in a pod)");
  if (queues == 0) queues = 1;
  std::vector<common::UniqueFd> fds;
  for (std::uint32_t q = 0; q < queues; ++q) {
    common::UniqueFd fd(common::retry_eintr([] { return ::open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK); }));
    if (!fd) return common::fail_errno(what + ": opening /dev/net/tun");
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, tap.c_str(), IFNAMSIZ - 1);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    if (queues > 1) ifr.ifr_flags |= IFF_MULTI_QUEUE;
    if (::ioctl(fd.get(), TUNSETIFF, &ifr) < 0) {
      const int err = errno;
      const std::string uid = std::to_string(::geteuid()) + ":" + std::to_string(::getegid());
      switch (err) {
        case EPERM:
          return common::fail_errno(err, what + " is not usable by uid:gid " + uid +
                                             " (owned by another user or group: phase 1 must make it owned by the launcher's user)");
        case EINVAL:
          return common::fail_errno(err, what + " does not match " + std::to_string(queues) +
                                             " queue pair(s): " + (queues > 1 ? "not a multi-queue tap" : "a multi-queue tap, or not a tap") +
                                             " (phase 1 made it for another queue count)");
        case EBUSY:
          return common::fail_errno(err, what + " has all its queues attached already (another process holds it, or phase 1 made fewer queues)");
        default:
          return common::fail_errno(err, what + ": TUNSETIFF queue " + std::to_string(q));
      }
    }
    fds.push_back(std::move(fd));
  }
  return fds;
}

std::uint64_t PodServers::dhcp_answers() const {
  std::uint64_t n = 0;
  for (const auto& d : dhcp) n += d->answered();
  return n;
}
std::uint64_t PodServers::dhcp6_answers() const {
  std::uint64_t n = 0;
  for (const auto& d : dhcp6) n += d->answered();
  return n;
}
std::uint64_t PodServers::router_adverts() const {
  std::uint64_t n = 0;
  for (const auto& r : ra) n += r->sent();
  return n;
}

Result<PodServers> start_pod_servers(const std::vector<NetworkPlan>& plans, boost::asio::io_context& io,
                                     bool router_adverts) {
  PodServers s;
  for (const auto& p : plans) {
    if (p.binding == PlanBinding::Sriov || p.lease.address.address.value == 0) continue;
    CHL_TRY(auto d, wrap(DhcpServer::start(io, p.bridge, p.mac, p.lease), "interface " + p.iface_name + ": DHCP"));
    s.dhcp.push_back(std::move(d));
  }
  for (const auto& p : plans) {
    if (p.binding != PlanBinding::Masquerade || p.guest6.empty()) continue;
    // The guest's IPv6 fd10:0:2::2 from DHCPv6 (KubeVirt's SingleClientDHCPv6Server); in `run`
    // also its default router from our advertisements (the M flag sends it to DHCPv6).
    Dhcp6Lease lease6;
    if (auto a = parse_ipv6(p.guest6)) lease6.address = *a;
    lease6.search_domains = p.lease.search_domains;
    CHL_TRY(auto d6, wrap(Dhcp6Server::start(io, p.bridge, lease6), "interface " + p.iface_name + ": DHCPv6"));
    s.dhcp6.push_back(std::move(d6));
    if (router_adverts) {
      RouterAdvertConfig rc;
      rc.mtu = p.mtu;
      CHL_TRY(auto ra, wrap(RouterAdvertiser::start(io, p.bridge, rc), "interface " + p.iface_name + ": IPv6"));
      s.ra.push_back(std::move(ra));
    }
  }
  return s;
}

Status apply_dhcp_cache(NetworkPlan& p, const KubevirtDhcpConfig& cache, std::uint32_t pod_nic_mtu) {
  if (p.binding != PlanBinding::Bridge) return {};
  if (p.mac_generated && cache.mac) {
    p.mac = *cache.mac;  // the guest takes the pod interface's MAC, as KubeVirt's bridge binding
    p.mac_generated = false;
  }
  p.lease.routes.clear();
  p.lease.router.reset();
  if (cache.ipam_disabled || !cache.ip) {
    p.lease.address = {};
    p.guest4 = {};
    return {};
  }
  p.lease.address = *cache.ip;
  p.guest4 = cache.ip->address;
  p.lease.router = cache.gateway;
  p.lease.routes = cache.routes;
  if (!p.lease.router)
    for (const auto& r : cache.routes)
      if (r.destination.prefix == 0 && r.gateway) p.lease.router = r.gateway;
  const std::uint32_t mtu = pod_nic_mtu != 0 ? pod_nic_mtu : cache.mtu;
  if (mtu != 0) p.mtu = p.lease.mtu = mtu;
  return {};
}

Result<std::unique_ptr<WiredNetwork>> attach_pod_network(std::vector<NetworkPlan> plans, boost::asio::io_context* io,
                                                         const Phase2Options& options) {
  auto net = std::make_unique<Phase2Network>();
  common::UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock) return common::fail_errno("pod network phase 2: socket");
  for (auto& p : plans) {
    if (p.binding == PlanBinding::Sriov) continue;
    const std::string where = "interface " + p.iface_name;
    if (::if_nametoindex(p.bridge.c_str()) == 0)
      return common::fail(std::errc::no_such_device,
                          where + ": bridge " + p.bridge + " is missing (phase 1 creates it: virt-handler in a pod)");
    if (p.binding == PlanBinding::Bridge && options.dhcp_cache) {
      CHL_TRY(auto cache, wrap(read_kubevirt_dhcp_cache(options.private_dir, p.pod_iface), where));
      CHL_TRY_VOID(wrap(apply_dhcp_cache(p, cache, link_mtu(sock.get(), bridged_nic_name(p.pod_iface))), where));
    }
    CHL_TRY(auto fds, attach_tap(p.iface_name, p.tap, p.queues));
    WiredInterface w;
    w.iface_name = p.iface_name;
    w.tap = p.tap;
    w.mac = p.mac;
    w.mtu = p.mtu;
    if (const auto tap_mtu = link_mtu(sock.get(), p.tap); tap_mtu != 0 && tap_mtu != p.mtu) {
      CHL_LOG_WARN("network: {}: tap {} has MTU {}, the pod interface {}: the guest gets the tap's", where, p.tap,
                   tap_mtu, p.mtu);
      w.mtu = p.lease.mtu = p.mtu = tap_mtu;
    }
    w.queues = p.queues;
    w.tap_fds = std::move(fds);
    net->plans_.push_back(p);
    net->interfaces_.push_back(std::move(w));
  }
  if (io != nullptr) {
    CHL_TRY(net->servers_, wrap(start_pod_servers(net->plans_, *io, options.router_adverts), "pod network phase 2"));
  }
  for (const auto& w : net->interfaces_)
    CHL_LOG_INFO("network: interface {} attached (phase 2): tap {} mac {} mtu {} queues {}", w.iface_name, w.tap,
                 format_mac(w.mac), w.mtu, w.queues);
  return std::unique_ptr<WiredNetwork>(std::move(net));
}

}  // namespace chl::network

#include "network/netlink.hpp"

#include <fcntl.h>
#include <linux/ethtool.h>
#include <linux/if.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/bridge.h>
#include <netlink/route/route.h>

#include "common/syscall.hpp"
#include "common/unique_fd.hpp"

namespace chl::network {

using common::fail;
using common::Result;
using common::Status;

namespace {

// libnl returns negative NLE_* codes; map the ones callers tell apart onto errno values.
std::errc nle_errc(int err) {
  switch (-err) {
    case NLE_EXIST: return std::errc::file_exists;
    case NLE_OBJ_NOTFOUND:
    case NLE_NODEV: return std::errc::no_such_device;
    case NLE_PERM: return std::errc::operation_not_permitted;
    case NLE_BUSY: return std::errc::device_or_resource_busy;
    case NLE_INVAL: return std::errc::invalid_argument;
    case NLE_NOADDR: return std::errc::address_not_available;
    default: return std::errc::io_error;
  }
}
tl::unexpected<common::Error> nl_fail(int err, const std::string& what) {
  return fail(nle_errc(err), what + ": " + nl_geterror(err));
}

template <typename T, void (*Free)(T*)>
struct NlPtr {
  T* p = nullptr;
  NlPtr() = default;
  explicit NlPtr(T* x) : p(x) {}
  NlPtr(const NlPtr&) = delete;
  NlPtr& operator=(const NlPtr&) = delete;
  NlPtr(NlPtr&& o) noexcept : p(std::exchange(o.p, nullptr)) {}
  NlPtr& operator=(NlPtr&&) = delete;
  ~NlPtr() {
    if (p) Free(p);
  }
  T* get() const { return p; }
  T** out() { return &p; }
};
void free_link(rtnl_link* l) { rtnl_link_put(l); }
void free_addr(rtnl_addr* a) { rtnl_addr_put(a); }
void free_nladdr(nl_addr* a) { nl_addr_put(a); }
void free_cache(nl_cache* c) { nl_cache_free(c); }
void free_route(rtnl_route* r) { rtnl_route_put(r); }
using LinkPtr = NlPtr<rtnl_link, free_link>;
using AddrPtr = NlPtr<rtnl_addr, free_addr>;
using NlAddrPtr = NlPtr<nl_addr, free_nladdr>;
using CachePtr = NlPtr<nl_cache, free_cache>;
using RoutePtr = NlPtr<rtnl_route, free_route>;

std::string addr_text(nl_addr* a) {
  char buf[128];
  return nl_addr2str(a, buf, sizeof buf);
}

}  // namespace

void Netlink::SockDeleter::operator()(nl_sock* s) const { nl_socket_free(s); }

Result<Netlink> Netlink::open() {
  Netlink n;
  n.sock_.reset(nl_socket_alloc());
  if (!n.sock_) return fail(std::errc::not_enough_memory, "netlink: allocating a socket");
  if (int err = nl_connect(n.sock_.get(), NETLINK_ROUTE); err < 0) return nl_fail(err, "netlink: connecting");
  return n;
}

Result<std::optional<LinkInfo>> Netlink::find_link(const std::string& name) {
  LinkPtr link;
  int err = rtnl_link_get_kernel(sock_.get(), 0, name.c_str(), link.out());
  if (err == -NLE_OBJ_NOTFOUND || err == -NLE_NODEV) return std::optional<LinkInfo>{};
  if (err < 0) return nl_fail(err, "netlink: looking up link " + name);
  LinkInfo info;
  info.index = rtnl_link_get_ifindex(link.get());
  info.name = name;
  const char* kind = rtnl_link_get_type(link.get());
  info.kind = kind ? kind : "";
  info.mtu = rtnl_link_get_mtu(link.get());
  info.master = rtnl_link_get_master(link.get());
  info.up = (rtnl_link_get_flags(link.get()) & IFF_UP) != 0;
  const char* alias = rtnl_link_get_ifalias(link.get());
  info.alias = alias ? alias : "";
  return std::optional<LinkInfo>{info};
}

Result<int> Netlink::index_of(const std::string& name) {
  CHL_TRY(auto l, find_link(name));
  if (!l) return fail(std::errc::no_such_device, "no link named " + name);
  return l->index;
}

Status Netlink::create_bridge(const std::string& name, std::uint32_t mtu, const Mac* mac) {
  LinkPtr link(rtnl_link_bridge_alloc());
  if (!link.get()) return fail(std::errc::not_enough_memory, "netlink: allocating a bridge");
  rtnl_link_set_name(link.get(), name.c_str());
  if (mtu) rtnl_link_set_mtu(link.get(), mtu);
  if (mac) {
    NlAddrPtr a(nl_addr_build(AF_LLC, mac->data(), mac->size()));
    rtnl_link_set_addr(link.get(), a.get());
  }
  if (int err = rtnl_link_add(sock_.get(), link.get(), NLM_F_CREATE | NLM_F_EXCL); err < 0)
    return nl_fail(err, "netlink: creating bridge " + name);
  return {};
}

Status Netlink::set_master(const std::string& name, const std::string& master) {
  CHL_TRY(int idx, index_of(name));
  if (master.empty()) {
    if (int err = rtnl_link_release_ifindex(sock_.get(), idx); err < 0)
      return nl_fail(err, "netlink: releasing " + name + " from its bridge");
    return {};
  }
  CHL_TRY(int midx, index_of(master));
  if (int err = rtnl_link_enslave_ifindex(sock_.get(), midx, idx); err < 0)
    return nl_fail(err, "netlink: enslaving " + name + " to " + master);
  return {};
}

namespace {
template <typename F>
Status change_link(nl_sock* sock, const std::string& name, const std::string& what, F&& set) {
  LinkPtr orig;
  if (int err = rtnl_link_get_kernel(sock, 0, name.c_str(), orig.out()); err < 0)
    return nl_fail(err, "netlink: " + what + ": looking up " + name);
  LinkPtr change(rtnl_link_alloc());
  set(change.get());
  if (int err = rtnl_link_change(sock, orig.get(), change.get(), 0); err < 0)
    return nl_fail(err, "netlink: " + what + " " + name);
  return {};
}
}  // namespace

Status Netlink::set_mtu(const std::string& name, std::uint32_t mtu) {
  return change_link(sock_.get(), name, "setting MTU " + std::to_string(mtu) + " on",
                     [mtu](rtnl_link* c) { rtnl_link_set_mtu(c, mtu); });
}

Status Netlink::set_alias(const std::string& name, const std::string& alias) {
  return change_link(sock_.get(), name, "setting the alias of",
                     [&alias](rtnl_link* c) { rtnl_link_set_ifalias(c, alias.c_str()); });
}

Status Netlink::set_up(const std::string& name, bool up) {
  return change_link(sock_.get(), name, up ? "bringing up" : "bringing down", [up](rtnl_link* c) {
    if (up) rtnl_link_set_flags(c, IFF_UP);
    else rtnl_link_unset_flags(c, IFF_UP);
  });
}

namespace {
Result<AddrPtr> make_addr(int ifindex, const std::string& cidr) {
  NlAddrPtr local;
  if (int err = nl_addr_parse(cidr.c_str(), AF_UNSPEC, local.out()); err < 0)
    return nl_fail(err, "netlink: parsing address " + cidr);
  AddrPtr addr(rtnl_addr_alloc());
  rtnl_addr_set_ifindex(addr.get(), ifindex);
  rtnl_addr_set_family(addr.get(), nl_addr_get_family(local.get()));
  if (int err = rtnl_addr_set_local(addr.get(), local.get()); err < 0)
    return nl_fail(err, "netlink: address " + cidr);
  rtnl_addr_set_prefixlen(addr.get(), static_cast<int>(nl_addr_get_prefixlen(local.get())));
  // No duplicate address detection: the address is ours alone on a bridge we made.
  if (nl_addr_get_family(local.get()) == AF_INET6) rtnl_addr_set_flags(addr.get(), IFA_F_NODAD);
  return addr;
}
}  // namespace

Status Netlink::add_address(const std::string& name, const std::string& cidr) {
  CHL_TRY(int idx, index_of(name));
  CHL_TRY(auto addr, make_addr(idx, cidr));
  int err = rtnl_addr_add(sock_.get(), addr.get(), 0);
  if (err == -NLE_EXIST) return {};
  if (err < 0) return nl_fail(err, "netlink: adding " + cidr + " to " + name);
  return {};
}

Status Netlink::delete_address(const std::string& name, const std::string& cidr) {
  CHL_TRY(int idx, index_of(name));
  CHL_TRY(auto addr, make_addr(idx, cidr));
  int err = rtnl_addr_delete(sock_.get(), addr.get(), 0);
  if (err == -NLE_NOADDR || err == -NLE_OBJ_NOTFOUND || err == -NLE_NODEV) return {};
  if (err < 0) return nl_fail(err, "netlink: removing " + cidr + " from " + name);
  return {};
}

Status Netlink::delete_link(const std::string& name) {
  LinkPtr link;
  int err = rtnl_link_get_kernel(sock_.get(), 0, name.c_str(), link.out());
  if (err == -NLE_OBJ_NOTFOUND || err == -NLE_NODEV) return {};
  if (err < 0) return nl_fail(err, "netlink: looking up " + name + " to delete it");
  err = rtnl_link_delete(sock_.get(), link.get());
  if (err == -NLE_OBJ_NOTFOUND || err == -NLE_NODEV) return {};
  if (err < 0) return nl_fail(err, "netlink: deleting link " + name);
  return {};
}

Status Netlink::add_route4(const std::string& name, const Route4& r) {
  CHL_TRY(int idx, index_of(name));
  RoutePtr route(rtnl_route_alloc());
  rtnl_route_set_family(route.get(), AF_INET);
  rtnl_route_set_table(route.get(), RT_TABLE_MAIN);
  rtnl_route_set_protocol(route.get(), RTPROT_BOOT);
  const std::string dst_text = format_ipv4_cidr(r.destination);
  NlAddrPtr dst;
  if (int err = nl_addr_parse(dst_text.c_str(), AF_INET, dst.out()); err < 0)
    return nl_fail(err, "netlink: route " + dst_text);
  rtnl_route_set_dst(route.get(), dst.get());
  rtnl_route_set_scope(route.get(), r.gateway ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK);
  rtnl_nexthop* nh = rtnl_route_nh_alloc();
  rtnl_route_nh_set_ifindex(nh, idx);
  if (r.gateway) {
    NlAddrPtr gw;
    const std::string gw_text = format_ipv4(*r.gateway);
    if (int err = nl_addr_parse(gw_text.c_str(), AF_INET, gw.out()); err < 0) {
      rtnl_route_nh_free(nh);
      return nl_fail(err, "netlink: gateway " + gw_text);
    }
    rtnl_route_nh_set_gateway(nh, gw.get());
  }
  rtnl_route_add_nexthop(route.get(), nh);  // the route owns nh now
  int err = rtnl_route_add(sock_.get(), route.get(), NLM_F_CREATE);
  if (err == -NLE_EXIST) return {};
  if (err < 0) return nl_fail(err, "netlink: adding route " + dst_text + " via " + name);
  return {};
}

Result<std::vector<PodLink>> Netlink::list_links() {
  CachePtr links, addrs, routes;
  if (int err = rtnl_link_alloc_cache(sock_.get(), AF_UNSPEC, links.out()); err < 0)
    return nl_fail(err, "netlink: listing links");
  if (int err = rtnl_addr_alloc_cache(sock_.get(), addrs.out()); err < 0)
    return nl_fail(err, "netlink: listing addresses");
  if (int err = rtnl_route_alloc_cache(sock_.get(), AF_INET, 0, routes.out()); err < 0)
    return nl_fail(err, "netlink: listing routes");
  std::vector<PodLink> out;
  std::vector<int> indexes;
  for (nl_object* o = nl_cache_get_first(links.get()); o; o = nl_cache_get_next(o)) {
    auto* l = reinterpret_cast<rtnl_link*>(o);
    PodLink p;
    p.name = rtnl_link_get_name(l) ? rtnl_link_get_name(l) : "";
    p.mtu = rtnl_link_get_mtu(l);
    out.push_back(p);
    indexes.push_back(rtnl_link_get_ifindex(l));
  }
  auto find = [&](int idx) -> PodLink* {
    for (std::size_t i = 0; i < indexes.size(); ++i)
      if (indexes[i] == idx) return &out[i];
    return nullptr;
  };
  for (nl_object* o = nl_cache_get_first(addrs.get()); o; o = nl_cache_get_next(o)) {
    auto* a = reinterpret_cast<rtnl_addr*>(o);
    PodLink* p = find(rtnl_addr_get_ifindex(a));
    nl_addr* local = rtnl_addr_get_local(a);
    if (!p || !local) continue;
    const int family = rtnl_addr_get_family(a);
    if (family == AF_INET) {
      const auto* b = static_cast<const std::uint8_t*>(nl_addr_get_binary_addr(local));
      std::uint32_t v = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) | b[3];
      p->ipv4.push_back(Ipv4Cidr{Ipv4{v}, rtnl_addr_get_prefixlen(a)});
    } else if (family == AF_INET6 && rtnl_addr_get_scope(a) == RT_SCOPE_UNIVERSE) {
      std::string text = addr_text(local);
      if (text.find('/') == std::string::npos) text += "/" + std::to_string(rtnl_addr_get_prefixlen(a));
      p->ipv6.push_back(text);
    }
  }
  for (nl_object* o = nl_cache_get_first(routes.get()); o; o = nl_cache_get_next(o)) {
    auto* r = reinterpret_cast<rtnl_route*>(o);
    if (rtnl_route_get_table(r) != RT_TABLE_MAIN || rtnl_route_get_protocol(r) == RTPROT_KERNEL) continue;
    if (rtnl_route_get_nnexthops(r) < 1) continue;
    rtnl_nexthop* nh = rtnl_route_nexthop_n(r, 0);
    PodLink* p = find(rtnl_route_nh_get_ifindex(nh));
    if (!p) continue;
    Route4 route;
    nl_addr* dst = rtnl_route_get_dst(r);
    if (dst && nl_addr_get_len(dst) == 4) {
      const auto* b = static_cast<const std::uint8_t*>(nl_addr_get_binary_addr(dst));
      route.destination.address = Ipv4{(std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) | b[3]};
    }
    route.destination.prefix = dst ? static_cast<int>(nl_addr_get_prefixlen(dst)) : 0;
    nl_addr* gw = rtnl_route_nh_get_gateway(nh);
    if (gw && nl_addr_get_len(gw) == 4) {
      const auto* b = static_cast<const std::uint8_t*>(nl_addr_get_binary_addr(gw));
      route.gateway = Ipv4{(std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) | b[3]};
    }
    p->routes4.push_back(route);
  }
  return out;
}

Status write_sysctl(const std::string& key, const std::string& value) {
  const std::string path = "/proc/sys/" + key;
  common::UniqueFd fd(common::retry_eintr([&] { return ::open(path.c_str(), O_WRONLY | O_CLOEXEC); }));
  if (!fd) return common::fail_errno("sysctl " + key);
  if (common::retry_eintr([&] { return ::write(fd.get(), value.data(), value.size()); }) !=
      static_cast<ssize_t>(value.size()))
    return common::fail_errno("sysctl " + key + "=" + value);
  return {};
}

Status disable_tx_checksum(const std::string& name) {
  common::UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) return common::fail_errno("ethtool socket");
  ethtool_value ev{};
  ev.cmd = ETHTOOL_STXCSUM;
  ev.data = 0;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  ifr.ifr_data = reinterpret_cast<char*>(&ev);
  if (::ioctl(s.get(), SIOCETHTOOL, &ifr) < 0) return common::fail_errno("ethtool: tx checksum off on " + name);
  return {};
}

}  // namespace chl::network

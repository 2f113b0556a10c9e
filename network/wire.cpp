#include "network/wire.hpp"

#include <sstream>

#include "common/log.hpp"
#include "network/netlink.hpp"
#include "network/nft_ruleset.hpp"
#include "network/phase2.hpp"
#include "network/pod_teardown.hpp"
#include "network/resolv_conf.hpp"
#include "network/tap.hpp"

namespace chl::network {

using common::Result;
using common::Status;

namespace {

constexpr const char* kAliasTag = "chl-pod";

// "chl-pod 10.244.0.5/24 0.0.0.0/0=10.244.0.1 10.96.0.0/12=10.244.0.1"
std::string encode_alias(const Lease& l) {
  std::ostringstream o;
  o << kAliasTag << ' ' << format_ipv4_cidr(l.address);
  for (const auto& r : l.routes)
    o << ' ' << format_ipv4_cidr(r.destination) << '=' << (r.gateway ? format_ipv4(*r.gateway) : "");
  return o.str();
}

bool decode_alias(const std::string& alias, PodLink& link) {
  std::istringstream in(alias);
  std::string tag, addr;
  if (!(in >> tag >> addr) || tag != kAliasTag) return false;
  auto a = parse_ipv4_cidr(addr);
  if (!a) return false;
  link.ipv4 = {*a};
  link.routes4.clear();
  std::string r;
  while (in >> r) {
    const auto eq = r.find('=');
    if (eq == std::string::npos) return false;
    auto dst = parse_ipv4_cidr(r.substr(0, eq));
    if (!dst) return false;
    Route4 route{*dst, std::nullopt};
    if (eq + 1 < r.size()) route.gateway = parse_ipv4(r.substr(eq + 1));
    link.routes4.push_back(route);
  }
  return true;
}

// The bridge k6t-*: reuse it when it is a bridge, rebuild it when the name is taken by
// something else.
Status ensure_bridge(Netlink& nl, const NetworkPlan& p) {
  CHL_TRY(auto existing, nl.find_link(p.bridge));
  if (existing && existing->kind != "bridge") {
    CHL_LOG_WARN("network: {} exists as a {} link, replacing it by a bridge", p.bridge, existing->kind);
    CHL_TRY_VOID(nl.delete_link(p.bridge));
    existing.reset();
  }
  if (!existing) CHL_TRY_VOID(nl.create_bridge(p.bridge, 0, nullptr));
  CHL_TRY_VOID(nl.set_mtu(p.bridge, p.mtu));
  if (auto st = disable_tx_checksum(p.bridge); !st)
    CHL_LOG_WARN("network: {}", st.error().message());  // an optimisation for some guests only
  CHL_TRY_VOID(nl.add_address(p.bridge, format_ipv4_cidr(p.gateway4)));
  if (!p.gateway6.empty()) CHL_TRY_VOID(nl.add_address(p.bridge, p.gateway6));
  return nl.set_up(p.bridge, true);
}

Result<std::vector<common::UniqueFd>> ensure_tap(Netlink& nl, const NetworkPlan& p) {
  CHL_TRY(auto existing, nl.find_link(p.tap));
  if (existing && existing->kind != "tun") {
    CHL_TRY_VOID(nl.delete_link(p.tap));
  }
  auto fds = open_tap(p.tap, p.queues);
  if (!fds) {
    // A tap left with other flags (queue count changed, or still attached elsewhere): rebuild.
    CHL_LOG_WARN("network: reopening tap {} failed ({}), rebuilding it", p.tap, fds.error().message());
    CHL_TRY_VOID(nl.delete_link(p.tap));
    fds = open_tap(p.tap, p.queues);
    if (!fds) return tl::unexpected(fds.error());
  }
  CHL_TRY_VOID(nl.set_mtu(p.tap, p.mtu));
  CHL_TRY_VOID(nl.set_master(p.tap, p.bridge));
  CHL_TRY_VOID(nl.set_up(p.tap, true));
  return fds;
}

Status wire_bridge_binding(Netlink& nl, const NetworkPlan& p) {
  // Record the pod interface's address and routes before taking them (kept in the bridge's
  // alias: a restarted launcher reads them back from there).
  if (p.lease.address.address.value != 0) CHL_TRY_VOID(nl.set_alias(p.bridge, encode_alias(p.lease)));
  if (p.lease.address.address.value != 0)
    CHL_TRY_VOID(nl.delete_address(p.pod_iface, format_ipv4_cidr(p.lease.address)));
  CHL_TRY_VOID(nl.set_mtu(p.pod_iface, p.mtu));
  CHL_TRY_VOID(nl.set_master(p.pod_iface, p.bridge));
  return nl.set_up(p.pod_iface, true);
}

Status wire_one(Netlink& nl, const NetworkPlan& p, WiredInterface& out) {
  CHL_TRY_VOID(wrap(ensure_bridge(nl, p), "bridge " + p.bridge));
  if (p.binding == PlanBinding::Bridge) CHL_TRY_VOID(wrap(wire_bridge_binding(nl, p), "pod interface " + p.pod_iface));
  CHL_TRY(auto fds, wrap(ensure_tap(nl, p), "tap " + p.tap));
  out.iface_name = p.iface_name;
  out.tap = p.tap;
  out.mac = p.mac;
  out.mtu = p.mtu;
  out.queues = p.queues;
  out.tap_fds = std::move(fds);
  if (p.binding == PlanBinding::Masquerade) {
    CHL_TRY_VOID(write_sysctl("net/ipv4/ip_forward", "1"));
    // As KubeVirt's netpod (masqueradeBindingSpec: IP4RouteLocalNet on the bridge): the output
    // chain DNATs the pod's own 127.0.0.1 to the guest, which needs loopback-sourced packets
    // routed out of the bridge.
    CHL_TRY_VOID(write_sysctl("net/ipv4/conf/" + p.bridge + "/route_localnet", "1"));
    if (!p.gateway6.empty()) CHL_TRY_VOID(write_sysctl("net/ipv6/conf/all/forwarding", "1"));
  }
  return {};
}

// What wire_pod_network made: the plans, the taps, the DHCP/IPv6 servers and the two netlink
// sockets the teardown uses (pod_teardown.hpp: no libnl or libnftables at teardown).
class PodNetwork final : public WiredNetwork {
 public:
  ~PodNetwork() override { (void)teardown(); }

  std::vector<WiredInterface>& interfaces() override { return interfaces_; }
  [[nodiscard]] const std::vector<NetworkPlan>& plans() const override { return plans_; }
  [[nodiscard]] std::uint64_t dhcp_answers() const override;
  [[nodiscard]] std::uint64_t dhcp6_answers() const override;
  [[nodiscard]] std::uint64_t router_adverts() const override;
  Status teardown() override;
  void abandon() override;

  std::vector<NetworkPlan> plans_;
  std::vector<WiredInterface> interfaces_;
  PodServers servers_;
  std::optional<PodTeardown> teardown_;
  bool done_ = false;
};

}  // namespace

Result<PodFacts> discover_pod(const std::string& resolv_conf) {
  CHL_TRY(auto nl, Netlink::open());
  CHL_TRY(auto links, nl.list_links());
  PodFacts facts;
  for (auto& l : links) {
    // A pod interface already bound to our bridge: its address is in the bridge's alias.
    const std::string bridge = ("k6t-" + l.name).substr(0, 15);
    if (l.ipv4.empty() && l.name.rfind("k6t-", 0) != 0) {
      CHL_TRY(auto b, nl.find_link(bridge));
      if (b && !b->alias.empty()) decode_alias(b->alias, l);
    }
    facts.links.emplace(l.name, std::move(l));
  }
  auto rc = read_resolv_conf(resolv_conf);
  facts.dns_servers = rc.nameservers;
  facts.search_domains = rc.search;
  return facts;
}

Result<std::unique_ptr<WiredNetwork>> wire_pod_network(const std::vector<NetworkPlan>& plans,
                                                       boost::asio::io_context* io) {
  auto wired = std::make_unique<PodNetwork>();
  CHL_TRY(auto nl, wrap(Netlink::open(), "wiring the pod network"));
  CHL_TRY(auto nft, wrap(Nft::open(), "wiring the pod network"));
  CHL_TRY(auto teardown, wrap(PodTeardown::open(), "wiring the pod network"));
  wired->teardown_.emplace(std::move(teardown));
  for (const auto& p : plans) {
    if (p.binding == PlanBinding::Sriov) continue;
    wired->plans_.push_back(p);  // recorded first: a failure half way is torn down too
    WiredInterface w;
    if (auto st = wire_one(nl, p, w); !st) {
      auto err = st.error().wrap("wiring interface " + p.iface_name);
      (void)wired->teardown();
      return tl::unexpected(err);
    }
    wired->interfaces_.push_back(std::move(w));
  }
  if (auto st = nft.run(masquerade_ruleset(wired->plans_)); !st) {
    auto err = st.error().wrap("wiring the pod network: masquerade rules");
    (void)wired->teardown();
    return tl::unexpected(err);
  }
  if (io != nullptr) {
    // Phase 2's servers (network/phase2.hpp), the same as in virt-launcher mode, plus router
    // advertisements: here the launcher owns the bridge and is the guest's IPv6 router.
    auto servers = start_pod_servers(wired->plans_, *io, /*router_adverts=*/true);
    if (!servers) {
      auto err = servers.error().wrap("wiring the pod network");
      (void)wired->teardown();
      return tl::unexpected(err);
    }
    wired->servers_ = std::move(*servers);
  }
  for (const auto& w : wired->interfaces_)
    CHL_LOG_INFO("network: interface {} wired: tap {} mac {} mtu {} queues {}", w.iface_name, w.tap,
                 format_mac(w.mac), w.mtu, w.queues);
  return wired;
}

std::uint64_t PodNetwork::dhcp_answers() const { return servers_.dhcp_answers(); }
std::uint64_t PodNetwork::dhcp6_answers() const { return servers_.dhcp6_answers(); }
std::uint64_t PodNetwork::router_adverts() const { return servers_.router_adverts(); }

void PodNetwork::abandon() {
  done_ = true;
  servers_ = {};
  interfaces_.clear();
}

Status PodNetwork::teardown() {
  if (done_) return {};
  done_ = true;
  servers_ = {};
  interfaces_.clear();  // close our tap fds
  if (!teardown_) return {};  // nothing was wired
  return teardown_->run(plans_);
}

}  // namespace chl::network

#pragma once
// Phase 2 of the pod network: what runs as the launcher's own user, without capabilities, once
// the devices exist (KubeVirt's split, pkg/network/setup/launcher VMNetworkConfigurator
// .SetupPodNetworkPhase2 and pkg/network/dhcp):
//   - attach to the persistent taps phase 1 made (tap0 for the pod network, tap<suffix> for
//     Multus, link/names.go GenerateTapDeviceName) with TUNSETIFF flags matching the queue
//     count — never TUNSETPERSIST, never a netlink write;
//   - serve DHCPv4 (and DHCPv6 for IPv6 masquerade, as KubeVirt's startDHCP) on the bridge
//     k6t-<pod iface>; router advertisements only when asked (`run`: KubeVirt sends none).
// Phase 1 is virt-handler's in virt-launcher mode (the launcher only reads what it left: the
// taps, the links' addresses and MTUs, and for bridge binding the DHCP cache
// vif-cache-<pod iface>.json, network/kubevirt_cache.hpp). In `run` phase 1 is wire.cpp's, in a
// short-lived child (phase1_child.hpp), and phase 2 is attach_pod_network below as here, with
// router advertisements; `network up` (wire_pod_network with an io_context) starts its servers
// through start_pod_servers: one implementation of the servers.
//
// This is in chl_network (linked into ch-launcher): nothing here loads libnl-route or
// libnftables, and nothing creates, renames or deletes a link, an address or an nftables rule.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "common/error.hpp"
#include "common/unique_fd.hpp"
#include "network/dhcp6_server.hpp"
#include "network/dhcp_server.hpp"
#include "network/kubevirt_cache.hpp"
#include "network/plan.hpp"
#include "network/router_advert.hpp"
#include "network/wire.hpp"

namespace chl::network {

// The pod's facts read without privileges (getifaddrs, SIOCGIFMTU, resolv.conf): links with
// their MTU and addresses (no routes: bridge binding takes them from the DHCP cache).
common::Result<PodFacts> read_pod_facts(const std::string& resolv_conf = "/etc/resolv.conf");

// Attach `queues` fds to the existing tap `tap` of interface `iface` as the current user.
// Errors name the interface, the tap and what phase 1 left wrong: missing, owned by another
// user/group, other queue flags, busy.
common::Result<std::vector<common::UniqueFd>> attach_tap(const std::string& iface, const std::string& tap,
                                                         std::uint32_t queues);

// The DHCP, DHCPv6 and router advertisement servers of the plans, on their bridges.
struct PodServers {
  std::vector<std::unique_ptr<DhcpServer>> dhcp;
  std::vector<std::unique_ptr<Dhcp6Server>> dhcp6;
  std::vector<std::unique_ptr<RouterAdvertiser>> ra;
  [[nodiscard]] std::uint64_t dhcp_answers() const;
  [[nodiscard]] std::uint64_t dhcp6_answers() const;
  [[nodiscard]] std::uint64_t router_adverts() const;
};
// DHCPv4 for every plan with a lease address; DHCPv6 (+ RAs when `router_adverts`) for IPv6
// masquerade. Errors: "interface X: DHCP: ...".
common::Result<PodServers> start_pod_servers(const std::vector<NetworkPlan>& plans, boost::asio::io_context& io,
                                             bool router_adverts);

struct Phase2Options {
  std::string private_dir = kVirtPrivateDir;  // where the DHCP caches are
  bool router_adverts = false;                // KubeVirt sends none
  // Bridge binding's lease from virt-handler's DHCP cache (virt-launcher mode). `run` wires
  // phase 1 itself (phase1_child.hpp): its plans already carry the pod interface's address and
  // routes, read before the wiring took them, and it reads no cache.
  bool dhcp_cache = true;
};

// Bridge binding: the plan's lease (and, when the VMI sets no MAC, the guest's MAC) from
// virt-handler's DHCP cache, as KubeVirt's BridgeConfigGenerator (MTU from <pod iface>-nic when
// it exists). IPAMDisabled: no lease. Masquerade plans are left as planned (KubeVirt generates
// that config in the launcher, MasqueradeConfigGenerator).
common::Status apply_dhcp_cache(NetworkPlan& p, const KubevirtDhcpConfig& cache, std::uint32_t pod_nic_mtu);

// Phase 2 (virt-launcher mode, and `run` after its phase 1 child): for every non-SR-IOV plan,
// check the bridge exists, read the cache (bridge binding, when options.dhcp_cache), attach to
// the tap, then serve DHCP on `io` (nullptr: none). The
// WiredNetwork's teardown closes the launcher's fds and sockets and nothing else.
common::Result<std::unique_ptr<WiredNetwork>> attach_pod_network(std::vector<NetworkPlan> plans,
                                                                 boost::asio::io_context* io,
                                                                 const Phase2Options& options = {});

}  // namespace chl::network

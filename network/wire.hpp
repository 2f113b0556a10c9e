#pragma once
// Wiring the pod's network for the guest, in the calling thread's network namespace (the
// pod's): per NetworkPlan a bridge k6t-<pod iface>, a persistent multiqueue-capable tap on it
// whose fds are kept for the VMM, and per binding:
//   masquerade  10.0.2.1/24 (+ fd10:0:2::1/120) on the bridge, IP forwarding on, the nftables
//               table `inet ch_launcher` (SNAT/masquerade out, DNAT in), DHCP for 10.0.2.2
//               (and, when the pod has IPv6, router advertisements and DHCPv6 for fd10:0:2::2);
//   bridge      the pod interface's address and routes recorded in the bridge's alias and
//               removed, the pod interface enslaved to the bridge, DHCP handing them to the guest.
// A second wiring in the same pod (a restarted launcher) finds the devices by name and reuses
// them (re-attaching to the persistent tap, rebuilding it when its flags differ), and replaces
// the nftables table atomically: nothing is duplicated. The WiredNetwork's destructor removes
// everything it made and gives a bridge-bound pod interface its address and routes back.
//
// This file and netlink.cpp, nft_ruleset.cpp (libnl-route-3, libnftables) are the module
// libchl-network.so (network_module.hpp), which ch-launcher loads only for a VMI with
// interfaces to wire. WiredNetwork is therefore an interface: the launcher calls it through its
// vtable and never links a symbol of the implementation (wire.cpp).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "common/error.hpp"
#include "common/unique_fd.hpp"
#include "network/plan.hpp"

namespace chl::network {

struct WiredInterface {
  std::string iface_name;  // spec.domain.devices.interfaces[].name
  std::string tap;         // "tap0"
  Mac mac{};               // the guest's MAC (give it to the VMM)
  std::uint32_t mtu = 1500;
  std::uint32_t queues = 1;              // queue pairs; CH's num_queues is 2 * queues
  std::vector<common::UniqueFd> tap_fds;  // one per queue pair; hand them over with SCM_RIGHTS
};

class WiredNetwork {
 public:
  WiredNetwork() = default;
  WiredNetwork(const WiredNetwork&) = delete;
  WiredNetwork& operator=(const WiredNetwork&) = delete;
  virtual ~WiredNetwork() = default;  // the implementation's destructor: teardown(), errors logged

  virtual std::vector<WiredInterface>& interfaces() = 0;
  [[nodiscard]] virtual const std::vector<NetworkPlan>& plans() const = 0;
  [[nodiscard]] virtual std::uint64_t dhcp_answers() const = 0;
  // IPv6 masquerade: DHCPv6 answers and router advertisements sent.
  [[nodiscard]] virtual std::uint64_t dhcp6_answers() const = 0;
  [[nodiscard]] virtual std::uint64_t router_adverts() const = 0;

  // Remove what was made (idempotent); the first error is returned, the rest still done.
  // Uses the netlink and nftables sockets opened when wiring (they stay in the pod's
  // namespace, and need no new socket under the launcher's seccomp sandbox), so it may run
  // on any thread.
  virtual common::Status teardown() = 0;
  // Forget everything without removing it (what a crashed launcher leaves behind; tests).
  virtual void abandon() = 0;
};

// The pod's facts: its links (a bridge-bound pod interface's original address read back from
// our bridge's alias) and DNS from `resolv_conf`.
common::Result<PodFacts> discover_pod(const std::string& resolv_conf = "/etc/resolv.conf");

// Wire every plan (SR-IOV plans are skipped: the VF is passed through by the hypervisor).
// DHCP servers run on `io` (nullptr: no DHCP, e.g. for a guest configured statically); the io
// thread may be any thread, the sockets stay in this namespace.
common::Result<std::unique_ptr<WiredNetwork>> wire_pod_network(const std::vector<NetworkPlan>& plans,
                                                               boost::asio::io_context* io);

}  // namespace chl::network

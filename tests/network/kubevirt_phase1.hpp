#pragma once
// Test-only: virt-handler's phase 1 of the pod network, reproduced in a network namespace the
// test made, as KubeVirt's source does it (kubevirt/kubevirt, pkg/network/setup):
//   masquerade  netpod.go (setupPodNetwork → bridge): bridge k6t-<pod iface> with MAC
//               02:00:00:00:00:00, the pod interface's MTU, 10.0.2.1/24 (the vmNetworkCIDR's
//               first host), route_localnet on it (IP4RouteLocalNet), up; net.ipv4.ip_forward=1; the tap (cmd/virt-chroot
//               tap-device-maker.go createTapDevice: persistent, owner/group 107, TUNTAP_DEFAULTS
//               = vnet_hdr + no_pi, + multi_queue when queues > 1, the MTU), enslaved and up;
//               netpod/masquerade/masquerade.go setupNATByFamily's `table ip nat` (prerouting,
//               input, output, postrouting, KUBEVIRT_PREINBOUND, KUBEVIRT_POSTINBOUND, the
//               legacy migration ports 49152/49153 excepted, everything DNATed to 10.0.2.2);
//   bridge      netpod.go bridgeBindingSpec: virt-handler's DHCP cache vif-cache-<iface>.json
//               written first (cache.WriteDHCPInterfaceCache: the pod interface's address,
//               MAC, routes, MTU and gateway, in Go's JSON), the pod interface renamed
//               <iface>-nic without addresses, with the bridge's MAC (CopyMacFrom), port
//               learning off, enslaved to k6t-<iface>
//               (which has 169.254.75.1<index>/32: the fake server address), arp_ignore 1
//               (netpod.go: ARPReplyMode1 with an IPv4 bridge binding), the tap, and a
//               `dummy` <iface> carrying the pod's MAC, MTU and address. These kernels have no
//               dummy link type: a bridge without ports (down) named <iface> stands in for it.
// One difference, said here: KubeVirt's non-root compute container gets NET_BIND_SERVICE (and
// /dev/net/tun from its device plugin); the tests run phase 2 with no capability at all, so
// phase 1 here lowers net.ipv4.ip_unprivileged_port_start to 0 in the pod namespace instead.
#include <cstdint>
#include <string>

#include "network/mac.hpp"

namespace chl::test::net {

struct Phase1 {
  std::string pod_ns;
  std::string pod_iface = "eth0";
  std::uint32_t uid = 107, gid = 107;  // the tap's owner
  std::uint32_t queues = 1;
  std::uint32_t mtu = 1500;
  bool multi_queue_flag_override = false;
  // The tests run phase 2 with no capability at all and so lower ip_unprivileged_port_start to 0
  // (the note above); the image lane gives the launcher NET_BIND_SERVICE as KubeVirt does and
  // leaves the sysctl as it is.
  bool lower_unprivileged_ports = true;
  bool ipv6 = false;  // masquerade: the pod has IPv6 (fd10:0:2::1/120 on the bridge, table ip6 nat)  // tests of a bad phase 1: the flag disagrees with queues
};

// Each returns "" on success, else the failing step.
std::string kubevirt_phase1_masquerade(const Phase1& p);
// The pod interface's facts virt-handler records for bridge binding (the test made them).
struct PodIface {
  std::string mac;      // "02:00:00:aa:bb:cd"
  std::string cidr;     // "192.168.77.2/24"
  std::string gateway;  // "192.168.77.1"
};
std::string kubevirt_phase1_bridge(const Phase1& p, const PodIface& pod, const std::string& private_dir);
// Remove what kubevirt_phase1_masquerade made (tap0, k6t-<iface>, table ip nat), errors ignored.
void kubevirt_phase1_undo(const std::string& ns, const std::string& pod_iface = "eth0");
// The tap alone (virt-chroot create-tap), enslaved to k6t-<iface>.
std::string kubevirt_create_tap(const Phase1& p, const std::string& tap);

// What a namespace holds, normalized for comparison: links (name, kind, master, MTU, tap
// owner/flags), global addresses, and the nftables ruleset without counters.
std::string netns_snapshot(const std::string& ns);

}  // namespace chl::test::net

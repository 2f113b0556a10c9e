#pragma once
// From the VMI to what must be wired, one NetworkPlan per spec.domain.devices.interfaces[]:
// pure functions of the parsed VMI and the facts read off the pod (its links, their MTU and
// addresses), so every decision is unit-tested without a kernel.
//
// Names (each at most 15 bytes, IFNAMSIZ-1):
//   pod interface  "eth0" for the pod network (and a Multus default network), "net1", "net2"...
//                  for the other Multus networks in spec.networks order (KubeVirt's ordinal
//                  naming);
//   bridge         "k6t-<pod interface>" ("k6t-eth0"), as KubeVirt names it;
//   tap            "tap" + the pod interface's trailing number ("tap0" for eth0, "tap1" for
//                  net1), KubeVirt's legacy tap naming; another pod interface name gives
//                  "tap-<name>" cut to 15 bytes.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "vmi/vmi.hpp"
#include "network/ip.hpp"
#include "network/mac.hpp"

namespace chl::network {

// A route of the pod interface (bridge binding hands them to the guest by DHCP option 121).
struct Route4 {
  Ipv4Cidr destination;  // 0.0.0.0/0 for the default route
  std::optional<Ipv4> gateway;
  friend bool operator==(const Route4&, const Route4&) = default;
};

// What the pod's network namespace has for one link.
struct PodLink {
  std::string name;
  std::uint32_t mtu = 1500;
  std::vector<Ipv4Cidr> ipv4;       // addresses
  std::vector<std::string> ipv6;    // global addresses, "fd00::5/64"
  std::vector<Route4> routes4;      // routes through this link
};

// The pod's facts the plan needs: its links by name, and DNS from its resolv.conf.
struct PodFacts {
  std::map<std::string, PodLink> links;
  std::vector<Ipv4> dns_servers;
  std::vector<std::string> search_domains;
  // SR-IOV VFs allocated to the pod, by network name (KubeVirt's network-info file:
  // launcher/sriov_devices.hpp); none here means "no VF".
  std::map<std::string, std::string> sriov_vf_pci;
};

enum class PlanBinding { Masquerade, Bridge, Sriov };
const char* to_string(PlanBinding b);

// The DHCPv4 lease the guest gets.
struct Lease {
  Ipv4Cidr address;               // 10.0.2.2/24 (masquerade) or the pod's address (bridge)
  std::optional<Ipv4> router;     // 10.0.2.1 or the pod's gateway
  Ipv4 server_id;                 // option 54: the bridge's address
  std::vector<Ipv4> dns_servers;  // option 6
  std::vector<std::string> search_domains;  // option 15 (first) and 119
  std::vector<Route4> routes;     // option 121 (classless static routes)
  std::uint32_t mtu = 1500;       // option 26
  std::uint32_t lease_seconds = 86400 * 365;  // option 51: one long lease, as KubeVirt
  std::string hostname;           // option 12 when set
};

struct NetworkPlan {
  std::string iface_name;  // spec.domain.devices.interfaces[].name
  std::string path;        // "spec.domain.devices.interfaces[0]"
  std::string network_name;
  PlanBinding binding = PlanBinding::Masquerade;
  std::string pod_iface;   // "eth0", "net1"
  std::string bridge;      // "k6t-eth0"
  std::string tap;         // "tap0"
  Mac mac{};
  bool mac_generated = false;
  std::uint32_t mtu = 1500;
  std::uint32_t queues = 1;  // queue pairs: vCPUs with networkInterfaceMultiqueue, else 1
  std::string model;         // "virtio" unless set
  // Masquerade: the bridge's own addresses ("10.0.2.1/24", "fd10:0:2::1/120") and the guest's
  // (DNAT target). Bridge: the bridge gets a link-local 169.254.75.1N/32 to answer DHCP from.
  Ipv4Cidr gateway4;
  Ipv4 guest4;
  std::string gateway6;  // "" when the pod has no IPv6
  std::string guest6;
  // Inbound forwards ("tcp", 80); empty = all ports (except the reserved ones).
  std::vector<std::pair<std::string, std::uint16_t>> ports;
  Lease lease;
  std::string sriov_pci;  // binding Sriov: the VF (passed through, not wired here)
};

struct PlanResult {
  std::vector<NetworkPlan> plans;
  vmi::Violations refusals;  // non-empty: nothing may be wired
};

// The plans for every interface, or the refusals (with field paths) for what cannot be wired:
// SR-IOV without a VF, slirp/passt/macvtap/plugin bindings, a network missing from
// spec.networks or from the pod, masquerade off the pod network, a malformed/multicast MAC, two
// interfaces with one MAC, a bad vmNetworkCIDR.
// `vcpus` is vmi::cpu_topology(vmi).vcpus() (passed in).
PlanResult plan_networks(const vmi::Vmi& vmi, const PodFacts& pod, std::uint64_t vcpus);

// The pod interface name KubeVirt gives a network: eth0 for the pod network (or Multus default);
// for a secondary Multus network its hashed name, or the ordinal netN when `pod` has that and not
// the hashed one (a pod from before KubeVirt v1.0).
std::string pod_interface_name(const vmi::Vmi& vmi, const vmi::Network& net, const PodFacts* pod = nullptr);
// KubeVirt's hashed name of a secondary Multus network's pod interface: "pod" + 11 hex digits
// of SHA-256(network name).
std::string hashed_pod_interface_name(const std::string& network_name);
// The in-pod bridge (k6t-…) and, for bridge binding, the renamed pod interface (…-nic), as
// KubeVirt's link package names them.
std::string bridge_name_for(const std::string& pod_iface);
std::string bridged_nic_name(const std::string& pod_iface);
// "tap0" for "eth0" (see the header comment).
std::string tap_name_for(const std::string& pod_iface);

}  // namespace chl::network

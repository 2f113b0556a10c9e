#pragma once
// Reading what KubeVirt's virt-handler caches for the launcher (phase 1 → phase 2), in the JSON
// that Go's encoding/json writes for KubeVirt's types (pkg/network/cache):
//
//   DHCP configuration, pkg/network/cache/dhcpconfig.go `DHCPConfig`, written by virt-handler
//   for bridge binding into the pod at /var/run/kubevirt-private/vif-cache-<pod iface>.json
//   (util.VirtPrivateDir + "vif-cache-%s.json"; virt-launcher reads it as pid "self").
//   Go's encoding of its fields:
//     "IP", "IPv6"         netlink.Addr: the embedded *net.IPNet promotes "IP" (text) and
//                          "Mask" (net.IPMask is []byte: base64); a nil IPNet leaves both out;
//                          also "Label", "Flags", "Scope", "Peer", "Broadcast", ... (ignored);
//     "MAC"                net.HardwareAddr is []byte with no text marshaller: base64 or null;
//     "AdvertisingIPAddr", "AdvertisingIPv6Addr", "Gateway"   net.IP: text, "" when nil;
//     "Routes"             *[]netlink.Route: null or routes with "Dst" (null = default route,
//                          else {"IP","Mask"}), "Gw" (net.IP text) and many fields ignored here;
//     "Mtu" (uint16), "IPAMDisabled" (bool), "Name", "Subdomain" (strings).
//
//   Pod interface cache, pkg/network/cache/podinterface.go `PodIfaceCacheData`, kept by
//   virt-handler on its own side (<VirtPrivateDir>/network-info-cache/<vmi uid>/<iface name>):
//   {"iface": v1.Interface, "podIP": "...", "podIPs": [...], "networkState": 0|1|2}.
//   The launcher does not need it in a pod (virt-launcher never reads it); the reader is here
//   for tests and tools that look at what phase 1 recorded.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "network/ip.hpp"
#include "network/mac.hpp"
#include "network/plan.hpp"

namespace chl::network {

inline constexpr char kVirtPrivateDir[] = "/var/run/kubevirt-private";

struct KubevirtDhcpConfig {
  std::string name;
  std::optional<Ipv4Cidr> ip;      // "IP" with its mask; nullopt when the IPNet was nil
  std::string ipv6;                // "fd00::5/64"; "" when nil
  std::optional<Mac> mac;
  std::optional<Ipv4> advertising_ip;
  std::string advertising_ipv6;
  std::vector<Route4> routes;      // IPv4 routes only ("Dst" null = 0.0.0.0/0)
  std::uint16_t mtu = 0;
  bool ipam_disabled = false;
  std::optional<Ipv4> gateway;
  std::string subdomain;
};

// The document's text → the config; errors name the field ("DHCP cache: field Mtu: ...").
common::Result<KubevirtDhcpConfig> parse_kubevirt_dhcp_config(const std::string& json_text);
// <private_dir>/vif-cache-<pod_iface>.json.
std::string dhcp_cache_path(const std::string& private_dir, const std::string& pod_iface);
// Reads and parses it: "DHCP cache <path>: missing (phase 1 has not run?)", "...: malformed: ...".
common::Result<KubevirtDhcpConfig> read_kubevirt_dhcp_cache(const std::string& private_dir,
                                                            const std::string& pod_iface);

enum class PodIfaceState : int { Pending = 0, Started = 1, Finished = 2 };
struct KubevirtPodIfaceCache {
  std::string iface_name;  // iface.name ("" when iface was omitted)
  std::string pod_ip;
  std::vector<std::string> pod_ips;
  PodIfaceState state = PodIfaceState::Pending;
};
common::Result<KubevirtPodIfaceCache> parse_kubevirt_pod_iface_cache(const std::string& json_text);
// <dir>/network-info-cache/<vmi uid>/<iface name>.
std::string pod_iface_cache_path(const std::string& private_dir, const std::string& vmi_uid,
                                 const std::string& iface_name);

}  // namespace chl::network

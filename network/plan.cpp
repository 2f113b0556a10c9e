#include "network/plan.hpp"

#include <nettle/sha2.h>

#include <algorithm>
#include <cctype>

namespace chl::network {

const char* to_string(PlanBinding b) {
  switch (b) {
    case PlanBinding::Masquerade: return "masquerade";
    case PlanBinding::Bridge: return "bridge";
    case PlanBinding::Sriov: return "sriov";
  }
  return "?";
}

namespace {

constexpr std::size_t kMaxIfName = 15;  // IFNAMSIZ - 1
constexpr const char* kDefaultMasqCidr = "10.0.2.0/24";
// KubeVirt's IPv6 masquerade network: the bridge fd10:0:2::1/120, the guest fd10:0:2::2.
constexpr const char* kGateway6 = "fd10:0:2::1/120";
constexpr const char* kGuest6 = "fd10:0:2::2";
// Bridge binding: the bridge answers DHCP from a link-local address, one per interface
// (KubeVirt uses 169.254.75.1X for the same purpose).
constexpr std::uint32_t kBridgeServerBase = 0xa9fe4b0aU;  // 169.254.75.10

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Which bindings cannot be wired, and why (a table, one row per binding).
struct Refusal {
  vmi::Binding binding;
  const char* reason;
};
constexpr Refusal kRefused[] = {
    {vmi::Binding::Slirp, "slirp is not supported (removed from KubeVirt); use masquerade"},
    {vmi::Binding::Passt, "passt is not supported by ch-launcher; use masquerade"},
    {vmi::Binding::Macvtap, "macvtap is not supported by ch-launcher; use bridge"},
    {vmi::Binding::Plugin, "network binding plugins are not supported by ch-launcher"},
};

}  // namespace

std::string hashed_pod_interface_name(const std::string& network_name) {
  // namescheme.GenerateHashedInterfaceName: "pod" + the first 11 hex digits of SHA-256(name).
  sha256_ctx ctx;
  sha256_init(&ctx);
  sha256_update(&ctx, network_name.size(), reinterpret_cast<const std::uint8_t*>(network_name.data()));
  std::uint8_t digest[SHA256_DIGEST_SIZE];
  sha256_digest(&ctx, sizeof digest, digest);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (std::uint8_t b : digest) {
    hex += kHex[b >> 4];
    hex += kHex[b & 0xf];
  }
  return "pod" + hex.substr(0, 11);
}

std::string pod_interface_name(const vmi::Vmi& vmi, const vmi::Network& net, const PodFacts* pod) {
  if (net.kind == vmi::NetworkKind::Pod || net.multus_default) return "eth0";
  int ordinal = 0;
  for (const auto& n : vmi.spec.networks) {
    if (n.kind == vmi::NetworkKind::Multus && !n.multus_default) ++ordinal;
    if (&n == &net || n.name == net.name) break;
  }
  // KubeVirt names a secondary Multus interface by its network's hash (since v1.0); pods made
  // before that have ordinal names (netN), which it keeps (namescheme.CreateFromNetworkStatuses).
  // The pod's links say which scheme it has; without them, or with neither, the hashed one.
  const std::string hashed = hashed_pod_interface_name(net.name);
  const std::string ordinal_name = "net" + std::to_string(ordinal);
  if (pod && !pod->links.count(hashed) && pod->links.count(ordinal_name)) return ordinal_name;
  return hashed;
}

// The pod interface's name without the hashed scheme's "pod" prefix, as KubeVirt's link names
// derive from it.
static std::string without_pod_prefix(const std::string& pod_iface) {
  return pod_iface.rfind("pod", 0) == 0 ? pod_iface.substr(3) : pod_iface;
}

std::string bridge_name_for(const std::string& pod_iface) {
  // link.GenerateBridgeName: "k6t-" + the trimmed name.
  return ("k6t-" + without_pod_prefix(pod_iface)).substr(0, kMaxIfName);
}

std::string bridged_nic_name(const std::string& pod_iface) {
  // link.GenerateNewBridgedVmiInterfaceName: the pod interface renamed for bridge binding.
  return without_pod_prefix(pod_iface) + "-nic";
}

std::string tap_name_for(const std::string& pod_iface) {
  // link.GenerateTapDeviceName: "tap" + the name after its 3-letter prefix (eth0 -> tap0,
  // net1 -> tap1, pod<hash> -> tap<hash>).
  if (pod_iface.rfind("pod", 0) == 0 && pod_iface.size() == 14) return "tap" + pod_iface.substr(3);
  std::size_t digits = pod_iface.size();
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(pod_iface[digits - 1]))) --digits;
  const std::string prefix = pod_iface.substr(0, digits);
  if (digits < pod_iface.size() && (prefix == "eth" || prefix == "net"))
    return "tap" + pod_iface.substr(digits);
  return ("tap-" + pod_iface).substr(0, kMaxIfName);
}

PlanResult plan_networks(const vmi::Vmi& vmi, const PodFacts& pod, std::uint64_t vcpus) {
  PlanResult out;
  auto refuse = [&out](std::string path, std::string msg) {
    out.refusals.push_back({std::move(path), std::move(msg)});
  };

  std::vector<vmi::Interface> ifaces = vmi.spec.domain.devices.interfaces;
  std::vector<vmi::Network> networks = vmi.spec.networks;
  // KubeVirt's defaulting: no interfaces and no networks, autoattachPodInterface not false ->
  // one "default" interface on the pod network.
  if (ifaces.empty() && networks.empty() &&
      vmi.spec.domain.devices.autoattach_pod_interface.value_or(true)) {
    vmi::Interface def;
    def.name = "default";
    def.binding = vmi::Binding::Masquerade;
    def.binding_count = 1;
    ifaces.push_back(def);
    vmi::Network net;
    net.name = "default";
    net.kind = vmi::NetworkKind::Pod;
    networks.push_back(net);
  }
  vmi::Vmi vmi_defaulted = vmi;
  vmi_defaulted.spec.networks = networks;

  const bool multiqueue = vmi.spec.domain.devices.network_interface_multiqueue.value_or(false);
  std::map<std::string, std::string> mac_owner;  // formatted MAC -> path
  int bridge_count = 0;

  for (std::size_t i = 0; i < ifaces.size(); ++i) {
    const vmi::Interface& ifc = ifaces[i];
    const std::string path = "spec.domain.devices.interfaces[" + std::to_string(i) + "]";
    NetworkPlan p;
    p.iface_name = ifc.name;
    p.path = path;
    p.network_name = ifc.name;
    p.model = ifc.model.empty() ? "virtio" : ifc.model;

    const vmi::Network* net = nullptr;
    for (const auto& n : vmi_defaulted.spec.networks)
      if (n.name == ifc.name) net = &n;
    if (net == nullptr) {
      refuse(path + ".name", "no network named '" + ifc.name + "' in spec.networks");
      continue;
    }

    bool refused = false;
    for (const auto& r : kRefused) {
      if (ifc.binding == r.binding) {
        refuse(path, r.reason);
        refused = true;
      }
    }
    if (refused) continue;

    vmi::Binding binding = ifc.binding;
    if (binding == vmi::Binding::None)
      binding = vmi::Binding::Masquerade;  // see docs/network/wiring.md

    // MAC: from the spec, else generated stably.
    if (!ifc.mac_address.empty()) {
      auto mac = parse_mac(ifc.mac_address);
      if (!mac) {
        refuse(path + ".macAddress", "'" + ifc.mac_address + "' is not a MAC address");
        continue;
      }
      if (is_multicast(*mac)) {
        refuse(path + ".macAddress", "'" + ifc.mac_address + "' is a multicast address");
        continue;
      }
      p.mac = *mac;
    } else {
      p.mac = generated_mac(vmi.metadata.uid, ifc.name);
      p.mac_generated = true;
    }
    const std::string mac_text = format_mac(p.mac);
    if (auto it = mac_owner.find(mac_text); it != mac_owner.end()) {
      refuse(path + ".macAddress", "MAC " + mac_text + " is also used by " + it->second);
      continue;
    }
    mac_owner.emplace(mac_text, path);

    if (binding == vmi::Binding::Sriov) {
      auto vf = pod.sriov_vf_pci.find(net->name);
      if (vf == pod.sriov_vf_pci.end()) {
        refuse(path + ".sriov", "SR-IOV network '" + net->name + "' has no VF device in this pod");
        continue;
      }
      p.binding = PlanBinding::Sriov;
      p.sriov_pci = vf->second;
      out.plans.push_back(std::move(p));
      continue;
    }

    if (binding == vmi::Binding::Masquerade && net->kind != vmi::NetworkKind::Pod) {
      refuse(path + ".masquerade", "masquerade is only allowed on the pod network, '" + net->name +
                                       "' is a Multus network");
      continue;
    }
    p.pod_iface = pod_interface_name(vmi_defaulted, *net, &pod);
    p.bridge = bridge_name_for(p.pod_iface);
    p.tap = tap_name_for(p.pod_iface);
    auto link = pod.links.find(p.pod_iface);
    if (link == pod.links.end()) {
      refuse(path, "network '" + net->name + "' has no interface " + p.pod_iface +
                       " in the pod (is the network attached?)");
      continue;
    }
    p.mtu = link->second.mtu;
    p.queues = 1;
    if (multiqueue && p.model == "virtio" && vcpus > 1)
      p.queues = static_cast<std::uint32_t>(std::min<std::uint64_t>(vcpus, 256));  // MAX_TAP_QUEUES
    p.lease.mtu = p.mtu;
    p.lease.dns_servers = pod.dns_servers;
    p.lease.search_domains = pod.search_domains;
    p.lease.hostname = vmi.spec.hostname.empty() ? vmi.metadata.name : vmi.spec.hostname;

    if (binding == vmi::Binding::Masquerade) {
      const std::string cidr_text = net->vm_network_cidr.empty() ? kDefaultMasqCidr
                                                                  : net->vm_network_cidr;
      auto cidr = parse_ipv4_cidr(cidr_text);
      const std::string cidr_path = "spec.networks[" +
                                    std::to_string(net - vmi_defaulted.spec.networks.data()) +
                                    "].pod.vmNetworkCIDR";
      if (!cidr || cidr->prefix > 30) {
        refuse(cidr_path, "'" + cidr_text + "' is not an IPv4 network with room for two hosts");
        continue;
      }
      const Ipv4 base = network_of(*cidr);
      p.binding = PlanBinding::Masquerade;
      p.gateway4 = Ipv4Cidr{Ipv4{base.value + 1}, cidr->prefix};
      p.guest4 = Ipv4{base.value + 2};
      if (!link->second.ipv6.empty()) {
        p.gateway6 = kGateway6;
        p.guest6 = kGuest6;
      }
      for (const auto& port : ifc.ports) {
        std::string proto = lower(port.protocol.empty() ? "tcp" : port.protocol);
        p.ports.emplace_back(proto, static_cast<std::uint16_t>(port.port));
      }
      p.lease.address = Ipv4Cidr{p.guest4, cidr->prefix};
      p.lease.router = p.gateway4.address;
      p.lease.server_id = p.gateway4.address;
    } else {  // bridge
      p.binding = PlanBinding::Bridge;
      if (!ifc.ports.empty()) {
        refuse(path + ".ports", "ports are only meaningful with masquerade");
        continue;
      }
      p.gateway4 = Ipv4Cidr{Ipv4{kBridgeServerBase + static_cast<std::uint32_t>(bridge_count)}, 32};
      ++bridge_count;
      p.lease.server_id = p.gateway4.address;
      if (!link->second.ipv4.empty()) {
        p.lease.address = link->second.ipv4.front();
        p.guest4 = p.lease.address.address;
        for (const auto& r : link->second.routes4) {
          if (r.destination.prefix == 0 && r.gateway && !p.lease.router) p.lease.router = r.gateway;
          p.lease.routes.push_back(r);
        }
      }
      // No IPv4 on the pod interface: the guest gets no lease (an L2-only secondary network).
    }
    out.plans.push_back(std::move(p));
  }
  if (!out.refusals.empty()) out.plans.clear();
  return out;
}

}  // namespace chl::network

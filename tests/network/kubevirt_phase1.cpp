#include "tests/network/kubevirt_phase1.hpp"

#include <nftables/libnftables.h>

#include <sys/stat.h>

#include <algorithm>
#include <memory>
#include <regex>
#include <sstream>

#include "network/netlink.hpp"
#include "tests/network/netns.hpp"
#include "tests/support/test_support.hpp"

namespace chl::test::net {

namespace {

std::string nft_in(const std::string& ns, const std::string& commands, std::string* out = nullptr) {
  std::string why;
  in_netns(ns, [&] {
    std::unique_ptr<nft_ctx, void (*)(nft_ctx*)> ctx(nft_ctx_new(NFT_CTX_DEFAULT), nft_ctx_free);
    if (!ctx) {
      why = "nft_ctx_new failed";
      return;
    }
    nft_ctx_buffer_output(ctx.get());
    nft_ctx_buffer_error(ctx.get());
    if (nft_run_cmd_from_buffer(ctx.get(), commands.c_str()) != 0) {
      const char* e = nft_ctx_get_error_buffer(ctx.get());
      why = "nft: " + std::string(e ? e : "failed") + " running:\n" + commands;
      return;
    }
    if (out != nullptr) {
      const char* o = nft_ctx_get_output_buffer(ctx.get());
      *out = o ? o : "";
    }
  });
  return why;
}

std::string sysctl_in(const std::string& ns, const std::string& key, const std::string& value) {
  std::string why;
  in_netns(ns, [&] {
    if (auto st = chl::network::write_sysctl(key, value); !st) why = st.error().message();
  });
  return why;
}

// The MAC of `link` in `ns` ("" when not found).
std::string link_mac(const std::string& ns, const std::string& link) {
  const auto out = run_command({"ip", "-n", ns, "-o", "link", "show", link}).output;
  std::smatch m;
  static const std::regex ether(R"(link/ether ([0-9a-f:]{17}))");
  return std::regex_search(out, m, ether) ? m[1].str() : std::string();
}

// Phase1::lower_unprivileged_ports.
std::string unprivileged_ports(const Phase1& p) {
  return p.lower_unprivileged_ports ? sysctl_in(p.pod_ns, "net/ipv4/ip_unprivileged_port_start", "0") : std::string();
}

// KubeVirt's tap for a pod interface (link.GenerateTapDeviceName): "tap" + what follows its
// 3-letter prefix (eth0 -> tap0, net1 -> tap1).
std::string tap_for(const std::string& pod_iface) {
  return "tap" + pod_iface.substr(std::min<std::size_t>(3, pod_iface.size()));
}

}  // namespace

std::string kubevirt_create_tap(const Phase1& p, const std::string& tap) {
  // createTapDevice: netlink.Tuntap{Mode: IFF_TAP, Owner, Group, Flags: TUNTAP_DEFAULTS
  // (vnet_hdr, no_pi) or TUNTAP_MULTI_QUEUE_DEFAULTS}, persistent; then LinkSetMTU.
  std::vector<std::string> add = {"tuntap", "add", "dev", tap, "mode", "tap", "user", std::to_string(p.uid),
                                  "group", std::to_string(p.gid), "vnet_hdr"};
  const bool mq = (p.queues > 1) != p.multi_queue_flag_override;
  if (mq) add.emplace_back("multi_queue");
  const std::string bridge = "k6t-" + p.pod_iface;
  for (auto e : {ip(p.pod_ns, add), ip(p.pod_ns, {"link", "set", tap, "mtu", std::to_string(p.mtu)}),
                 ip(p.pod_ns, {"link", "set", tap, "master", bridge}), ip(p.pod_ns, {"link", "set", tap, "up"})})
    if (!e.empty()) return e;
  return {};
}

std::string kubevirt_phase1_masquerade(const Phase1& p) {
  const std::string bridge = "k6t-" + p.pod_iface;
  const std::string mtu = std::to_string(p.mtu);
  for (auto e : {ip(p.pod_ns, {"link", "add", bridge, "type", "bridge"}),
                 ip(p.pod_ns, {"link", "set", bridge, "address", "02:00:00:00:00:00", "mtu", mtu}),
                 ip(p.pod_ns, {"addr", "add", "10.0.2.1/24", "dev", bridge}),
                 ip(p.pod_ns, {"link", "set", bridge, "up"}),
                 sysctl_in(p.pod_ns, "net/ipv4/ip_forward", "1"),
                 sysctl_in(p.pod_ns, "net/ipv4/conf/" + bridge + "/route_localnet", "1"),
                 unprivileged_ports(p),
                 kubevirt_create_tap(p, tap_for(p.pod_iface))})
    if (!e.empty()) return e;
  if (p.ipv6)
    for (auto e : {ip(p.pod_ns, {"addr", "add", "fd10:0:2::1/120", "dev", bridge, "nodad"}),
                   sysctl_in(p.pod_ns, "net/ipv6/conf/all/forwarding", "1")})
      if (!e.empty()) return e;
  // setupNATByFamily per family, with WithLegacyMigrationPorts and a VMI without ports.
  const auto nat = [&](const std::string& family, const std::string& loopback, const std::string& gateway,
                       const std::string& guest) {
    const std::string t = family + " nat ";
    const std::string addr = family == "ip" ? "ip" : "ip6";
    return "add table " + family + " nat\n"
           "add chain " + t + "prerouting { type nat hook prerouting priority -100; }\n"
           "add chain " + t + "input { type nat hook input priority 100; }\n"
           "add chain " + t + "output { type nat hook output priority -100; }\n"
           "add chain " + t + "postrouting { type nat hook postrouting priority 100; }\n"
           "add chain " + t + "KUBEVIRT_PREINBOUND\n"
           "add chain " + t + "KUBEVIRT_POSTINBOUND\n"
           "add rule " + t + "postrouting " + addr + " saddr " + guest + " counter masquerade\n"
           "add rule " + t + "prerouting iifname " + p.pod_iface + " counter jump KUBEVIRT_PREINBOUND\n"
           "add rule " + t + "postrouting oifname " + bridge + " counter jump KUBEVIRT_POSTINBOUND\n"
           "add rule " + t + "output tcp dport { 49152, 49153 } " + addr + " saddr " + loopback + " counter return\n"
           "add rule " + t + "KUBEVIRT_POSTINBOUND tcp dport { 49152, 49153 } " + addr + " saddr " + loopback + " counter return\n"
           "add rule " + t + "KUBEVIRT_PREINBOUND counter dnat to " + guest + "\n"
           "add rule " + t + "KUBEVIRT_POSTINBOUND " + addr + " saddr { " + loopback + " } counter snat to " + gateway + "\n"
           "add rule " + t + "output " + addr + " daddr { " + loopback + " } counter dnat to " + guest + "\n";
  };
  std::string rules = nat("ip", "127.0.0.1", "10.0.2.1", "10.0.2.2");
  if (p.ipv6) rules += nat("ip6", "::1", "fd10:0:2::1", "fd10:0:2::2");
  return nft_in(p.pod_ns, rules);
}

std::string kubevirt_phase1_bridge(const Phase1& p, const PodIface& pod, const std::string& private_dir) {
  const std::string nic = p.pod_iface + "-nic", bridge = "k6t-" + p.pod_iface, mtu = std::to_string(p.mtu);
  // The DHCP cache as json.MarshalIndent writes cache.DHCPConfig (netlink.Addr's embedded
  // IPNet: "IP" text and "Mask" base64; MAC base64; Routes' Dst null = default).
  const auto slash = pod.cidr.find('/');
  const int prefix = std::stoi(pod.cidr.substr(slash + 1));
  std::string mask_bytes(4, '\0'), mac_bytes;
  for (int b = 0; b < prefix; ++b) mask_bytes[b / 8] = static_cast<char>(mask_bytes[b / 8] | (0x80 >> (b % 8)));
  for (std::size_t i = 0; i + 1 < pod.mac.size(); i += 3) mac_bytes += static_cast<char>(std::stoi(pod.mac.substr(i, 2), nullptr, 16));
  const auto b64 = [](const std::string& in) {
    static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (std::size_t i = 0; i < in.size(); i += 3) {
      std::uint32_t v = static_cast<std::uint8_t>(in[i]) << 16;
      if (i + 1 < in.size()) v |= static_cast<std::uint8_t>(in[i + 1]) << 8;
      if (i + 2 < in.size()) v |= static_cast<std::uint8_t>(in[i + 2]);
      out += k[(v >> 18) & 63];
      out += k[(v >> 12) & 63];
      out += i + 1 < in.size() ? k[(v >> 6) & 63] : '=';
      out += i + 2 < in.size() ? k[v & 63] : '=';
    }
    return out;
  };
  const std::string addr = pod.cidr.substr(0, slash);
  const std::string cache = "{\n  \"Name\": \"" + p.pod_iface + "\",\n  \"IP\": {\n    \"IP\": \"" + addr +
                            "\",\n    \"Mask\": \"" + b64(mask_bytes) +
                            "\",\n    \"Label\": \"" + p.pod_iface + "\",\n    \"Flags\": 128,\n    \"Scope\": 0,\n"
                            "    \"Peer\": null,\n    \"Broadcast\": \"\",\n    \"PreferedLft\": 0,\n    \"ValidLft\": 0,\n"
                            "    \"LinkIndex\": 0\n  },\n  \"IPv6\": {\n    \"Label\": \"\",\n    \"Flags\": 0,\n    \"Scope\": 0,\n"
                            "    \"Peer\": null,\n    \"Broadcast\": \"\",\n    \"PreferedLft\": 0,\n    \"ValidLft\": 0,\n"
                            "    \"LinkIndex\": 0\n  },\n  \"MAC\": \"" + b64(mac_bytes) +
                            "\",\n  \"AdvertisingIPAddr\": \"\",\n  \"AdvertisingIPv6Addr\": \"\",\n  \"Routes\": [\n"
                            "    {\n      \"LinkIndex\": 2,\n      \"ILinkIndex\": 0,\n      \"Scope\": 0,\n      \"Dst\": null,\n"
                            "      \"Src\": \"\",\n      \"Gw\": \"" + pod.gateway + "\",\n      \"MultiPath\": null,\n"
                            "      \"Protocol\": 3,\n      \"Priority\": 0,\n      \"Family\": 2,\n      \"Table\": 254,\n"
                            "      \"Type\": 1,\n      \"Tos\": 0,\n      \"Flags\": 0\n    }\n  ],\n  \"Mtu\": " + mtu +
                            ",\n  \"IPAMDisabled\": false,\n  \"Gateway\": \"" + pod.gateway + "\",\n  \"Subdomain\": \"\"\n}";
  const auto path = private_dir + "/vif-cache-" + p.pod_iface + ".json";
  write_file(path, cache);
  ::chmod(path.c_str(), 0604);  // writeToCachedFile's mode
  for (auto e : {ip(p.pod_ns, {"link", "set", p.pod_iface, "down"}), ip(p.pod_ns, {"addr", "flush", "dev", p.pod_iface}),
                 ip(p.pod_ns, {"link", "set", p.pod_iface, "name", nic}),
                 ip(p.pod_ns, {"link", "add", bridge, "mtu", mtu, "type", "bridge"}),
                 ip(p.pod_ns, {"addr", "add", "169.254.75.10/32", "dev", bridge}),
                 ip(p.pod_ns, {"link", "set", bridge, "up"}),
                 // CopyMacFrom the bridge (netpod.go, nmstate spec.go Apply): the pod's MAC is
                 // the guest's now, and a port with it would make the bridge keep the guest's
                 // frames for itself (a local FDB entry).
                 ip(p.pod_ns, {"link", "set", nic, "address", link_mac(p.pod_ns, bridge)}),
                 ip(p.pod_ns, {"link", "set", nic, "master", bridge}),
                 ip(p.pod_ns, {"link", "set", nic, "type", "bridge_slave", "learning", "off"}),
                 ip(p.pod_ns, {"link", "set", nic, "up"}),
                 // The `dummy` stand-in: the pod's MAC, MTU and address.
                 ip(p.pod_ns, {"link", "add", p.pod_iface, "mtu", mtu, "address", pod.mac, "type", "bridge"}),
                 ip(p.pod_ns, {"addr", "add", pod.cidr, "dev", p.pod_iface}),
                 // netpod.go: an IPv4 bridge binding sets arp_ignore 1 (ARPReplyMode1), so the
                 // pod's stack answers no ARP for the pod's address (on the dummy) from the
                 // bridge: the guest, which has it now, does.
                 sysctl_in(p.pod_ns, "net/ipv4/conf/all/arp_ignore", "1"),
                 unprivileged_ports(p), kubevirt_create_tap(p, tap_for(p.pod_iface))})
    if (!e.empty()) return e;
  return {};
}

void kubevirt_phase1_undo(const std::string& ns, const std::string& pod_iface) {
  (void)ip(ns, {"link", "del", "tap0"});
  (void)ip(ns, {"link", "del", "k6t-" + pod_iface});
  std::string tables;
  (void)nft_in(ns, "list tables", &tables);
  if (tables.find("table ip nat\n") != std::string::npos) (void)nft_in(ns, "delete table ip nat");
  if (tables.find("table ip6 nat\n") != std::string::npos) (void)nft_in(ns, "delete table ip6 nat");
}

std::string netns_snapshot(const std::string& ns) {
  std::ostringstream out;
  auto links = run_command({"ip", "-n", ns, "-d", "-o", "link", "show"});
  static const std::regex volatile_parts(R"(<[^>]*>|state \S+|\w+_timer\s+\S+|qlen \d+|altname \S+)");
  std::istringstream in(links.output);
  std::string line;
  while (std::getline(in, line)) out << std::regex_replace(line, volatile_parts, "") << '\n';
  out << run_command({"ip", "-n", ns, "-o", "addr", "show", "scope", "global"}).output;
  std::string rules;
  if (auto e = nft_in(ns, "list ruleset", &rules); !e.empty()) out << e;
  static const std::regex counters(R"(counter packets \d+ bytes \d+)");
  out << std::regex_replace(rules, counters, "counter");
  return out.str();
}

}  // namespace chl::test::net

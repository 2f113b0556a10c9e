#include "network/kubevirt_cache.hpp"

#include <arpa/inet.h>

#include <cerrno>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "vmi/parse_support.hpp"

namespace chl::network {

using common::Result;
using nlohmann::json;

namespace {

using Bytes = std::string;

// A Go []byte field: base64 text (or null/absent: empty).
Result<Bytes> go_bytes(const json& doc, const char* field) {
  auto it = doc.find(field);
  if (it == doc.end() || it->is_null()) return Bytes{};
  if (!it->is_string()) return common::fail(std::errc::invalid_argument, std::string("field ") + field + ": not base64 text");
  Bytes out;
  if (!vmi::base64_decode(it->get<std::string>(), out))
    return common::fail(std::errc::invalid_argument, std::string("field ") + field + ": malformed base64");
  return out;
}

// A Go net.IP field: its text ("" or absent or null: none).
Result<std::string> go_ip_text(const json& doc, const char* field) {
  auto it = doc.find(field);
  if (it == doc.end() || it->is_null()) return std::string{};
  if (!it->is_string()) return common::fail(std::errc::invalid_argument, std::string("field ") + field + ": not an IP address text");
  return it->get<std::string>();
}

Result<std::optional<Ipv4>> go_ipv4(const json& doc, const char* field) {
  CHL_TRY(auto text, go_ip_text(doc, field));
  if (text.empty()) return std::optional<Ipv4>{};
  auto ip = parse_ipv4(text);
  if (!ip) return common::fail(std::errc::invalid_argument, std::string("field ") + field + ": '" + text + "' is not an IPv4 address");
  return std::optional<Ipv4>(*ip);
}

// A net.IPMask's prefix length: contiguous ones, as Go's IPMask.Size (a 16-byte IPv4 mask has
// 96 leading ones for the v4-mapped part: `v4` drops them).
Result<int> mask_prefix(const Bytes& mask, bool v4) {
  std::size_t start = 0;
  if (v4 && mask.size() == 16) start = 12;
  else if (v4 && mask.size() != 4) return common::fail(std::errc::invalid_argument, "IPv4 mask of " + std::to_string(mask.size()) + " bytes");
  else if (!v4 && mask.size() != 16) return common::fail(std::errc::invalid_argument, "IPv6 mask of " + std::to_string(mask.size()) + " bytes");
  int ones = 0;
  bool zero_seen = false;
  for (std::size_t i = start; i < mask.size(); ++i)
    for (int b = 7; b >= 0; --b) {
      const bool one = ((static_cast<unsigned char>(mask[i]) >> b) & 1) != 0;
      if (one && zero_seen) return common::fail(std::errc::invalid_argument, "mask is not contiguous");
      if (one) ++ones;
      else zero_seen = true;
    }
  return ones;
}

// An embedded *net.IPNet (netlink.Addr, or a Route's Dst): {"IP": text, "Mask": base64};
// nullopt when it was nil (the keys are absent, or the object is null).
Result<std::optional<std::pair<std::string, Bytes>>> go_ipnet(const json& obj) {
  using R = std::optional<std::pair<std::string, Bytes>>;
  if (obj.is_null()) return R{};
  if (!obj.is_object()) return common::fail(std::errc::invalid_argument, "not an object");
  CHL_TRY(auto ip, go_ip_text(obj, "IP"));
  CHL_TRY(auto mask, go_bytes(obj, "Mask"));
  if (ip.empty() && mask.empty()) return R{};
  if (ip.empty()) return common::fail(std::errc::invalid_argument, "a Mask without an IP");
  return R(std::in_place, ip, mask);
}

Result<std::optional<Ipv4Cidr>> go_ipv4net(const json& obj) {
  CHL_TRY(auto net, go_ipnet(obj));
  if (!net) return std::optional<Ipv4Cidr>{};
  auto ip = parse_ipv4(net->first);
  if (!ip) return common::fail(std::errc::invalid_argument, "'" + net->first + "' is not an IPv4 address");
  CHL_TRY(int prefix, mask_prefix(net->second, true));
  return std::optional<Ipv4Cidr>(Ipv4Cidr{*ip, prefix});
}

Result<std::string> go_ipv6net(const json& obj) {
  CHL_TRY(auto net, go_ipnet(obj));
  if (!net) return std::string{};
  in6_addr a{};
  if (::inet_pton(AF_INET6, net->first.c_str(), &a) != 1)
    return common::fail(std::errc::invalid_argument, "'" + net->first + "' is not an IPv6 address");
  CHL_TRY(int prefix, mask_prefix(net->second, false));
  return net->first + "/" + std::to_string(prefix);
}

Result<KubevirtDhcpConfig> parse_dhcp(const json& doc) {
  if (!doc.is_object()) return common::fail(std::errc::invalid_argument, "not a JSON object");
  KubevirtDhcpConfig c;
  auto field = [](const char* name, auto r) { return wrap(std::move(r), std::string("field ") + name); };
  if (auto it = doc.find("Name"); it != doc.end() && !it->is_null()) {
    if (!it->is_string()) return common::fail(std::errc::invalid_argument, "field Name: not a string");
    c.name = it->get<std::string>();
  }
  if (auto it = doc.find("IP"); it != doc.end()) {
    CHL_TRY(c.ip, field("IP", go_ipv4net(*it)));
  }
  if (auto it = doc.find("IPv6"); it != doc.end()) {
    CHL_TRY(c.ipv6, field("IPv6", go_ipv6net(*it)));
  }
  CHL_TRY(auto mac, go_bytes(doc, "MAC"));
  if (!mac.empty()) {
    if (mac.size() != 6) return common::fail(std::errc::invalid_argument, "field MAC: " + std::to_string(mac.size()) + " bytes, not 6");
    Mac m{};
    for (std::size_t i = 0; i < 6; ++i) m[i] = static_cast<std::uint8_t>(mac[i]);
    c.mac = m;
  }
  CHL_TRY(c.advertising_ip, go_ipv4(doc, "AdvertisingIPAddr"));
  CHL_TRY(c.advertising_ipv6, go_ip_text(doc, "AdvertisingIPv6Addr"));
  CHL_TRY(c.gateway, go_ipv4(doc, "Gateway"));
  if (auto it = doc.find("Routes"); it != doc.end() && !it->is_null()) {
    if (!it->is_array()) return common::fail(std::errc::invalid_argument, "field Routes: not an array");
    std::size_t i = 0;
    for (const auto& r : *it) {
      const std::string where = "field Routes[" + std::to_string(i++) + "]";
      if (!r.is_object()) return common::fail(std::errc::invalid_argument, where + ": not an object");
      CHL_TRY(auto gw_text, wrap(go_ip_text(r, "Gw"), where));
      const bool v6 = gw_text.find(':') != std::string::npos;
      std::optional<Ipv4Cidr> dst;
      if (auto d = r.find("Dst"); d != r.end() && !d->is_null()) {
        CHL_TRY(auto d6, wrap(go_ipnet(*d), where + ".Dst"));
        if (d6 && d6->first.find(':') != std::string::npos) continue;  // an IPv6 route: not for DHCPv4
        CHL_TRY(dst, wrap(go_ipv4net(*d), where + ".Dst"));
      }
      if (v6) continue;
      Route4 route{dst.value_or(Ipv4Cidr{Ipv4{}, 0}), std::nullopt};
      if (!gw_text.empty()) {
        route.gateway = parse_ipv4(gw_text);
        if (!route.gateway) return common::fail(std::errc::invalid_argument, where + ".Gw: '" + gw_text + "' is not an IPv4 address");
      }
      c.routes.push_back(route);
    }
  }
  if (auto it = doc.find("Mtu"); it != doc.end() && !it->is_null()) {
    if (!it->is_number_unsigned() || it->get<std::uint64_t>() > 65535)
      return common::fail(std::errc::invalid_argument, "field Mtu: not a uint16");
    c.mtu = it->get<std::uint16_t>();
  }
  if (auto it = doc.find("IPAMDisabled"); it != doc.end() && !it->is_null()) {
    if (!it->is_boolean()) return common::fail(std::errc::invalid_argument, "field IPAMDisabled: not a boolean");
    c.ipam_disabled = it->get<bool>();
  }
  if (auto it = doc.find("Subdomain"); it != doc.end() && !it->is_null()) {
    if (!it->is_string()) return common::fail(std::errc::invalid_argument, "field Subdomain: not a string");
    c.subdomain = it->get<std::string>();
  }
  return c;
}

Result<std::string> read_small_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return common::fail_errno(path);
  std::string text;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() < (1u << 20)) text.append(buf, n);
  const bool bad = std::ferror(f) != 0;
  std::fclose(f);
  if (bad) return common::fail(std::errc::io_error, "reading " + path);
  return text;
}

}  // namespace

Result<KubevirtDhcpConfig> parse_kubevirt_dhcp_config(const std::string& json_text) {
  auto doc = json::parse(json_text, nullptr, false);
  if (doc.is_discarded()) return common::fail(std::errc::invalid_argument, "DHCP cache: not JSON");
  return wrap(parse_dhcp(doc), "DHCP cache");
}

std::string dhcp_cache_path(const std::string& private_dir, const std::string& pod_iface) {
  return private_dir + "/vif-cache-" + pod_iface + ".json";
}

Result<KubevirtDhcpConfig> read_kubevirt_dhcp_cache(const std::string& private_dir, const std::string& pod_iface) {
  const auto path = dhcp_cache_path(private_dir, pod_iface);
  auto text = read_small_file(path);
  if (!text) {
    if (text.error().code == std::errc::no_such_file_or_directory)
      return common::fail(std::errc::no_such_file_or_directory,
                          "DHCP cache " + path + " is missing (virt-handler's phase 1 has not written it)");
    return tl::unexpected(text.error().wrap("DHCP cache"));
  }
  auto c = parse_kubevirt_dhcp_config(*text);
  if (!c) return tl::unexpected(c.error().wrap(path + " is malformed"));
  return c;
}

Result<KubevirtPodIfaceCache> parse_kubevirt_pod_iface_cache(const std::string& json_text) {
  auto doc = json::parse(json_text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return common::fail(std::errc::invalid_argument, "pod interface cache: not a JSON object");
  KubevirtPodIfaceCache c;
  auto str = [&](const json& o, const char* k, std::string& out) -> common::Status {
    auto it = o.find(k);
    if (it == o.end() || it->is_null()) return {};
    if (!it->is_string()) return common::fail(std::errc::invalid_argument, std::string("pod interface cache: field ") + k + ": not a string");
    out = it->get<std::string>();
    return {};
  };
  if (auto it = doc.find("iface"); it != doc.end() && !it->is_null()) {
    if (!it->is_object()) return common::fail(std::errc::invalid_argument, "pod interface cache: field iface: not an object");
    CHL_TRY_VOID(str(*it, "name", c.iface_name));
  }
  CHL_TRY_VOID(str(doc, "podIP", c.pod_ip));
  if (auto it = doc.find("podIPs"); it != doc.end() && !it->is_null()) {
    if (!it->is_array()) return common::fail(std::errc::invalid_argument, "pod interface cache: field podIPs: not an array");
    for (const auto& ip : *it) {
      if (!ip.is_string()) return common::fail(std::errc::invalid_argument, "pod interface cache: field podIPs: not strings");
      c.pod_ips.push_back(ip.get<std::string>());
    }
  }
  if (auto it = doc.find("networkState"); it != doc.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<std::int64_t>() < 0 || it->get<std::int64_t>() > 2)
      return common::fail(std::errc::invalid_argument, "pod interface cache: field networkState: not 0, 1 or 2");
    c.state = static_cast<PodIfaceState>(it->get<int>());
  }
  return c;
}

std::string pod_iface_cache_path(const std::string& private_dir, const std::string& vmi_uid,
                                 const std::string& iface_name) {
  return private_dir + "/network-info-cache/" + vmi_uid + "/" + iface_name;
}

}  // namespace chl::network

#include "network/dhcp_packet.hpp"

#include <algorithm>

namespace chl::network {

namespace {

constexpr std::size_t kFixedSize = 236;
constexpr std::uint32_t kMagic = 0x63825363;
constexpr std::size_t kMinReply = 300;  // BOOTP minimum; some clients drop shorter packets

enum Opt : std::uint8_t {
  kPad = 0, kSubnetMask = 1, kRouter = 3, kDns = 6, kHostname = 12, kDomainName = 15,
  kMtu = 26, kRequestedIp = 50, kLeaseTime = 51, kMsgType = 53, kServerId = 54, kParamList = 55,
  kMessage = 56, kSearch = 119, kClasslessRoutes = 121, kEnd = 255,
};

std::uint32_t get32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}
void put32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<std::uint8_t>(v >> s));
}
void put16(std::vector<std::uint8_t>& out, std::uint16_t v) {
  out.push_back(static_cast<std::uint8_t>(v >> 8));
  out.push_back(static_cast<std::uint8_t>(v));
}
// An option longer than 255 bytes is split into several of the same code (RFC 3396).
void put_opt(std::vector<std::uint8_t>& out, std::uint8_t code, const std::vector<std::uint8_t>& v) {
  std::size_t off = 0;
  do {
    const std::size_t n = std::min<std::size_t>(255, v.size() - off);
    out.push_back(code);
    out.push_back(static_cast<std::uint8_t>(n));
    out.insert(out.end(), v.begin() + static_cast<long>(off), v.begin() + static_cast<long>(off + n));
    off += n;
  } while (off < v.size());
}
std::vector<std::uint8_t> ip_bytes(const std::vector<Ipv4>& ips) {
  std::vector<std::uint8_t> v;
  for (auto ip : ips) put32(v, ip.value);
  return v;
}

// Reads a DNS name list (RFC 1035 labels, with compression pointers) from option 119's value.
bool decode_search_list(const std::vector<std::uint8_t>& v, std::vector<std::string>& out) {
  std::size_t pos = 0;
  while (pos < v.size()) {
    std::string name;
    std::size_t p = pos;
    bool jumped = false;
    int hops = 0;
    while (true) {
      if (p >= v.size()) return false;
      const std::uint8_t len = v[p];
      if (len == 0) {
        if (!jumped) pos = p + 1;
        break;
      }
      if ((len & 0xc0) == 0xc0) {
        if (p + 1 >= v.size() || ++hops > 16) return false;
        if (!jumped) pos = p + 2;
        jumped = true;
        p = static_cast<std::size_t>(((len & 0x3f) << 8) | v[p + 1]);
        continue;
      }
      if (p + 1 + len > v.size()) return false;
      if (!name.empty()) name += '.';
      name.append(reinterpret_cast<const char*>(&v[p + 1]), len);
      p += 1 + len;
    }
    out.push_back(name);
  }
  return true;
}

}  // namespace

std::vector<std::uint8_t> encode_classless_routes(const std::vector<Route4>& routes) {
  std::vector<std::uint8_t> v;
  for (const auto& r : routes) {
    const int prefix = r.destination.prefix;
    v.push_back(static_cast<std::uint8_t>(prefix));
    const std::uint32_t dest = network_of(r.destination).value;
    for (int i = 0; i < (prefix + 7) / 8; ++i) v.push_back(static_cast<std::uint8_t>(dest >> (24 - 8 * i)));
    put32(v, r.gateway ? r.gateway->value : 0);
  }
  return v;
}

std::vector<std::uint8_t> encode_search_list(const std::vector<std::string>& domains) {
  std::vector<std::uint8_t> v;
  for (const auto& d : domains) {
    std::size_t start = 0;
    while (start < d.size()) {
      std::size_t dot = d.find('.', start);
      if (dot == std::string::npos) dot = d.size();
      const std::size_t len = std::min<std::size_t>(63, dot - start);
      if (len > 0) {
        v.push_back(static_cast<std::uint8_t>(len));
        v.insert(v.end(), d.begin() + static_cast<long>(start), d.begin() + static_cast<long>(start + len));
      }
      start = dot + 1;
    }
    v.push_back(0);
  }
  return v;
}

common::Result<DhcpMessage> decode_dhcp(std::span<const std::uint8_t> pkt) {
  if (pkt.size() < kFixedSize + 4)
    return common::fail(std::errc::bad_message, "DHCP packet of " + std::to_string(pkt.size()) + " bytes is too short");
  const std::uint8_t* b = pkt.data();
  if (get32(b + kFixedSize) != kMagic) return common::fail(std::errc::bad_message, "DHCP packet without the magic cookie");
  DhcpMessage m;
  m.op = b[0];
  if (b[1] != 1 || b[2] != 6) return common::fail(std::errc::bad_message, "DHCP packet for a non-Ethernet hardware type");
  m.xid = get32(b + 4);
  m.secs = static_cast<std::uint16_t>((b[8] << 8) | b[9]);
  m.flags = static_cast<std::uint16_t>((b[10] << 8) | b[11]);
  m.ciaddr = Ipv4{get32(b + 12)};
  m.yiaddr = Ipv4{get32(b + 16)};
  m.siaddr = Ipv4{get32(b + 20)};
  m.giaddr = Ipv4{get32(b + 24)};
  std::copy_n(b + 28, 6, m.chaddr.begin());

  // Options: concatenate repeated codes (RFC 3396) before interpreting.
  std::vector<std::pair<std::uint8_t, std::vector<std::uint8_t>>> opts;
  std::size_t p = kFixedSize + 4;
  while (p < pkt.size()) {
    const std::uint8_t code = b[p];
    if (code == kPad) { ++p; continue; }
    if (code == kEnd) break;
    if (p + 1 >= pkt.size() || p + 2 + b[p + 1] > pkt.size())
      return common::fail(std::errc::bad_message, "DHCP option " + std::to_string(code) + " runs past the packet");
    const std::uint8_t len = b[p + 1];
    auto it = std::find_if(opts.begin(), opts.end(), [code](auto& o) { return o.first == code; });
    if (it == opts.end()) {
      opts.emplace_back(code, std::vector<std::uint8_t>{});
      it = opts.end() - 1;
    }
    it->second.insert(it->second.end(), b + p + 2, b + p + 2 + len);
    p += 2 + len;
  }
  auto bad = [](int code) { return common::fail(std::errc::bad_message, "DHCP option " + std::to_string(code) + " has a bad length"); };
  for (const auto& [code, v] : opts) {
    switch (code) {
      case kMsgType:
        if (v.size() != 1 || v[0] < 1 || v[0] > 8) return bad(code);
        m.type = static_cast<DhcpType>(v[0]);
        break;
      case kRequestedIp: if (v.size() != 4) return bad(code); m.requested_ip = Ipv4{get32(v.data())}; break;
      case kServerId: if (v.size() != 4) return bad(code); m.server_id = Ipv4{get32(v.data())}; break;
      case kSubnetMask: if (v.size() != 4) return bad(code); m.subnet_mask = Ipv4{get32(v.data())}; break;
      case kRouter: if (v.size() < 4 || v.size() % 4) return bad(code); m.router = Ipv4{get32(v.data())}; break;
      case kDns:
        if (v.size() % 4) return bad(code);
        for (std::size_t i = 0; i < v.size(); i += 4) m.dns_servers.push_back(Ipv4{get32(v.data() + i)});
        break;
      case kHostname: m.hostname.assign(v.begin(), v.end()); break;
      case kDomainName: m.domain_name.assign(v.begin(), v.end()); break;
      case kMtu: if (v.size() != 2) return bad(code); m.mtu = static_cast<std::uint16_t>((v[0] << 8) | v[1]); break;
      case kLeaseTime: if (v.size() != 4) return bad(code); m.lease_seconds = get32(v.data()); break;
      case kParamList: m.parameter_list = v; break;
      case kMessage: m.message.assign(v.begin(), v.end()); break;
      case kSearch: if (!decode_search_list(v, m.search_domains)) return bad(code); break;
      case kClasslessRoutes: {
        std::size_t i = 0;
        while (i < v.size()) {
          const int prefix = v[i];
          const std::size_t n = static_cast<std::size_t>((prefix + 7) / 8);
          if (prefix > 32 || i + 1 + n + 4 > v.size()) return bad(code);
          std::uint32_t dest = 0;
          for (std::size_t k = 0; k < n; ++k) dest |= std::uint32_t{v[i + 1 + k]} << (24 - 8 * k);
          Route4 r{Ipv4Cidr{Ipv4{dest}, prefix}, std::nullopt};
          const std::uint32_t gw = get32(v.data() + i + 1 + n);
          if (gw != 0) r.gateway = Ipv4{gw};
          m.classless_routes.push_back(r);
          i += 1 + n + 4;
        }
        break;
      }
      default: break;  // options we do not read
    }
  }
  return m;
}

std::vector<std::uint8_t> encode_dhcp(const DhcpMessage& m) {
  std::vector<std::uint8_t> out;
  out.reserve(kMinReply + 64);
  out.push_back(m.op);
  out.push_back(1);  // Ethernet
  out.push_back(6);
  out.push_back(0);  // hops
  put32(out, m.xid);
  put16(out, m.secs);
  put16(out, m.flags);
  put32(out, m.ciaddr.value);
  put32(out, m.yiaddr.value);
  put32(out, m.siaddr.value);
  put32(out, m.giaddr.value);
  out.insert(out.end(), m.chaddr.begin(), m.chaddr.end());
  out.resize(kFixedSize, 0);  // rest of chaddr, sname, file
  put32(out, kMagic);
  if (m.type) put_opt(out, kMsgType, {static_cast<std::uint8_t>(*m.type)});
  auto ip4 = [](Ipv4 ip) { return ip_bytes({ip}); };
  if (m.server_id) put_opt(out, kServerId, ip4(*m.server_id));
  if (m.requested_ip) put_opt(out, kRequestedIp, ip4(*m.requested_ip));
  if (!m.parameter_list.empty()) put_opt(out, kParamList, m.parameter_list);
  if (m.lease_seconds) {
    std::vector<std::uint8_t> v;
    put32(v, *m.lease_seconds);
    put_opt(out, kLeaseTime, v);
  }
  if (m.subnet_mask) put_opt(out, kSubnetMask, ip4(*m.subnet_mask));
  if (m.router) put_opt(out, kRouter, ip4(*m.router));
  if (!m.dns_servers.empty()) put_opt(out, kDns, ip_bytes(m.dns_servers));
  if (!m.hostname.empty()) put_opt(out, kHostname, {m.hostname.begin(), m.hostname.end()});
  if (!m.domain_name.empty()) put_opt(out, kDomainName, {m.domain_name.begin(), m.domain_name.end()});
  if (m.mtu) {
    std::vector<std::uint8_t> v;
    put16(v, *m.mtu);
    put_opt(out, kMtu, v);
  }
  if (!m.search_domains.empty()) put_opt(out, kSearch, encode_search_list(m.search_domains));
  if (!m.classless_routes.empty()) put_opt(out, kClasslessRoutes, encode_classless_routes(m.classless_routes));
  if (!m.message.empty()) put_opt(out, kMessage, {m.message.begin(), m.message.end()});
  out.push_back(kEnd);
  if (out.size() < kMinReply) out.resize(kMinReply, 0);
  return out;
}

std::optional<DhcpMessage> dhcp_answer(const DhcpMessage& req, const Mac& mac, const Lease& lease) {
  if (req.op != 1 || !req.type) return std::nullopt;
  DhcpMessage r;
  r.op = 2;
  r.xid = req.xid;
  r.flags = req.flags;
  r.giaddr = req.giaddr;
  r.chaddr = req.chaddr;
  r.server_id = lease.server_id;
  const bool ours = req.chaddr == mac;
  const bool has_lease = lease.address.address.value != 0;

  auto fill = [&](DhcpMessage& a, bool with_address) {
    if (with_address) {
      a.yiaddr = lease.address.address;
      a.lease_seconds = lease.lease_seconds;
      a.subnet_mask = netmask(lease.address.prefix);
    }
    a.router = lease.router;
    a.dns_servers = lease.dns_servers;
    a.hostname = lease.hostname;
    if (!lease.search_domains.empty()) {
      a.domain_name = lease.search_domains.front();
      a.search_domains = lease.search_domains;
    }
    a.mtu = static_cast<std::uint16_t>(std::min<std::uint32_t>(lease.mtu, 65535));
    // RFC 3442: a client that asked for 121 ignores option 3, so the default route goes in too.
    a.classless_routes = lease.routes;
    if (lease.router && std::none_of(lease.routes.begin(), lease.routes.end(),
                                     [](const Route4& rt) { return rt.destination.prefix == 0; }))
      a.classless_routes.push_back(Route4{Ipv4Cidr{Ipv4{0}, 0}, lease.router});
  };

  switch (*req.type) {
    case DhcpType::Discover:
      if (!ours || !has_lease) return std::nullopt;
      r.type = DhcpType::Offer;
      fill(r, true);
      return r;
    case DhcpType::Request: {
      // A REQUEST answering another server's OFFER is not for us.
      if (req.server_id && *req.server_id != lease.server_id) return std::nullopt;
      const Ipv4 wanted = req.requested_ip ? *req.requested_ip : req.ciaddr;
      if (ours && has_lease && wanted == lease.address.address) {
        r.type = DhcpType::Ack;
        r.ciaddr = req.ciaddr;
        fill(r, true);
        return r;
      }
      r.type = DhcpType::Nak;
      r.message = ours ? "requested address is not this client's lease" : "unknown client";
      r.flags = 0x8000;  // a NAK is always broadcast
      return r;
    }
    case DhcpType::Inform:
      if (!ours) return std::nullopt;
      r.type = DhcpType::Ack;
      r.ciaddr = req.ciaddr;
      fill(r, false);
      return r;
    default:
      return std::nullopt;  // RELEASE, DECLINE: the lease is fixed, nothing to do
  }
}

}  // namespace chl::network

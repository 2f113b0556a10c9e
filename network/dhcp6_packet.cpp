#include "network/dhcp6_packet.hpp"

#include <arpa/inet.h>

#include "network/dhcp_packet.hpp"

namespace chl::network {
namespace {

constexpr std::uint16_t kClientId = 1, kServerId = 2, kIaNa = 3, kIaAddr = 5, kStatusCode = 13,
                        kRapidCommit = 14, kDomainList = 24;

std::uint16_t get16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] << 8 | p[1]); }
std::uint32_t get32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) << 24 | static_cast<std::uint32_t>(p[1]) << 16 |
         static_cast<std::uint32_t>(p[2]) << 8 | p[3];
}
void put16(std::vector<std::uint8_t>& v, std::uint16_t x) {
  v.push_back(static_cast<std::uint8_t>(x >> 8));
  v.push_back(static_cast<std::uint8_t>(x));
}
void put32(std::vector<std::uint8_t>& v, std::uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(static_cast<std::uint8_t>(x >> s));
}
void put_opt(std::vector<std::uint8_t>& v, std::uint16_t code,
             const std::vector<std::uint8_t>& data) {
  put16(v, code);
  put16(v, static_cast<std::uint16_t>(data.size()));
  v.insert(v.end(), data.begin(), data.end());
}

// RFC 1035 names, uncompressed, as option 24 carries them.
std::vector<std::string> decode_names(std::span<const std::uint8_t> d) {
  std::vector<std::string> out;
  std::string name;
  for (std::size_t i = 0; i < d.size();) {
    const std::uint8_t len = d[i++];
    if (len == 0) {
      out.push_back(name);
      name.clear();
      continue;
    }
    if (len > 63 || i + len > d.size()) break;
    if (!name.empty()) name += '.';
    name.append(reinterpret_cast<const char*>(d.data() + i), len);
    i += len;
  }
  return out;
}

}  // namespace

std::optional<Ipv6Bytes> parse_ipv6(const std::string& text) {
  Ipv6Bytes b{};
  if (::inet_pton(AF_INET6, text.c_str(), b.data()) != 1) return std::nullopt;
  return b;
}

common::Result<Dhcp6Message> decode_dhcp6(std::span<const std::uint8_t> pkt) {
  if (pkt.size() < 4)
    return common::fail(std::errc::bad_message,
                        "DHCPv6 message of " + std::to_string(pkt.size()) + " bytes is too short");
  Dhcp6Message m;
  m.type = pkt[0];
  m.xid =
      static_cast<std::uint32_t>(pkt[1]) << 16 | static_cast<std::uint32_t>(pkt[2]) << 8 | pkt[3];
  std::size_t i = 4;
  while (i < pkt.size()) {
    if (i + 4 > pkt.size())
      return common::fail(std::errc::bad_message, "DHCPv6 option header truncated");
    const std::uint16_t code = get16(&pkt[i]);
    const std::uint16_t len = get16(&pkt[i + 2]);
    i += 4;
    if (i + len > pkt.size())
      return common::fail(std::errc::bad_message,
                          "DHCPv6 option " + std::to_string(code) + " truncated");
    const auto data = pkt.subspan(i, len);
    switch (code) {
      case kClientId:
        m.client_id.assign(data.begin(), data.end());
        break;
      case kServerId:
        m.server_id.assign(data.begin(), data.end());
        break;
      case kIaNa:
        if (len < 12)
          return common::fail(std::errc::bad_message, "DHCPv6 IA_NA shorter than 12 bytes");
        m.has_ia_na = true;
        m.iaid = get32(data.data());
        for (std::size_t j = 12; j + 4 <= len;) {  // IA_NA options: look for an IAADDR
          const std::uint16_t c = get16(&data[j]);
          const std::uint16_t l = get16(&data[j + 2]);
          if (j + 4 + l > len) break;
          if (c == kIaAddr && l >= 24) {
            Ipv6Bytes a{};
            std::copy_n(data.begin() + static_cast<long>(j + 4), 16, a.begin());
            m.ia_address = a;
          }
          j += 4 + l;
        }
        break;
      case kStatusCode:
        if (len >= 2) m.status = get16(data.data());
        break;
      case kRapidCommit:
        m.rapid_commit = true;
        break;
      case kDomainList:
        m.search_domains = decode_names(data);
        break;
      default:
        break;
    }
    i += len;
  }
  return m;
}

std::vector<std::uint8_t> dhcp6_server_duid(const Mac& mac) {
  std::vector<std::uint8_t> d;
  d.reserve(4 + mac.size());
  put16(d, 3);  // DUID-LL
  put16(d, 1);  // hardware type 1 (Ethernet)
  for (std::uint8_t b : mac) d.push_back(b);
  return d;
}

std::optional<std::vector<std::uint8_t>> dhcp6_answer(const Dhcp6Message& req,
                                                      const Mac& server_mac,
                                                      const Dhcp6Lease& lease) {
  const auto duid = dhcp6_server_duid(server_mac);
  const auto type = static_cast<Dhcp6Type>(req.type);
  const bool ours = req.server_id == duid;
  Dhcp6Type reply = Dhcp6Type::Reply;
  bool address = true;  // put the IA_NA with our address in
  bool rapid = false;
  switch (type) {
    case Dhcp6Type::Solicit:
      if (!req.server_id.empty() || req.client_id.empty()) return std::nullopt;
      rapid = req.rapid_commit;
      reply = rapid ? Dhcp6Type::Reply : Dhcp6Type::Advertise;
      break;
    case Dhcp6Type::Request:
    case Dhcp6Type::Renew:
      if (!ours || req.client_id.empty()) return std::nullopt;
      break;
    case Dhcp6Type::Rebind:
    case Dhcp6Type::Confirm:
      if (!req.server_id.empty() || req.client_id.empty()) return std::nullopt;
      break;
    case Dhcp6Type::InformationRequest:
      if (!req.server_id.empty() && !ours) return std::nullopt;
      address = false;
      break;
    case Dhcp6Type::Release:
    case Dhcp6Type::Decline:
      if (!ours) return std::nullopt;
      address = false;
      break;
    default:
      return std::nullopt;
  }
  std::vector<std::uint8_t> out;
  out.push_back(static_cast<std::uint8_t>(reply));
  out.push_back(static_cast<std::uint8_t>(req.xid >> 16));
  out.push_back(static_cast<std::uint8_t>(req.xid >> 8));
  out.push_back(static_cast<std::uint8_t>(req.xid));
  if (!req.client_id.empty()) put_opt(out, kClientId, req.client_id);
  put_opt(out, kServerId, duid);
  if (address && type != Dhcp6Type::Confirm && req.has_ia_na) {
    std::vector<std::uint8_t> ia;
    put32(ia, req.iaid);
    put32(ia, lease.preferred_seconds / 2);                                // T1
    put32(ia, static_cast<std::uint32_t>(lease.preferred_seconds * 0.8));  // T2
    std::vector<std::uint8_t> addr(lease.address.begin(), lease.address.end());
    put32(addr, lease.preferred_seconds);
    put32(addr, lease.valid_seconds);
    put_opt(ia, kIaAddr, addr);
    put_opt(out, kIaNa, ia);
  }
  if (type == Dhcp6Type::Confirm || type == Dhcp6Type::Release || type == Dhcp6Type::Decline)
    put_opt(out, kStatusCode, std::vector<std::uint8_t>(2, 0));  // Success
  if (rapid) put_opt(out, kRapidCommit, std::vector<std::uint8_t>());
  if (!lease.search_domains.empty())
    put_opt(out, kDomainList, encode_search_list(lease.search_domains));
  return out;
}

}  // namespace chl::network

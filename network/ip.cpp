#include "network/ip.hpp"

#include <arpa/inet.h>

#include <charconv>

namespace chl::network {

std::optional<Ipv4> parse_ipv4(std::string_view text) {
  std::string s(text);
  in_addr a{};
  if (inet_pton(AF_INET, s.c_str(), &a) != 1) return std::nullopt;
  return Ipv4{ntohl(a.s_addr)};
}

std::optional<Ipv4Cidr> parse_ipv4_cidr(std::string_view text) {
  const auto slash = text.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  auto ip = parse_ipv4(text.substr(0, slash));
  if (!ip) return std::nullopt;
  const std::string_view p = text.substr(slash + 1);
  int prefix = -1;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), prefix);
  if (ec != std::errc() || end != p.data() + p.size() || p.empty() || prefix < 0 || prefix > 32)
    return std::nullopt;
  return Ipv4Cidr{*ip, prefix};
}

std::string format_ipv4(Ipv4 ip) {
  in_addr a{};
  a.s_addr = htonl(ip.value);
  char buf[INET_ADDRSTRLEN];
  if (inet_ntop(AF_INET, &a, buf, sizeof buf) == nullptr) return "?";
  return buf;
}

std::string format_ipv4_cidr(const Ipv4Cidr& c) {
  return format_ipv4(c.address) + "/" + std::to_string(c.prefix);
}

Ipv4 netmask(int prefix) {
  if (prefix <= 0) return Ipv4{0};
  if (prefix >= 32) return Ipv4{0xffffffffU};
  return Ipv4{~((1U << (32 - prefix)) - 1U)};
}

Ipv4 network_of(const Ipv4Cidr& c) { return Ipv4{c.address.value & netmask(c.prefix).value}; }

}  // namespace chl::network

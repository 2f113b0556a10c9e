#pragma once
// IPv4 values as host-order integers (what DHCP and the plan compute with), parsed and
// formatted through inet_pton/inet_ntop; IPv6 stays text (it is only handed to netlink/nft).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace chl::network {

struct Ipv4 {
  std::uint32_t value = 0;  // host order: 10.0.2.1 = 0x0a000201
  friend bool operator==(Ipv4, Ipv4) = default;
};

struct Ipv4Cidr {
  Ipv4 address;
  int prefix = 32;
  friend bool operator==(const Ipv4Cidr&, const Ipv4Cidr&) = default;
};

std::optional<Ipv4> parse_ipv4(std::string_view text);
// "10.0.2.0/24"; nullopt if malformed or prefix > 32.
std::optional<Ipv4Cidr> parse_ipv4_cidr(std::string_view text);
std::string format_ipv4(Ipv4 ip);
std::string format_ipv4_cidr(const Ipv4Cidr& c);
Ipv4 netmask(int prefix);
Ipv4 network_of(const Ipv4Cidr& c);

}  // namespace chl::network

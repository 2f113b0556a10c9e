#pragma once
// DHCPv4 messages (RFC 2131/2132), pure: decode a client's packet, decide the answer for our one
// client, encode it. No sockets here (dhcp_server.hpp owns those).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "network/ip.hpp"
#include "network/mac.hpp"
#include "network/plan.hpp"

namespace chl::network {

enum class DhcpType : std::uint8_t {
  Discover = 1, Offer = 2, Request = 3, Decline = 4, Ack = 5, Nak = 6, Release = 7, Inform = 8,
};

struct DhcpMessage {
  std::uint8_t op = 1;  // 1 request, 2 reply
  std::uint32_t xid = 0;
  std::uint16_t secs = 0;
  std::uint16_t flags = 0;
  Ipv4 ciaddr, yiaddr, siaddr, giaddr;
  Mac chaddr{};
  std::optional<DhcpType> type;            // option 53
  std::optional<Ipv4> requested_ip;        // option 50
  std::optional<Ipv4> server_id;           // option 54
  std::vector<std::uint8_t> parameter_list;  // option 55
  // Reply options, in order of encoding (decoded replies fill them too).
  std::optional<Ipv4> subnet_mask;         // 1
  std::optional<Ipv4> router;              // 3
  std::vector<Ipv4> dns_servers;           // 6
  std::string hostname;                    // 12
  std::string domain_name;                 // 15
  std::optional<std::uint16_t> mtu;        // 26
  std::optional<std::uint32_t> lease_seconds;  // 51
  std::vector<std::string> search_domains;     // 119
  std::vector<Route4> classless_routes;        // 121
  std::string message;                         // 56 (with NAK)
};

// Parse a BOOTP/DHCP packet; fails on a short packet, a bad magic cookie or a truncated option.
common::Result<DhcpMessage> decode_dhcp(std::span<const std::uint8_t> packet);
std::vector<std::uint8_t> encode_dhcp(const DhcpMessage& m);

// The server's answer to `request` for a client with `mac` owning `lease`; nullopt = stay
// silent (another MAC's DISCOVER, RELEASE, DECLINE, a REQUEST for another server).
// DISCOVER -> OFFER; REQUEST for the lease's address -> ACK, for another address (or from
// another MAC) -> NAK; INFORM -> ACK without an address.
std::optional<DhcpMessage> dhcp_answer(const DhcpMessage& request, const Mac& mac,
                                       const Lease& lease);

// RFC 3442 option 121 value and RFC 1035 (uncompressed) option 119 value, exposed for tests.
std::vector<std::uint8_t> encode_classless_routes(const std::vector<Route4>& routes);
std::vector<std::uint8_t> encode_search_list(const std::vector<std::string>& domains);

}  // namespace chl::network

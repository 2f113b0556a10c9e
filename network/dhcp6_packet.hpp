#pragma once
// DHCPv6 (RFC 8415) for the masquerade guest's IPv6 address, pure: decode a client's message and
// encode the server's answer. One client, one address (fd10:0:2::2, KubeVirt's), handed out in an
// IA_NA; the server's DUID is a DUID-LL of the bridge's MAC. No sockets here (dhcp6_server.hpp).
//   SOLICIT              -> ADVERTISE (REPLY when the client asked for rapid commit)
//   REQUEST/RENEW        -> REPLY with the address (only when they name our server id)
//   REBIND/CONFIRM       -> REPLY with the address
//   INFORMATION-REQUEST  -> REPLY with the search domains only
//   RELEASE/DECLINE      -> REPLY with status Success (ours only)
//   anything else, or a message naming another server -> silence
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "network/mac.hpp"

namespace chl::network {

using Ipv6Bytes = std::array<std::uint8_t, 16>;

enum class Dhcp6Type : std::uint8_t {
  Solicit = 1,
  Advertise = 2,
  Request = 3,
  Confirm = 4,
  Renew = 5,
  Rebind = 6,
  Reply = 7,
  Release = 8,
  Decline = 9,
  InformationRequest = 11,
};

struct Dhcp6Lease {
  Ipv6Bytes address{};  // fd10:0:2::2
  std::uint32_t preferred_seconds = 86400 * 365;
  std::uint32_t valid_seconds = 86400 * 365;
  std::vector<std::string> search_domains;  // option 24
};

struct Dhcp6Message {
  std::uint8_t type = 0;
  std::uint32_t xid = 0;                // 24 bits
  std::vector<std::uint8_t> client_id;  // option 1 (the DUID)
  std::vector<std::uint8_t> server_id;  // option 2
  bool has_ia_na = false;               // option 3
  std::uint32_t iaid = 0;
  std::optional<Ipv6Bytes> ia_address;      // option 5 inside the IA_NA
  bool rapid_commit = false;                // option 14
  std::vector<std::string> search_domains;  // option 24 (decoded replies)
  std::optional<std::uint16_t> status;      // option 13 (decoded replies)
};

common::Result<Dhcp6Message> decode_dhcp6(std::span<const std::uint8_t> packet);
// The server's DUID: DUID-LL (type 3, hardware type 1) of `mac`.
std::vector<std::uint8_t> dhcp6_server_duid(const Mac& mac);
// The encoded answer to `request`, or nullopt to stay silent.
std::optional<std::vector<std::uint8_t>> dhcp6_answer(const Dhcp6Message& request,
                                                      const Mac& server_mac,
                                                      const Dhcp6Lease& lease);
// "fd10:0:2::2" -> bytes; nullopt if malformed.
std::optional<Ipv6Bytes> parse_ipv6(const std::string& text);

}  // namespace chl::network

// network/dhcp6_packet and router_advert: the DHCPv6 answers for the masquerade guest's IPv6
// address and the router advertisement, on bytes.
#include <doctest/doctest.h>

#include "network/dhcp6_packet.hpp"
#include "network/router_advert.hpp"

using namespace chl::network;

namespace {

const Mac kBridge{0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee};
const std::vector<std::uint8_t> kClientDuid{0,    1, 0,    1,    0x2a, 0x2b, 0x2c,
                                            0x2d, 2, 0x11, 0x22, 0x33, 0x44, 0x55};

Dhcp6Lease lease() {
  Dhcp6Lease l;
  l.address = *parse_ipv6("fd10:0:2::2");
  l.search_domains = {"ns1.svc.cluster.local", "cluster.local"};
  return l;
}

void opt(std::vector<std::uint8_t>& v, std::uint16_t code, const std::vector<std::uint8_t>& data) {
  v.push_back(static_cast<std::uint8_t>(code >> 8));
  v.push_back(static_cast<std::uint8_t>(code));
  v.push_back(static_cast<std::uint8_t>(data.size() >> 8));
  v.push_back(static_cast<std::uint8_t>(data.size()));
  v.insert(v.end(), data.begin(), data.end());
}

// A client message as dhclient -6 sends it: client id, IA_NA (IAID 0x01020304, no address),
// elapsed time, option request (23, 24); optionally a server id and rapid commit.
std::vector<std::uint8_t> client(Dhcp6Type t, const std::vector<std::uint8_t>& server_id = {},
                                 bool rapid = false, bool ia_na = true) {
  std::vector<std::uint8_t> m{static_cast<std::uint8_t>(t), 0x12, 0x34, 0x56};
  opt(m, 1, kClientDuid);
  if (!server_id.empty()) opt(m, 2, server_id);
  if (ia_na) opt(m, 3, {1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0});
  opt(m, 8, {0, 0});
  opt(m, 6, {0, 23, 0, 24});
  if (rapid) opt(m, 14, {});
  return m;
}

Dhcp6Message answer_to(const std::vector<std::uint8_t>& request) {
  auto req = decode_dhcp6(request);
  REQUIRE(req);
  auto out = dhcp6_answer(*req, kBridge, lease());
  REQUIRE(out);
  auto decoded = decode_dhcp6(*out);
  REQUIRE(decoded);
  return *decoded;
}

}  // namespace

TEST_CASE(
    "dhcpv6: SOLICIT gets an ADVERTISE of fd10:0:2::2 in the client's IA_NA, from our DUID-LL") {
  auto req = decode_dhcp6(client(Dhcp6Type::Solicit));
  REQUIRE(req);
  CHECK(req->type == 1);
  CHECK(req->xid == 0x123456);
  CHECK(req->client_id == kClientDuid);
  CHECK(req->has_ia_na);
  CHECK(req->iaid == 0x01020304);
  const Dhcp6Message a = answer_to(client(Dhcp6Type::Solicit));
  CHECK(a.type == static_cast<std::uint8_t>(Dhcp6Type::Advertise));
  CHECK(a.xid == 0x123456);
  CHECK(a.client_id == kClientDuid);
  CHECK(a.server_id == std::vector<std::uint8_t>{0, 3, 0, 1, 0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee});
  CHECK(a.has_ia_na);
  CHECK(a.iaid == 0x01020304);
  REQUIRE(a.ia_address);
  CHECK(*a.ia_address == *parse_ipv6("fd10:0:2::2"));
  CHECK(a.search_domains == std::vector<std::string>{"ns1.svc.cluster.local", "cluster.local"});
  CHECK_FALSE(a.rapid_commit);
}

TEST_CASE("dhcpv6: rapid commit, REQUEST/RENEW for us only, REBIND, INFORMATION-REQUEST, RELEASE") {
  const auto duid = dhcp6_server_duid(kBridge);
  const Dhcp6Message rapid = answer_to(client(Dhcp6Type::Solicit, {}, true));
  CHECK(rapid.type == static_cast<std::uint8_t>(Dhcp6Type::Reply));
  CHECK(rapid.rapid_commit);
  CHECK(rapid.ia_address.has_value());

  for (auto t : {Dhcp6Type::Request, Dhcp6Type::Renew}) {
    const Dhcp6Message r = answer_to(client(t, duid));
    CHECK(r.type == static_cast<std::uint8_t>(Dhcp6Type::Reply));
    REQUIRE(r.ia_address);
    CHECK(*r.ia_address == *parse_ipv6("fd10:0:2::2"));
    // Naming another server, or none: not ours to answer.
    std::vector<std::uint8_t> other = duid;
    other.back() ^= 1;
    CHECK_FALSE(dhcp6_answer(*decode_dhcp6(client(t, other)), kBridge, lease()));
    CHECK_FALSE(dhcp6_answer(*decode_dhcp6(client(t)), kBridge, lease()));
  }
  CHECK(answer_to(client(Dhcp6Type::Rebind)).ia_address.has_value());
  // A SOLICIT naming a server is malformed (RFC 8415 16.2): silence.
  CHECK_FALSE(dhcp6_answer(*decode_dhcp6(client(Dhcp6Type::Solicit, duid)), kBridge, lease()));

  const Dhcp6Message info = answer_to(client(Dhcp6Type::InformationRequest, {}, false, false));
  CHECK(info.type == static_cast<std::uint8_t>(Dhcp6Type::Reply));
  CHECK_FALSE(info.has_ia_na);
  CHECK(info.search_domains.size() == 2);

  const Dhcp6Message rel = answer_to(client(Dhcp6Type::Release, duid));
  CHECK(rel.type == static_cast<std::uint8_t>(Dhcp6Type::Reply));
  CHECK(rel.status == std::optional<std::uint16_t>(0));
  CHECK_FALSE(rel.ia_address);
  // Server-to-client types are never answered.
  CHECK_FALSE(dhcp6_answer(*decode_dhcp6(client(Dhcp6Type::Advertise)), kBridge, lease()));
}

TEST_CASE("dhcpv6: malformed messages are refused with the reason") {
  CHECK_FALSE(decode_dhcp6(std::vector<std::uint8_t>{1, 2}));
  auto m = client(Dhcp6Type::Solicit);
  m.resize(m.size() - 1);  // the last option is cut short
  auto r = decode_dhcp6(m);
  REQUIRE_FALSE(r);
  CHECK(r.error().message().find("truncated") != std::string::npos);
  std::vector<std::uint8_t> short_ia{1, 0, 0, 1};
  opt(short_ia, 3, {1, 2, 3});
  CHECK_FALSE(decode_dhcp6(short_ia));
}

TEST_CASE("router advertisement: M and O flags, hop limit 64, lifetime, MTU option") {
  RouterAdvertConfig c;
  c.mtu = 1400;
  const auto ra = encode_router_advert(c);
  const std::vector<std::uint8_t> want{134, 0, 0, 0, 64, 0xc0, 0x07, 0x08, 0, 0, 0,    0,
                                       0,   0, 0, 0, 5,  1,    0,    0,    0, 0, 0x05, 0x78};
  CHECK(ra == want);
  c.mtu = 0;
  c.managed = false;
  c.other = false;
  CHECK(encode_router_advert(c).size() == 16);
  CHECK(encode_router_advert(c)[5] == 0);
}

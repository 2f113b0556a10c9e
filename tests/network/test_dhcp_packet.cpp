// network/dhcp_packet: DHCPv4 encode/decode and the one-client server's answers, on packets.
#include <doctest/doctest.h>

#include "network/dhcp_packet.hpp"

using namespace chl::network;

namespace {

const Mac kGuest{0x02, 0x11, 0x22, 0x33, 0x44, 0x55};

Lease masquerade_lease() {
  Lease l;
  l.address = *parse_ipv4_cidr("10.0.2.2/24");
  l.router = parse_ipv4("10.0.2.1");
  l.server_id = *parse_ipv4("10.0.2.1");
  l.dns_servers = {*parse_ipv4("10.96.0.10"), *parse_ipv4("10.96.0.11")};
  l.search_domains = {"default.svc.cluster.local", "cluster.local"};
  l.mtu = 1450;
  l.hostname = "vm1";
  return l;
}

DhcpMessage client(DhcpType t, const Mac& mac = kGuest) {
  DhcpMessage m;
  m.op = 1;
  m.xid = 0xdeadbeef;
  m.chaddr = mac;
  m.type = t;
  m.parameter_list = {1, 3, 6, 15, 26, 121};
  return m;
}

// A DISCOVER as busybox udhcpc 1.35 sends it (captured layout, built by hand): fixed header,
// cookie, options 53, 61 (client id), 57 (max size), 55, end.
std::vector<std::uint8_t> udhcpc_discover() {
  std::vector<std::uint8_t> p(236, 0);
  p[0] = 1; p[1] = 1; p[2] = 6;
  p[4] = 0x12; p[5] = 0x34; p[6] = 0x56; p[7] = 0x78;
  for (int i = 0; i < 6; ++i) p[28 + i] = kGuest[static_cast<std::size_t>(i)];
  const std::uint8_t tail[] = {0x63, 0x82, 0x53, 0x63, 53, 1, 1, 61, 7, 1, 0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
                               57, 2, 0x02, 0x40, 55, 7, 1, 3, 6, 12, 15, 28, 42, 255};
  p.insert(p.end(), std::begin(tail), std::end(tail));
  return p;
}

}  // namespace

TEST_CASE("dhcp: a udhcpc DISCOVER decodes, and the OFFER carries the lease with options 1 3 6 15 26 51 54 121") {
  auto d = decode_dhcp(udhcpc_discover());
  REQUIRE(d);
  CHECK(d->xid == 0x12345678);
  CHECK(d->chaddr == kGuest);
  REQUIRE(d->type);
  CHECK(*d->type == DhcpType::Discover);
  CHECK(d->parameter_list.size() == 7);

  auto offer = dhcp_answer(*d, kGuest, masquerade_lease());
  REQUIRE(offer);
  auto bytes = encode_dhcp(*offer);
  CHECK(bytes.size() >= 300);
  auto back = decode_dhcp(bytes);
  REQUIRE(back);
  CHECK(back->op == 2);
  CHECK(back->xid == 0x12345678);
  CHECK(*back->type == DhcpType::Offer);
  CHECK(format_ipv4(back->yiaddr) == "10.0.2.2");
  CHECK(format_ipv4(*back->subnet_mask) == "255.255.255.0");
  CHECK(format_ipv4(*back->router) == "10.0.2.1");
  CHECK(format_ipv4(*back->server_id) == "10.0.2.1");
  REQUIRE(back->dns_servers.size() == 2);
  CHECK(format_ipv4(back->dns_servers[1]) == "10.96.0.11");
  CHECK(back->domain_name == "default.svc.cluster.local");
  CHECK(back->search_domains == std::vector<std::string>{"default.svc.cluster.local", "cluster.local"});
  CHECK(*back->mtu == 1450);
  CHECK(*back->lease_seconds == 86400 * 365);
  CHECK(back->hostname == "vm1");
  // Option 121 repeats the default route (a client using 121 ignores option 3, RFC 3442).
  REQUIRE(back->classless_routes.size() == 1);
  CHECK(back->classless_routes[0].destination.prefix == 0);
  CHECK(format_ipv4(*back->classless_routes[0].gateway) == "10.0.2.1");
}

TEST_CASE("dhcp: REQUEST for the lease gets ACK, for another address or from another MAC gets NAK") {
  auto lease = masquerade_lease();
  auto req = client(DhcpType::Request);
  req.requested_ip = parse_ipv4("10.0.2.2");
  req.server_id = parse_ipv4("10.0.2.1");
  auto ack = dhcp_answer(req, kGuest, lease);
  REQUIRE(ack);
  CHECK(*ack->type == DhcpType::Ack);
  CHECK(format_ipv4(ack->yiaddr) == "10.0.2.2");

  req.requested_ip = parse_ipv4("10.0.2.9");
  auto nak = dhcp_answer(req, kGuest, lease);
  REQUIRE(nak);
  CHECK(*nak->type == DhcpType::Nak);
  CHECK(nak->yiaddr.value == 0);

  auto other = client(DhcpType::Request, Mac{0x02, 0, 0, 0, 0, 9});
  other.requested_ip = parse_ipv4("10.0.2.2");
  auto nak2 = dhcp_answer(other, kGuest, lease);
  REQUIRE(nak2);
  CHECK(*nak2->type == DhcpType::Nak);

  // A renewal (no server id, no option 50, ciaddr set) is ACKed.
  auto renew = client(DhcpType::Request);
  renew.ciaddr = *parse_ipv4("10.0.2.2");
  auto ack2 = dhcp_answer(renew, kGuest, lease);
  REQUIRE(ack2);
  CHECK(*ack2->type == DhcpType::Ack);

  // A REQUEST that chose another server: silence.
  req.requested_ip = parse_ipv4("10.0.2.2");
  req.server_id = parse_ipv4("10.0.2.254");
  CHECK_FALSE(dhcp_answer(req, kGuest, lease).has_value());
}

TEST_CASE("dhcp: another MAC's DISCOVER, RELEASE and DECLINE get no answer, INFORM gets options only") {
  auto lease = masquerade_lease();
  CHECK_FALSE(dhcp_answer(client(DhcpType::Discover, Mac{0x02, 0, 0, 0, 0, 9}), kGuest, lease).has_value());
  CHECK_FALSE(dhcp_answer(client(DhcpType::Release), kGuest, lease).has_value());
  CHECK_FALSE(dhcp_answer(client(DhcpType::Decline), kGuest, lease).has_value());
  auto inform = dhcp_answer(client(DhcpType::Inform), kGuest, lease);
  REQUIRE(inform);
  CHECK(*inform->type == DhcpType::Ack);
  CHECK(inform->yiaddr.value == 0);
  CHECK_FALSE(inform->lease_seconds.has_value());
}

TEST_CASE("dhcp: option 121 and 119 encodings match RFC 3442 and RFC 1035 examples") {
  std::vector<Route4> routes{
      Route4{*parse_ipv4_cidr("0.0.0.0/0"), parse_ipv4("10.0.2.1")},
      Route4{*parse_ipv4_cidr("10.96.0.0/12"), parse_ipv4("10.0.2.1")},
      Route4{*parse_ipv4_cidr("192.168.5.0/24"), std::nullopt}};
  const std::vector<std::uint8_t> want{0, 10, 0, 2, 1,          12, 10, 96, 10, 0, 2, 1,
                                       24, 192, 168, 5, 0, 0, 0, 0};
  CHECK(encode_classless_routes(routes) == want);
  const std::vector<std::uint8_t> search{3, 'f', 'o', 'o', 5, 'l', 'o', 'c', 'a', 'l', 0, 3, 'b', 'a', 'r', 0};
  CHECK(encode_search_list({"foo.local", "bar"}) == search);
}

TEST_CASE("dhcp: malformed packets are refused with a reason") {
  auto p = udhcpc_discover();
  CHECK_FALSE(decode_dhcp(std::span<const std::uint8_t>(p.data(), 100)));
  auto bad_cookie = p;
  bad_cookie[236] = 0;
  auto r = decode_dhcp(bad_cookie);
  REQUIRE_FALSE(r);
  CHECK(r.error().message().find("magic cookie") != std::string::npos);
  auto truncated = p;
  truncated.resize(236 + 4 + 3);
  truncated[241] = 10;  // option 53 claims 10 bytes, 1 follows
  auto t = decode_dhcp(truncated);
  REQUIRE_FALSE(t);
  CHECK(t.error().message().find("runs past the packet") != std::string::npos);
  // A long option is split in two (RFC 3396) and read back whole.
  DhcpMessage m = client(DhcpType::Offer);
  m.op = 2;
  for (int i = 0; i < 70; ++i) m.dns_servers.push_back(Ipv4{0x0a000000U + static_cast<std::uint32_t>(i)});
  auto back = decode_dhcp(encode_dhcp(m));
  REQUIRE(back);
  CHECK(back->dns_servers.size() == 70);
}

// network/nft_ruleset: the masquerade table's text (what libnftables is given).
#include <doctest/doctest.h>

#include "network/nft_ruleset.hpp"

using namespace chl::network;

namespace {
NetworkPlan masq() {
  NetworkPlan p;
  p.binding = PlanBinding::Masquerade;
  p.pod_iface = "eth0";
  p.bridge = "k6t-eth0";
  p.gateway4 = *parse_ipv4_cidr("10.0.2.1/24");
  p.guest4 = *parse_ipv4("10.0.2.2");
  return p;
}
bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }
}  // namespace

TEST_CASE("nft: the table is replaced atomically and SNATs the guest, DNATs listed ports only") {
  auto p = masq();
  p.ports = {{"tcp", 8080}, {"udp", 53}};
  const std::string t = masquerade_ruleset({p});
  INFO(t);
  // add + delete first: rerunning never duplicates, and an absent table is not an error.
  CHECK(t.rfind("add table inet ch_launcher\ndelete table inet ch_launcher\ntable inet ch_launcher {", 0) == 0);
  CHECK(has(t, "type nat hook prerouting priority -100;"));
  CHECK(has(t, "type nat hook postrouting priority 100;"));
  CHECK(has(t, "iifname \"eth0\" jump inbound_eth0"));
  CHECK(has(t, "ip saddr 10.0.2.2 counter masquerade"));
  CHECK(has(t, "tcp dport 8080 counter dnat ip to 10.0.2.2"));
  CHECK(has(t, "udp dport 53 counter dnat ip to 10.0.2.2"));
  CHECK_FALSE(has(t, "\n    counter dnat ip to"));  // no catch-all DNAT
  CHECK(has(t, "ip saddr 127.0.0.1 counter snat ip to 10.0.2.1"));
  CHECK_FALSE(has(t, "ip6"));
}

TEST_CASE("nft: no ports means every port but KubeVirt's reserved ones, IPv6 when the pod has it") {
  auto p = masq();
  p.gateway6 = "fd10:0:2::1/120";
  p.guest6 = "fd10:0:2::2";
  const std::string t = masquerade_ruleset({p});
  INFO(t);
  CHECK(has(t, "tcp dport { 49152, 49153 } return\n    counter dnat ip to 10.0.2.2\n    counter dnat ip6 to fd10:0:2::2"));
  CHECK(has(t, "ip6 saddr fd10:0:2::2 counter masquerade"));
  CHECK(has(t, "ip6 saddr ::1 counter snat ip6 to fd10:0:2::1\n"));
}

TEST_CASE("nft: without a masquerade interface the table is only deleted") {
  NetworkPlan b = masq();
  b.binding = PlanBinding::Bridge;
  CHECK(masquerade_ruleset({b}) == delete_ruleset());
  CHECK(masquerade_ruleset({}) == "add table inet ch_launcher\ndelete table inet ch_launcher\n");
}

// network/kubevirt_cache: virt-handler's caches, as Go's encoding/json writes KubeVirt's types
// (json.MarshalIndent of cache.DHCPConfig and cache.PodIfaceCacheData). The documents below
// follow Go's rules field by field: netlink.Addr's embedded *net.IPNet promotes "IP" (text) and
// "Mask" ([]byte: base64); net.HardwareAddr and net.IPMask are []byte (base64); a nil net.IP
// marshals as ""; a nil *net.IPNet as null (or, embedded, no keys at all).
#include <doctest/doctest.h>

#include <fstream>

#include "network/kubevirt_cache.hpp"
#include "network/phase2.hpp"
#include "tests/support/test_support.hpp"

using namespace chl::network;

namespace {

// Bridge binding: what virt-handler's phase 1 writes for a pod with 10.244.0.5/24, gateway
// 10.244.0.1, a default route and a cluster route (vishvananda/netlink Route fields trimmed to
// those the Go type has; all are present as Go writes them).
const char* kBridgeDoc = R"({
  "Name": "eth0",
  "IP": {
    "IP": "10.244.0.5",
    "Mask": "////AA==",
    "Label": "eth0",
    "Flags": 128,
    "Scope": 0,
    "Peer": null,
    "Broadcast": "10.244.0.255",
    "PreferedLft": 0,
    "ValidLft": 0,
    "LinkIndex": 0
  },
  "IPv6": {
    "IP": "fd00:10:244::5",
    "Mask": "//////////8AAAAAAAAAAA==",
    "Label": "",
    "Flags": 128,
    "Scope": 0,
    "Peer": null,
    "Broadcast": "",
    "PreferedLft": 0,
    "ValidLft": 0,
    "LinkIndex": 0
  },
  "MAC": "AgAAqrvM",
  "AdvertisingIPAddr": "",
  "AdvertisingIPv6Addr": "",
  "Routes": [
    {
      "LinkIndex": 2, "ILinkIndex": 0, "Scope": 0, "Dst": null, "Src": "", "Gw": "10.244.0.1",
      "MultiPath": null, "Protocol": 4, "Priority": 0, "Family": 2, "Table": 254, "Type": 1,
      "Tos": 0, "Flags": 0, "MPLSDst": null, "NewDst": null, "Encap": null, "Via": null,
      "Realm": 0, "MTU": 0, "Window": 0, "Rtt": 0, "RttVar": 0, "Ssthresh": 0, "Cwnd": 0,
      "AdvMSS": 0, "Reordering": 0, "Hoplimit": 0, "InitCwnd": 0, "Features": 0, "RtoMin": 0,
      "InitRwnd": 0, "QuickACK": 0, "Congctl": "", "FastOpenNoCookie": 0
    },
    {
      "LinkIndex": 2, "ILinkIndex": 0, "Scope": 253,
      "Dst": { "IP": "10.244.0.0", "Mask": "////AA==" },
      "Src": "10.244.0.5", "Gw": "", "MultiPath": null, "Protocol": 2, "Priority": 0,
      "Family": 2, "Table": 254, "Type": 1, "Tos": 0, "Flags": 0, "MPLSDst": null,
      "NewDst": null, "Encap": null, "Via": null
    },
    {
      "LinkIndex": 2, "ILinkIndex": 0, "Scope": 0,
      "Dst": { "IP": "fd00:10:244::", "Mask": "//////////8AAAAAAAAAAA==" },
      "Src": "", "Gw": "", "MultiPath": null, "Protocol": 2, "Priority": 256, "Family": 10,
      "Table": 254, "Type": 1
    }
  ],
  "Mtu": 1450,
  "IPAMDisabled": false,
  "Gateway": "10.244.0.1",
  "Subdomain": ""
})";

}  // namespace

TEST_CASE("kubevirt cache: a bridge binding's DHCPConfig as virt-handler marshals it") {
  auto c = parse_kubevirt_dhcp_config(kBridgeDoc);
  REQUIRE_MESSAGE(c, (c ? "" : c.error().message()));
  CHECK(c->name == "eth0");
  REQUIRE(c->ip);
  CHECK(format_ipv4_cidr(*c->ip) == "10.244.0.5/24");
  CHECK(c->ipv6 == "fd00:10:244::5/64");
  REQUIRE(c->mac);
  CHECK(format_mac(*c->mac) == "02:00:00:aa:bb:cc");
  CHECK_FALSE(c->advertising_ip);
  CHECK(c->advertising_ipv6.empty());
  REQUIRE(c->routes.size() == 2);  // the IPv6 route is not DHCPv4's
  CHECK(format_ipv4_cidr(c->routes[0].destination) == "0.0.0.0/0");
  REQUIRE(c->routes[0].gateway);
  CHECK(format_ipv4(*c->routes[0].gateway) == "10.244.0.1");
  CHECK(format_ipv4_cidr(c->routes[1].destination) == "10.244.0.0/24");
  CHECK_FALSE(c->routes[1].gateway);
  CHECK(c->mtu == 1450);
  CHECK_FALSE(c->ipam_disabled);
  REQUIRE(c->gateway);
  CHECK(format_ipv4(*c->gateway) == "10.244.0.1");
}

TEST_CASE("kubevirt cache: nil fields as Go writes them (no IPAM, IPv4 only, 16-byte IPv4 mask)") {
  // A nil embedded *net.IPNet leaves no IP/Mask keys; nil MAC and Routes are null.
  auto c = parse_kubevirt_dhcp_config(R"({"Name":"net1","IP":{"Label":"","Flags":0,"Scope":0,"Peer":null,
    "Broadcast":"","PreferedLft":0,"ValidLft":0,"LinkIndex":0},"IPv6":{"Label":"","Flags":0,"Scope":0,
    "Peer":null,"Broadcast":"","PreferedLft":0,"ValidLft":0,"LinkIndex":0},"MAC":null,"AdvertisingIPAddr":"",
    "AdvertisingIPv6Addr":"","Routes":null,"Mtu":1500,"IPAMDisabled":true,"Gateway":"","Subdomain":""})");
  REQUIRE_MESSAGE(c, (c ? "" : c.error().message()));
  CHECK_FALSE(c->ip);
  CHECK(c->ipv6.empty());
  CHECK_FALSE(c->mac);
  CHECK(c->routes.empty());
  CHECK(c->ipam_disabled);
  CHECK_FALSE(c->gateway);

  auto m = parse_kubevirt_dhcp_config(R"({"IP":{"IP":"10.0.2.2","Mask":"////////////////////AA=="},
    "AdvertisingIPAddr":"10.0.2.1","Gateway":"10.0.2.1","Mtu":1500,"Subdomain":"sub"})");
  REQUIRE_MESSAGE(m, (m ? "" : m.error().message()));
  CHECK(format_ipv4_cidr(*m->ip) == "10.0.2.2/24");
  CHECK(format_ipv4(*m->advertising_ip) == "10.0.2.1");
  CHECK(m->subdomain == "sub");
}

TEST_CASE("kubevirt cache: malformed documents name the field") {
  struct Case {
    const char* doc;
    const char* says;
  };
  for (const auto& [doc, says] : {
           Case{"{", "not JSON"},
           Case{"[]", "not a JSON object"},
           Case{R"({"IP":{"IP":"10.0.2.x","Mask":"////AA=="}})", "field IP"},
           Case{R"({"IP":{"IP":"10.0.2.2","Mask":"!!"}})", "field IP: field Mask: malformed base64"},
           Case{R"({"IP":{"IP":"10.0.2.2","Mask":"/wD/AA=="}})", "not contiguous"},
           Case{R"({"MAC":"AgAA"})", "field MAC: 3 bytes"},
           Case{R"({"Mtu":70000})", "field Mtu"},
           Case{R"({"Mtu":"1500"})", "field Mtu"},
           Case{R"({"Routes":{}})", "field Routes"},
           Case{R"({"Routes":[{"Dst":null,"Gw":"nope"}]})", "field Routes[0].Gw"},
           Case{R"({"Gateway":"fd00::1"})", "field Gateway"},
           Case{R"({"IPAMDisabled":"no"})", "field IPAMDisabled"},
       }) {
    auto c = parse_kubevirt_dhcp_config(doc);
    REQUIRE_MESSAGE(!c, doc);
    CHECK_MESSAGE(c.error().message().find(says) != std::string::npos, doc, " → ", c.error().message());
    CHECK(c.error().message().rfind("DHCP cache", 0) == 0);
  }
}

TEST_CASE("kubevirt cache: the file at KubeVirt's path in the pod, missing and malformed files") {
  chl::test::TempDir dir;
  CHECK(dhcp_cache_path("/var/run/kubevirt-private", "eth0") == "/var/run/kubevirt-private/vif-cache-eth0.json");
  auto missing = read_kubevirt_dhcp_cache(dir.path().string(), "eth0");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message().find("vif-cache-eth0.json is missing") != std::string::npos);
  std::ofstream(dir / "vif-cache-eth0.json") << kBridgeDoc;
  auto ok = read_kubevirt_dhcp_cache(dir.path().string(), "eth0");
  REQUIRE_MESSAGE(ok, (ok ? "" : ok.error().message()));
  CHECK(ok->mtu == 1450);
  std::ofstream(dir / "vif-cache-net1.json") << R"({"Mtu": -1})";
  auto bad = read_kubevirt_dhcp_cache(dir.path().string(), "net1");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message().find("vif-cache-net1.json is malformed: DHCP cache: field Mtu") != std::string::npos);
}

TEST_CASE("kubevirt cache: PodIfaceCacheData with its json tags") {
  // iface is a v1.Interface (its own tags); networkState is omitempty, so 0 leaves it out.
  auto c = parse_kubevirt_pod_iface_cache(R"({
  "iface": {
    "name": "default",
    "masquerade": {},
    "macAddress": "02:00:00:aa:bb:cc"
  },
  "podIP": "10.244.0.5",
  "podIPs": [
    "10.244.0.5",
    "fd00:10:244::5"
  ],
  "networkState": 2
})");
  REQUIRE_MESSAGE(c, (c ? "" : c.error().message()));
  CHECK(c->iface_name == "default");
  CHECK(c->pod_ip == "10.244.0.5");
  CHECK(c->pod_ips == std::vector<std::string>{"10.244.0.5", "fd00:10:244::5"});
  CHECK(c->state == PodIfaceState::Finished);
  auto empty = parse_kubevirt_pod_iface_cache("{}");
  REQUIRE(empty);
  CHECK(empty->state == PodIfaceState::Pending);
  CHECK_FALSE(parse_kubevirt_pod_iface_cache(R"({"networkState": 7})"));
  CHECK(pod_iface_cache_path("/var/run/kubevirt-private", "uid-1", "default") ==
        "/var/run/kubevirt-private/network-info-cache/uid-1/default");
}

TEST_CASE("kubevirt cache: bridge binding's lease from the cache, as KubeVirt's BridgeConfigGenerator") {
  auto cache = parse_kubevirt_dhcp_config(kBridgeDoc);
  REQUIRE(cache);
  NetworkPlan p;
  p.iface_name = "default";
  p.binding = PlanBinding::Bridge;
  p.mac_generated = true;
  p.mac = Mac{0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
  p.gateway4 = *parse_ipv4_cidr("169.254.75.10/32");
  p.lease.server_id = p.gateway4.address;
  p.lease.address = *parse_ipv4_cidr("192.168.1.9/24");  // whatever the dummy carried: the cache wins
  REQUIRE(apply_dhcp_cache(p, *cache, 1400));
  CHECK(format_ipv4_cidr(p.lease.address) == "10.244.0.5/24");
  CHECK(format_ipv4(p.guest4) == "10.244.0.5");
  REQUIRE(p.lease.router);
  CHECK(format_ipv4(*p.lease.router) == "10.244.0.1");
  CHECK(p.lease.routes.size() == 2);
  CHECK(format_ipv4(p.lease.server_id) == "169.254.75.10");  // the fake bridge IP answers
  CHECK(p.mtu == 1400);  // <pod iface>-nic's MTU, as KubeVirt
  CHECK(p.lease.mtu == 1400);
  CHECK(format_mac(p.mac) == "02:00:00:aa:bb:cc");  // the pod interface's MAC goes to the guest
  CHECK_FALSE(p.mac_generated);

  // A MAC the VMI sets stays; IPAMDisabled serves no lease; masquerade plans are left alone.
  NetworkPlan q = p;
  q.mac = Mac{0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
  q.mac_generated = false;
  auto no_ipam = *cache;
  no_ipam.ipam_disabled = true;
  REQUIRE(apply_dhcp_cache(q, no_ipam, 0));
  CHECK(format_mac(q.mac) == "02:11:22:33:44:55");
  CHECK(q.lease.address.address.value == 0);
  NetworkPlan m;
  m.binding = PlanBinding::Masquerade;
  m.lease.address = *parse_ipv4_cidr("10.0.2.2/24");
  REQUIRE(apply_dhcp_cache(m, *cache, 1400));
  CHECK(format_ipv4_cidr(m.lease.address) == "10.0.2.2/24");
}

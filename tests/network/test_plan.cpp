// network/plan: from a VMI manifest and pod facts to NetworkPlans, and the refusals.
#include <doctest/doctest.h>

#include "vmi/parser.hpp"
#include "network/plan.hpp"
#include "network/resolv_conf.hpp"

using namespace chl::network;

namespace {

chl::vmi::Vmi parse(const std::string& spec_tail) {
  const std::string text = R"(apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: vm1
  uid: 1111-2222
spec:
  domain:
    cpu: {cores: 4}
    memory: {guest: 256Mi}
)" + spec_tail;
  auto out = chl::vmi::parse_vmi(text);
  for (const auto& p : out.problems) FAIL_CHECK(chl::vmi::to_string(p));
  return out.vmi;
}

PodFacts pod_with(std::uint32_t mtu = 1450, bool ipv6 = false) {
  PodFacts f;
  PodLink eth0;
  eth0.name = "eth0";
  eth0.mtu = mtu;
  eth0.ipv4 = {*parse_ipv4_cidr("10.244.1.7/24")};
  eth0.routes4 = {Route4{*parse_ipv4_cidr("0.0.0.0/0"), parse_ipv4("10.244.1.1")}};
  if (ipv6) eth0.ipv6 = {"fd00:10:244::7/64"};
  f.links["eth0"] = eth0;
  PodLink net1;
  net1.name = "net1";
  net1.mtu = 9000;
  f.links["net1"] = net1;
  f.dns_servers = {*parse_ipv4("10.96.0.10")};
  f.search_domains = {"default.svc.cluster.local", "svc.cluster.local"};
  return f;
}

std::string refusals(const PlanResult& r) {
  std::string s;
  for (const auto& v : r.refusals) s += chl::vmi::to_string(v) + "\n";
  return s;
}

}  // namespace

TEST_CASE("plan: masquerade on the pod network gets KubeVirt's names, addresses and lease") {
  auto vmi = parse(R"(
    devices:
      interfaces:
      - name: default
        masquerade: {}
        ports:
        - {port: 80}
        - {port: 53, protocol: UDP}
  networks:
  - name: default
    pod: {}
)");
  auto r = plan_networks(vmi, pod_with(1450), 4);
  REQUIRE_MESSAGE(r.refusals.empty(), refusals(r));
  REQUIRE(r.plans.size() == 1);
  const auto& p = r.plans[0];
  CHECK(p.binding == PlanBinding::Masquerade);
  CHECK(p.pod_iface == "eth0");
  CHECK(p.bridge == "k6t-eth0");
  CHECK(p.tap == "tap0");
  CHECK(p.mtu == 1450);
  CHECK(p.queues == 1);
  CHECK(format_ipv4_cidr(p.gateway4) == "10.0.2.1/24");
  CHECK(format_ipv4(p.guest4) == "10.0.2.2");
  CHECK(p.gateway6.empty());
  REQUIRE(p.ports.size() == 2);
  CHECK(p.ports[0] == std::pair<std::string, std::uint16_t>{"tcp", 80});
  CHECK(p.ports[1] == std::pair<std::string, std::uint16_t>{"udp", 53});
  CHECK(format_ipv4_cidr(p.lease.address) == "10.0.2.2/24");
  CHECK(format_ipv4(*p.lease.router) == "10.0.2.1");
  CHECK(format_ipv4(p.lease.server_id) == "10.0.2.1");
  CHECK(p.lease.mtu == 1450);
  CHECK(p.lease.dns_servers.size() == 1);
  CHECK(p.lease.search_domains.front() == "default.svc.cluster.local");
  CHECK(p.lease.hostname == "vm1");
  // The MAC is generated, stable, locally administered and unicast.
  CHECK(p.mac_generated);
  CHECK((p.mac[0] & 0x03) == 0x02);
  CHECK(p.mac == generated_mac("1111-2222", "default"));
  CHECK(generated_mac("1111-2222", "default") != generated_mac("1111-2222", "other"));
  CHECK(generated_mac("1111-2222", "default") != generated_mac("1111-2223", "default"));
}

TEST_CASE("plan: IPv6 in the pod adds fd10:0:2::1/120, multiqueue gives one queue per vCPU") {
  auto vmi = parse(R"(
    devices:
      networkInterfaceMultiqueue: true
      interfaces:
      - name: default
        masquerade: {}
        macAddress: "02:AA:bb:cc:dd:ee"
  networks:
  - name: default
    pod: {vmNetworkCIDR: 10.11.12.0/28}
)");
  auto r = plan_networks(vmi, pod_with(1500, true), 4);
  REQUIRE_MESSAGE(r.refusals.empty(), refusals(r));
  const auto& p = r.plans.at(0);
  CHECK(p.queues == 4);
  CHECK(p.gateway6 == "fd10:0:2::1/120");
  CHECK(p.guest6 == "fd10:0:2::2");
  CHECK(format_mac(p.mac) == "02:aa:bb:cc:dd:ee");
  CHECK_FALSE(p.mac_generated);
  CHECK(format_ipv4_cidr(p.gateway4) == "10.11.12.1/28");
  CHECK(format_ipv4_cidr(p.lease.address) == "10.11.12.2/28");
}

TEST_CASE("plan: bridge binding hands the pod's address and routes to the guest, Multus gets net1") {
  auto vmi = parse(R"(
    devices:
      interfaces:
      - name: default
        bridge: {}
      - name: storage
        bridge: {}
  networks:
  - name: default
    pod: {}
  - name: storage
    multus: {networkName: storage-net}
)");
  auto r = plan_networks(vmi, pod_with(), 1);
  REQUIRE_MESSAGE(r.refusals.empty(), refusals(r));
  REQUIRE(r.plans.size() == 2);
  const auto& p = r.plans[0];
  CHECK(p.binding == PlanBinding::Bridge);
  CHECK(format_ipv4_cidr(p.lease.address) == "10.244.1.7/24");
  CHECK(format_ipv4(*p.lease.router) == "10.244.1.1");
  CHECK(p.lease.routes.size() == 1);
  CHECK(format_ipv4(p.lease.server_id) == "169.254.75.10");
  const auto& q = r.plans[1];
  CHECK(q.pod_iface == "net1");
  CHECK(q.bridge == "k6t-net1");
  CHECK(q.tap == "tap1");
  CHECK(q.mtu == 9000);
  CHECK(q.lease.address.address.value == 0);  // L2 only: no DHCP
  CHECK(p.mac != q.mac);
}

TEST_CASE("plan: what cannot be wired is refused with its field path") {
  auto vmi = parse(R"(
    devices:
      interfaces:
      - name: default
        masquerade: {}
        macAddress: "02:00:00:00:00:01"
      - name: old
        slirp: {}
      - name: fast
        sriov: {}
      - name: ghost
        bridge: {}
      - name: twin
        bridge: {}
        macAddress: "02-00-00-00-00-01"
      - name: storage
        masquerade: {}
      - name: mcast
        bridge: {}
        macAddress: "03:00:00:00:00:01"
  networks:
  - name: default
    pod: {}
  - name: old
    pod: {}
  - name: fast
    multus: {networkName: sriov-net}
  - name: twin
    multus: {networkName: twin-net}
  - name: storage
    multus: {networkName: storage-net}
  - name: mcast
    multus: {networkName: m-net}
)");
  auto r = plan_networks(vmi, pod_with(), 1);
  const std::string all = refusals(r);
  CHECK(r.plans.empty());
  CHECK(all.find("spec.domain.devices.interfaces[1]: slirp is not supported") != std::string::npos);
  CHECK(all.find("spec.domain.devices.interfaces[2].sriov: SR-IOV network 'fast' has no VF device") != std::string::npos);
  CHECK(all.find("spec.domain.devices.interfaces[3].name: no network named 'ghost'") != std::string::npos);
  CHECK(all.find("spec.domain.devices.interfaces[4].macAddress: MAC 02:00:00:00:00:01 is also used by spec.domain.devices.interfaces[0]") != std::string::npos);
  CHECK(all.find("spec.domain.devices.interfaces[5].masquerade: masquerade is only allowed on the pod network") != std::string::npos);
  CHECK(all.find("spec.domain.devices.interfaces[6].macAddress: '03:00:00:00:00:01' is a multicast address") != std::string::npos);
  CHECK(r.refusals.size() == 6);
}

TEST_CASE("plan: a Multus network whose interface is missing from the pod is refused, an SR-IOV VF is planned") {
  auto vmi = parse(R"(
    devices:
      interfaces:
      - name: a
        bridge: {}
      - name: b
        sriov: {}
  networks:
  - name: a
    multus: {networkName: a-net}
  - name: b
    multus: {networkName: b-net}
)");
  PodFacts f = pod_with();
  f.links.erase("net1");
  f.sriov_vf_pci["b"] = "0000:3b:02.1";
  auto r = plan_networks(vmi, f, 1);
  REQUIRE(r.refusals.size() == 1);
  // Neither the hashed name (KubeVirt v1.0 on) nor net1: refused naming the hashed one.
  CHECK(chl::vmi::to_string(r.refusals[0]).find("has no interface " + chl::network::hashed_pod_interface_name("a") + " in the pod") !=
        std::string::npos);
  f.links["net1"] = PodLink{"net1", 1500, {}, {}, {}};
  r = plan_networks(vmi, f, 1);
  REQUIRE_MESSAGE(r.refusals.empty(), refusals(r));
  CHECK(r.plans[1].binding == PlanBinding::Sriov);
  CHECK(r.plans[1].sriov_pci == "0000:3b:02.1");
}

TEST_CASE("plan: no interfaces and no networks means one masquerade interface on the pod network") {
  auto vmi = parse("    devices: {}\n");
  auto r = plan_networks(vmi, pod_with(), 1);
  REQUIRE_MESSAGE(r.refusals.empty(), refusals(r));
  REQUIRE(r.plans.size() == 1);
  CHECK(r.plans[0].iface_name == "default");
  CHECK(r.plans[0].binding == PlanBinding::Masquerade);
  auto none = parse("    devices: {autoattachPodInterface: false}\n");
  CHECK(plan_networks(none, pod_with(), 1).plans.empty());
}

TEST_CASE("plan: tap names stay within 15 bytes") {
  CHECK(tap_name_for("eth0") == "tap0");
  CHECK(tap_name_for("net12") == "tap12");
  CHECK(tap_name_for("pod1234567890abcdef") == "tap-pod12345678");
  CHECK(tap_name_for("pod1234567890abcdef").size() <= 15);
}

TEST_CASE("plan: KubeVirt's names for a secondary Multus network — hashed (v1.0 on) or the pod's ordinal netN, the bridge, the tap, the bridged pod interface") {
  // namescheme.GenerateHashedInterfaceName("blue-net"): "pod" + sha256("blue-net")[:11].
  CHECK(chl::network::hashed_pod_interface_name("blue-net") == "pod0371e81cb4a");
  CHECK(tap_name_for("pod0371e81cb4a") == "tap0371e81cb4a");
  CHECK(chl::network::bridge_name_for("pod0371e81cb4a") == "k6t-0371e81cb4a");
  CHECK(chl::network::bridged_nic_name("pod0371e81cb4a") == "0371e81cb4a-nic");
  CHECK(chl::network::bridge_name_for("eth0") == "k6t-eth0");
  CHECK(chl::network::bridged_nic_name("eth0") == "eth0-nic");
  auto vmi = parse(
      "    devices:\n"
      "      interfaces: [{name: default, masquerade: {}}, {name: blue, bridge: {}}]\n"
      "  networks: [{name: default, pod: {}}, {name: blue, multus: {networkName: blue-net}}]\n");
  // spec.networks[].name is what KubeVirt hashes: "blue" here.
  const std::string hashed = chl::network::hashed_pod_interface_name("blue");
  PodFacts hashed_pod = pod_with();
  hashed_pod.links[hashed] = hashed_pod.links["eth0"];
  auto r = plan_networks(vmi, hashed_pod, 1);
  REQUIRE_MESSAGE(r.refusals.empty(), refusals(r));
  REQUIRE(r.plans.size() == 2);
  CHECK(r.plans[1].pod_iface == hashed);
  CHECK(r.plans[1].tap == "tap" + hashed.substr(3));
  CHECK(r.plans[1].bridge == "k6t-" + hashed.substr(3));
  // A pod from before v1.0 has net1: that is used.
  PodFacts ordinal_pod = pod_with();  // it has net1
  r = plan_networks(vmi, ordinal_pod, 1);
  REQUIRE_MESSAGE(r.refusals.empty(), refusals(r));
  CHECK(r.plans[1].pod_iface == "net1");
  CHECK(r.plans[1].tap == "tap1");
  // Neither: refused naming the hashed name KubeVirt would have made.
  PodFacts neither = pod_with();
  neither.links.erase("net1");
  r = plan_networks(vmi, neither, 1);
  REQUIRE_FALSE(r.refusals.empty());
  CHECK_MESSAGE(refusals(r).find("has no interface " + hashed) != std::string::npos, refusals(r));
}

TEST_CASE("resolv.conf: IPv4 nameservers and the last search line") {
  auto rc = parse_resolv_conf(
      "# comment\nnameserver 10.96.0.10\nnameserver fd00::10\nsearch a.local b.local\n"
      "options ndots:5\nsearch ns.svc.cluster.local svc.cluster.local cluster.local\n");
  REQUIRE(rc.nameservers.size() == 1);
  CHECK(format_ipv4(rc.nameservers[0]) == "10.96.0.10");
  CHECK(rc.search == std::vector<std::string>{"ns.svc.cluster.local", "svc.cluster.local", "cluster.local"});
}

TEST_CASE("mac: parse and format") {
  CHECK(parse_mac("02:AA:bb:0c:dd:ee").has_value());
  CHECK(format_mac(*parse_mac("02-AA-bb-0c-dd-ee")) == "02:aa:bb:0c:dd:ee");
  CHECK_FALSE(parse_mac("02:AA:bb:0c:dd").has_value());
  CHECK_FALSE(parse_mac("02:AA:bb:0c:dd:eg").has_value());
  CHECK_FALSE(parse_mac("02:AA-bb:0c:dd:ee").has_value());
}

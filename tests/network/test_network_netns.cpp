// network: real kernel networking in namespaces the test makes. A "node" and a "pod" namespace
// joined by a veth (node 192.168.77.1, pod eth0 192.168.77.2 with its default route via the
// node); wire_pod_network runs in the pod namespace (on a thread that setns'd into it), and a
// third "guest" namespace plays the guest.
//
// Why a veth stands in for the guest's NIC: the guest end of a tap is a file descriptor (the
// VMM's virtio-net backend), not a netdev, so nothing in a namespace can use it; and a tap
// cannot be moved to another namespace while its fds are open. So the test keeps the real tap
// (checked: on the bridge, persistent, fds open) and adds a veth on the same bridge whose
// other end, in the guest namespace, carries the guest's MAC — to the bridge, DHCP server and
// nftables it is the same thing as the guest behind the tap.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <cerrno>
#include <map>
#include <sstream>
#include <thread>

#include "vmi/parser.hpp"
#include "common/child_process.hpp"
#include "network/netlink.hpp"
#include "network/nft_ruleset.hpp"
#include "network/pod_teardown.hpp"
#include "network/tap.hpp"
#include "network/wire.hpp"
#include "sandbox/seccomp_filter.hpp"
#include "sandbox/seccomp_policy.hpp"
#include "tests/network/netns.hpp"
#include "tests/support/test_support.hpp"

using namespace chl::network;
using namespace chl::test::net;
using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

struct Topology {
  std::string tag = std::to_string(::getpid());
  Netns node{"chl" + tag + "n"}, pod{"chl" + tag + "p"}, guest{"chl" + tag + "g"};

  // "" when ready, else why the test must skip.
  std::string up(std::uint32_t pod_mtu) {
    if (::geteuid() != 0) return "needs root (network namespaces, netlink, nftables)";
    if (!chl::test::tool("ip")) return "iproute2's ip not found (tests make namespaces with it)";
    for (auto* ns : {&node, &pod, &guest})
      if (auto e = ns->create(); !e.empty()) return e;
    const std::string mtu = std::to_string(pod_mtu);
    for (auto e : {ip(node.name(), {"link", "add", "n-eth0", "mtu", mtu, "type", "veth", "peer", "name", "eth0",
                                    "mtu", mtu, "netns", pod.name()}),
                   ip(node.name(), {"addr", "add", "192.168.77.1/24", "dev", "n-eth0"}),
                   ip(node.name(), {"link", "set", "n-eth0", "up"}),
                   ip(node.name(), {"link", "set", "lo", "up"}),
                   ip(pod.name(), {"addr", "add", "192.168.77.2/24", "dev", "eth0"}),
                   ip(pod.name(), {"addr", "add", "fd00:77::2/64", "dev", "eth0", "nodad"}),
                   ip(pod.name(), {"link", "set", "eth0", "up"}),
                   ip(pod.name(), {"link", "set", "lo", "up"}),
                   ip(pod.name(), {"route", "add", "default", "via", "192.168.77.1"}),
                   ip(guest.name(), {"link", "set", "lo", "up"})})
      if (!e.empty()) return e;
    std::string why;
    in_netns(pod.name(), [&] {
      if (auto st = nft_run("add table inet chl_probe\ndelete table inet chl_probe\n"); !st)
        why = "nftables not permitted here: " + st.error().message();
    });
    return why;
  }

  // The guest stand-in: veth gst0 on `bridge` in the pod, its peer eth0 in the guest ns.
  std::string plug_guest(const std::string& bridge, const Mac& mac, std::uint32_t mtu) {
    const std::string m = std::to_string(mtu);
    for (auto e : {ip(pod.name(), {"link", "add", "gst0", "mtu", m, "type", "veth", "peer", "name", "eth0", "mtu", m,
                                   "netns", guest.name()}),
                   ip(pod.name(), {"link", "set", "gst0", "master", bridge, "up"}),
                   ip(guest.name(), {"link", "set", "eth0", "address", format_mac(mac), "up"})})
      if (!e.empty()) return e;
    return {};
  }
};

// The io_context the DHCP servers run on, on a thread of its own.
struct IoThread {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> guard{io.get_executor()};
  std::thread t{[this] { io.run(); }};
  ~IoThread() {
    guard.reset();
    io.stop();
    t.join();
  }
};


PlanResult plan_in(const std::string& pod_ns, const chl::vmi::Vmi& vmi, const chl::test::TempDir& dir) {
  chl::test::write_file(dir / "resolv.conf", "nameserver 10.96.0.10\nsearch ns1.svc.cluster.local cluster.local\n");
  PlanResult r;
  in_netns(pod_ns, [&] {
    auto facts = discover_pod((dir / "resolv.conf").string());
    REQUIRE(facts);
    r = plan_networks(vmi, *facts, 1);
  });
  return r;
}

// An IPv6 pod (the node's side fd00:77::1/64, the pod's default route through it) and the plan of
// one masquerade interface forwarding 8080 in it.
NetworkPlan ipv6_masquerade_plan(const Topology& t, const chl::test::TempDir& dir) {
  for (auto e : {ip(t.node.name(), {"addr", "add", "fd00:77::1/64", "dev", "n-eth0", "nodad"}),
                 ip(t.pod.name(), {"-6", "route", "add", "default", "via", "fd00:77::1"})})
    REQUIRE_MESSAGE(e.empty(), e);
  auto vmi = vmi_with("      - name: default\n        masquerade: {}\n        ports: [{port: 8080}]\n");
  auto plan = plan_in(t.pod.name(), vmi, dir);
  REQUIRE(plan.refusals.empty());
  REQUIRE(plan.plans.size() == 1);
  return plan.plans[0];
}

}  // namespace

TEST_CASE("netns: masquerade — devices, DHCP lease by udhcpc, SNAT to the pod IP, forwarded port only, restart, teardown") {
  Topology t;
  if (auto why = t.up(1400); !why.empty()) {
    chl::test::skip(why);
    return;
  }
  if (!chl::test::tool("busybox") && access("/bin/busybox", X_OK) != 0) {
    chl::test::skip("busybox (busybox-static) not installed: no udhcpc");
    return;
  }
  chl::test::TempDir dir("chlnet");
  auto vmi = vmi_with("      - name: default\n        masquerade: {}\n        ports: [{port: 8080}]\n");
  auto plan = plan_in(t.pod.name(), vmi, dir);
  REQUIRE(plan.refusals.empty());
  REQUIRE(plan.plans.size() == 1);
  const NetworkPlan p = plan.plans[0];
  CHECK(p.mtu == 1400);
  CHECK(p.guest6 == "fd10:0:2::2");

  IoThread io;
  std::unique_ptr<WiredNetwork> wired;
  in_netns(t.pod.name(), [&] {
    auto w = wire_pod_network(plan.plans, &io.io);
    REQUIRE_MESSAGE(w, (w ? std::string() : w.error().message()));
    wired = std::move(*w);
  });
  REQUIRE(wired->interfaces().size() == 1);
  CHECK(wired->interfaces()[0].tap == "tap0");
  CHECK(wired->interfaces()[0].tap_fds.size() == 1);
  CHECK(tap_name_of_fd(wired->interfaces()[0].tap_fds[0].get()).value_or("") == "tap0");

  // Devices, addresses and rules.
  int bridge_index = 0;
  in_netns(t.pod.name(), [&] {
    auto nl = Netlink::open();
    REQUIRE(nl);
    auto br = nl->find_link("k6t-eth0");
    REQUIRE(br);
    REQUIRE(br->has_value());
    CHECK((*br)->kind == "bridge");
    CHECK((*br)->mtu == 1400);
    bridge_index = (*br)->index;
    auto tap = nl->find_link("tap0");
    REQUIRE(tap);
    REQUIRE(tap->has_value());
    CHECK((*tap)->master == bridge_index);
    CHECK((*tap)->mtu == 1400);
    auto links = nl->list_links();
    REQUIRE(links);
    bool gw = false;
    for (const auto& l : *links)
      if (l.name == "k6t-eth0")
        for (const auto& a : l.ipv4) gw = gw || format_ipv4_cidr(a) == "10.0.2.1/24";
    CHECK(gw);
    bool gw6 = false;  // the pod has IPv6: the bridge gets KubeVirt's fd10:0:2::1/120 too
    for (const auto& l : *links)
      if (l.name == "k6t-eth0")
        for (const auto& a : l.ipv6) gw6 = gw6 || a == "fd10:0:2::1/120";
    CHECK(gw6);
    auto table = nft_list_table();
    REQUIRE(table);
    CHECK(table->find("tcp dport 8080 counter") != std::string::npos);
    CHECK(table->find("dnat ip6 to fd10:0:2::2") != std::string::npos);
    CHECK(table->find("ip6 saddr fd10:0:2::2 counter") != std::string::npos);
    CHECK(table->find("dnat ip to 10.0.2.2") != std::string::npos);
    CHECK(table->find("ip saddr 10.0.2.2 counter") != std::string::npos);
  });

  // DHCP: udhcpc behind the bridge with the guest's MAC gets exactly the lease.
  REQUIRE(t.plug_guest("k6t-eth0", p.mac, p.mtu) == "");
  std::string log;
  auto lease = run_udhcpc(t.guest.name(), dir, log);
  INFO(log);
  CHECK(lease["ip"] == "10.0.2.2");
  CHECK(lease["subnet"] == "255.255.255.0");
  CHECK(lease["router"] == "10.0.2.1");
  CHECK(lease["serverid"] == "10.0.2.1");
  CHECK(lease["dns"] == "10.96.0.10");
  CHECK(lease["domain"] == "ns1.svc.cluster.local");
  CHECK(lease["search"] == "ns1.svc.cluster.local cluster.local");
  CHECK(lease["mtu"] == "1400");
  CHECK(lease["lease"] == "31536000");
  CHECK(lease["hostname"] == "vm1");
  CHECK(lease["staticroutes"] == "0.0.0.0/0 10.0.2.1");
  CHECK(wired->dhcp_answers() >= 2);  // OFFER and ACK

  // Outbound: the node sees the pod's address (SNAT), not 10.0.2.2.
  auto node_listener = tcp_listen(t.node.name(), 7000);
  REQUIRE(node_listener);
  CHECK(tcp_connect(t.guest.name(), "192.168.77.1", 7000, 3s) == 0);
  CHECK(accept_one(node_listener.get(), 3s) == "192.168.77.2");

  // Inbound: the forwarded port reaches the guest's listener, another port does not.
  auto g8080 = tcp_listen(t.guest.name(), 8080);
  auto g9090 = tcp_listen(t.guest.name(), 9090);
  REQUIRE(g8080);
  REQUIRE(g9090);
  std::string got;
  std::thread server([&] { got = accept_one(g8080.get(), 3s, "hello from the guest\n"); });
  std::string reply;
  CHECK(tcp_connect(t.node.name(), "192.168.77.2", 8080, 3s, &reply) == 0);
  server.join();
  CHECK(reply == "hello from the guest\n");
  CHECK(got == "192.168.77.1");  // the node's own address: no SNAT on the way in
  CHECK(tcp_connect(t.node.name(), "192.168.77.2", 9090, 2s) == ECONNREFUSED);
  CHECK(accept_one(g9090.get(), 100ms).empty());

  // Restart: a launcher that died without teardown; the next one reuses the devices and
  // replaces the rules instead of adding a second copy.
  wired->abandon();
  wired.reset();
  in_netns(t.pod.name(), [&] {
    auto w = wire_pod_network(plan.plans, &io.io);
    REQUIRE_MESSAGE(w, (w ? std::string() : w.error().message()));
    wired = std::move(*w);
    auto nl = Netlink::open();
    REQUIRE(nl);
    auto br = nl->find_link("k6t-eth0");
    REQUIRE(br);
    REQUIRE(br->has_value());
    CHECK((*br)->index == bridge_index);  // reused, not rebuilt
    auto links = nl->list_links();
    REQUIRE(links);
    int bridges = 0, addrs = 0;
    for (const auto& l : *links) {
      if (l.name.rfind("k6t-", 0) == 0) ++bridges;
      if (l.name == "k6t-eth0") addrs = static_cast<int>(l.ipv4.size());
    }
    CHECK(bridges == 1);
    CHECK(addrs == 1);
    auto table = nft_list_table();
    REQUIRE(table);
    std::size_t count = 0;
    const std::string rule = "ip saddr 10.0.2.2 counter";
    for (std::size_t at = table->find(rule); at != std::string::npos; at = table->find(rule, at + 1))
      ++count;
    CHECK(count == 1);
  });
  // The guest still gets through after the restart.
  CHECK(tcp_connect(t.guest.name(), "192.168.77.1", 7000, 3s) == 0);
  CHECK(accept_one(node_listener.get(), 3s) == "192.168.77.2");

  // Teardown leaves nothing of ours.
  in_netns(t.pod.name(), [&] {
    auto st = wired->teardown();
    CHECK_MESSAGE(st, (st ? "" : st.error().message()));
    wired.reset();
    auto nl = Netlink::open();
    REQUIRE(nl);
    CHECK_FALSE(nl->find_link("k6t-eth0")->has_value());
    CHECK_FALSE(nl->find_link("tap0")->has_value());
    auto table = nft_list_table();
    REQUIRE_MESSAGE(table, table.error().message());
    CHECK_MESSAGE(table->empty(), *table);
  });
}

TEST_CASE("netns: masquerade over IPv6 — a guest at fd10:0:2::2/120 leaves as the pod's IPv6 address, only the forwarded port comes in") {
  Topology t;
  if (auto why = t.up(1500); !why.empty()) {
    chl::test::skip(why);
    return;
  }
  chl::test::TempDir dir("chlnet6");
  const NetworkPlan p = ipv6_masquerade_plan(t, dir);
  REQUIRE(p.gateway6 == "fd10:0:2::1/120");
  REQUIRE(p.guest6 == "fd10:0:2::2");

  std::unique_ptr<WiredNetwork> wired;
  in_netns(t.pod.name(), [&] {
    auto w = wire_pod_network({p}, nullptr);
    REQUIRE_MESSAGE(w, (w ? std::string() : w.error().message()));
    wired = std::move(*w);
  });
  // The guest configured as KubeVirt documents for IPv6 masquerade (its DHCP is IPv4 only):
  // fd10:0:2::2/120, default route via fd10:0:2::1.
  REQUIRE(t.plug_guest("k6t-eth0", p.mac, p.mtu) == "");
  for (auto e : {ip(t.guest.name(), {"addr", "add", "fd10:0:2::2/120", "dev", "eth0", "nodad"}),
                 ip(t.guest.name(), {"-6", "route", "add", "default", "via", "fd10:0:2::1"})})
    REQUIRE_MESSAGE(e.empty(), e);

  // Outbound: the node sees the pod's IPv6 address (masquerade), not fd10:0:2::2. The bridge's
  // own address may still be in duplicate address detection: retried.
  auto node_listener = tcp_listen(t.node.name(), 7000, true);
  REQUIRE(node_listener);
  CHECK(chl::test::wait_until(10s, [&] { return tcp_connect(t.guest.name(), "fd00:77::1", 7000, 1s) == 0; }, 100ms));
  CHECK(accept_one(node_listener.get(), 3s) == "fd00:77::2");

  // Inbound: [fd00:77::2]:8080 reaches the guest (the node's own address, no SNAT), 9090 not.
  auto g8080 = tcp_listen(t.guest.name(), 8080, true);
  auto g9090 = tcp_listen(t.guest.name(), 9090, true);
  REQUIRE(g8080);
  REQUIRE(g9090);
  std::string got;
  std::thread server([&] { got = accept_one(g8080.get(), 3s, "hello over IPv6\n"); });
  std::string reply;
  CHECK(tcp_connect(t.node.name(), "fd00:77::2", 8080, 3s, &reply) == 0);
  server.join();
  CHECK(reply == "hello over IPv6\n");
  CHECK(got == "fd00:77::1");
  CHECK(tcp_connect(t.node.name(), "fd00:77::2", 9090, 2s) == ECONNREFUSED);
  CHECK(accept_one(g9090.get(), 100ms).empty());

  in_netns(t.pod.name(), [&] {
    auto st = wired->teardown();
    CHECK_MESSAGE(st, (st ? "" : st.error().message()));
    wired.reset();
  });
}

TEST_CASE("netns: masquerade over IPv6 — router advertisements give the guest its router, DHCPv6 gives it fd10:0:2::2") {
  Topology t;
  if (auto why = t.up(1400); !why.empty()) {
    chl::test::skip(why);
    return;
  }
  chl::test::TempDir dir("chlnet6d");
  const NetworkPlan p = ipv6_masquerade_plan(t, dir);
  REQUIRE(p.guest6 == "fd10:0:2::2");

  // The guest stand-in plugged first: the bridge has its carrier (and link-local address) at once.
  IoThread io;
  std::unique_ptr<WiredNetwork> wired;
  in_netns(t.pod.name(), [&] {
    auto w = wire_pod_network({p}, &io.io);
    REQUIRE_MESSAGE(w, (w ? std::string() : w.error().message()));
    wired = std::move(*w);
  });
  REQUIRE(t.plug_guest("k6t-eth0", p.mac, p.mtu) == "");

  // Router advertisements: the guest's kernel (accept_ra, not forwarding) installs a default
  // route through the bridge's link-local address, and takes the MTU.
  std::string routes;
  CHECK(chl::test::wait_until(
      20s,
      [&] {
        routes = chl::test::run_command({"ip", "-n", t.guest.name(), "-6", "route", "show", "default"}).output;
        return routes.find("via fe80::") != std::string::npos && routes.find("proto ra") != std::string::npos;
      },
      100ms));
  INFO(routes);
  CHECK(routes.find("dev eth0") != std::string::npos);
  CHECK(wired->router_adverts() >= 1);

  std::string dhclient_log;
  auto lease6 = run_dhclient6(t.guest.name(), dir, 30s, dhclient_log);
  if (!lease6) {
    chl::test::skip("no DHCPv6 client (dhclient from isc-dhcp-client): the DHCPv6 lease is not checked");
    in_netns(t.pod.name(), [&] { CHECK(wired->teardown()); });
    return;
  }
  CHECK_MESSAGE(*lease6 == "ip6=fd10:0:2::2/128 search=ns1.svc.cluster.local. cluster.local.\n", *lease6, "\n", dhclient_log);
  CHECK(wired->dhcp6_answers() >= 2);  // ADVERTISE and REPLY

  // With the address from DHCPv6 and the router from the advertisements, the guest leaves as the
  // pod's IPv6 address and is reached on the forwarded port.
  auto node_listener = tcp_listen(t.node.name(), 7000, true);
  REQUIRE(node_listener);
  CHECK(chl::test::wait_until(10s, [&] { return tcp_connect(t.guest.name(), "fd00:77::1", 7000, 1s) == 0; }, 100ms));
  CHECK(accept_one(node_listener.get(), 3s) == "fd00:77::2");
  auto g8080 = tcp_listen(t.guest.name(), 8080, true);
  REQUIRE(g8080);
  std::string got;
  std::thread server([&] { got = accept_one(g8080.get(), 3s, "hello\n"); });
  std::string reply;
  CHECK(tcp_connect(t.node.name(), "fd00:77::2", 8080, 3s, &reply) == 0);
  server.join();
  CHECK(reply == "hello\n");
  CHECK(got == "fd00:77::1");

  in_netns(t.pod.name(), [&] {
    auto st = wired->teardown();
    CHECK_MESSAGE(st, (st ? "" : st.error().message()));
    wired.reset();
  });
}

TEST_CASE("netns: bridge binding — the guest gets the pod's address and gateway, teardown gives them back") {
  Topology t;
  if (auto why = t.up(1500); !why.empty()) {
    chl::test::skip(why);
    return;
  }
  if (access("/bin/busybox", X_OK) != 0) {
    chl::test::skip("busybox (busybox-static) not installed: no udhcpc");
    return;
  }
  chl::test::TempDir dir("chlnet");
  auto vmi = vmi_with("      - name: default\n        bridge: {}\n");
  auto plan = plan_in(t.pod.name(), vmi, dir);
  REQUIRE(plan.refusals.empty());
  IoThread io;
  std::unique_ptr<WiredNetwork> wired;
  in_netns(t.pod.name(), [&] {
    auto w = wire_pod_network(plan.plans, &io.io);
    REQUIRE_MESSAGE(w, (w ? std::string() : w.error().message()));
    wired = std::move(*w);
    auto nl = Netlink::open();
    REQUIRE(nl);
    auto links = nl->list_links();
    REQUIRE(links);
    for (const auto& l : *links)
      if (l.name == "eth0") CHECK(l.ipv4.empty());  // moved to the guest
    auto eth0 = nl->find_link("eth0");
    auto br = nl->find_link("k6t-eth0");
    REQUIRE((eth0 && br && eth0->has_value() && br->has_value()));
    CHECK((*eth0)->master == (*br)->index);
    // What a restarted launcher would plan from: the address read back from the bridge alias.
    auto facts = discover_pod("");
    REQUIRE(facts);
    REQUIRE(facts->links["eth0"].ipv4.size() == 1);
    CHECK(format_ipv4_cidr(facts->links["eth0"].ipv4[0]) == "192.168.77.2/24");
  });
  REQUIRE(t.plug_guest("k6t-eth0", plan.plans[0].mac, 1500) == "");
  std::string log;
  auto lease = run_udhcpc(t.guest.name(), dir, log);
  INFO(log);
  CHECK(lease["ip"] == "192.168.77.2");
  CHECK(lease["subnet"] == "255.255.255.0");
  CHECK(lease["router"] == "192.168.77.1");
  CHECK(lease["serverid"] == "169.254.75.10");
  // The guest is on the node's L2 segment with the pod's address.
  auto node_listener = tcp_listen(t.node.name(), 7001);
  REQUIRE(node_listener);
  CHECK(tcp_connect(t.guest.name(), "192.168.77.1", 7001, 3s) == 0);
  CHECK(accept_one(node_listener.get(), 3s) == "192.168.77.2");

  in_netns(t.pod.name(), [&] {
    auto st = wired->teardown();
    CHECK_MESSAGE(st, (st ? "" : st.error().message()));
    wired.reset();
    auto nl = Netlink::open();
    REQUIRE(nl);
    CHECK_FALSE(nl->find_link("k6t-eth0")->has_value());
    CHECK_FALSE(nl->find_link("tap0")->has_value());
    auto links = nl->list_links();
    REQUIRE(links);
    for (const auto& l : *links) {
      if (l.name != "eth0") continue;
      REQUIRE(l.ipv4.size() == 1);
      CHECK(format_ipv4_cidr(l.ipv4[0]) == "192.168.77.2/24");
      bool default_route = false;
      for (const auto& r : l.routes4)
        default_route = default_route || (r.destination.prefix == 0 && r.gateway && format_ipv4(*r.gateway) == "192.168.77.1");
      CHECK(default_route);
    }
  });
}

TEST_CASE("netns: teardown works under the launcher's seccomp sandbox (no new sockets)") {
  Topology t;
  if (auto why = t.up(1500); !why.empty()) {
    chl::test::skip(why);
    return;
  }
  // The teardown is plain netlink on the two sockets opened at wiring (network/pod_teardown.hpp):
  // send and recv only, no library waiting with pselect6.
  auto vmi = vmi_with("      - name: default\n        masquerade: {}\n");
  // In a forked child (the filter is irreversible): join the pod namespace, wire, load the
  // filter in Enforce mode (non-Unix socket() -> EPERM), tear down. Exit codes say where it failed.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const std::string path = "/var/run/netns/" + t.pod.name();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) ::_exit(10);
    auto facts = discover_pod("");
    if (!facts) ::_exit(11);
    auto plan = plan_networks(vmi, *facts, 1);
    if (!plan.refusals.empty()) ::_exit(12);
    auto w = wire_pod_network(plan.plans, nullptr);
    if (!w) ::_exit(13);
    auto filter = chl::sandbox::build_launcher_filter(chl::sandbox::SeccompMode::Enforce,
                                                       chl::sandbox::DriverKind::CloudHypervisor);
    if (!filter || !filter->load()) ::_exit(14);
    // Proof the sandbox is on: a new netlink socket is refused.
    if (::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0) >= 0) ::_exit(15);
    if (auto st = (*w)->teardown(); !st) {
      std::fprintf(stderr, "teardown under seccomp: %s\n", st.error().message().c_str());
      ::_exit(16);
    }
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0),
                "child status " << (WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)));
  in_netns(t.pod.name(), [&] {
    auto nl = Netlink::open();
    REQUIRE(nl);
    CHECK_FALSE(nl->find_link("k6t-eth0")->has_value());
    CHECK_FALSE(nl->find_link("tap0")->has_value());
    CHECK(nft_list_table().value_or("x").empty());
  });
}

TEST_CASE("netns: what one process wired, another removes with PodTeardown alone (run's phase 1 child, then the launcher), and twice is fine") {
  Topology t;
  if (auto why = t.up(1500); !why.empty()) {
    chl::test::skip(why);
    return;
  }
  auto vmi = vmi_with("      - name: default\n        masquerade: {}\n");
  std::vector<NetworkPlan> plans;
  in_netns(t.pod.name(), [&] {
    auto facts = discover_pod("");
    REQUIRE(facts);
    auto plan = plan_networks(vmi, *facts, 1);
    REQUIRE(plan.refusals.empty());
    plans = plan.plans;
    auto w = wire_pod_network(plans, nullptr);
    REQUIRE_MESSAGE(w, (w ? "" : w.error().message()));
    (*w)->abandon();  // as the phase 1 child leaves it
    REQUIRE_FALSE(nft_list_table().value_or("").empty());
    auto nl = Netlink::open();
    REQUIRE(nl);
    REQUIRE(nl->find_link("k6t-eth0")->has_value());
    REQUIRE(nl->find_link("tap0")->has_value());
  });
  in_netns(t.pod.name(), [&] {
    auto td = PodTeardown::open();
    REQUIRE_MESSAGE(td, (td ? "" : td.error().message()));
    auto st = td->run(plans);
    CHECK_MESSAGE(st, (st ? "" : st.error().message()));
    auto nl = Netlink::open();
    REQUIRE(nl);
    CHECK_FALSE(nl->find_link("k6t-eth0")->has_value());
    CHECK_FALSE(nl->find_link("tap0")->has_value());
    CHECK(nft_list_table().value_or("x").empty());
    // Nothing left to remove: no error (a restarted launcher's teardown, a second call).
    st = td->run(plans);
    CHECK_MESSAGE(st, (st ? "" : st.error().message()));
  });
}

TEST_CASE("netns: two interfaces — masquerade on eth0 and bridge on Multus net1 — each guest gets its own lease") {
  Topology t;
  if (auto why = t.up(1500); !why.empty()) {
    chl::test::skip(why);
    return;
  }
  if (access("/bin/busybox", X_OK) != 0) {
    chl::test::skip("busybox (busybox-static) not installed: no udhcpc");
    return;
  }
  // net1: a second veth node <-> pod on 192.168.88.0/24, and a second guest namespace.
  Netns guest2("chl" + t.tag + "h");
  REQUIRE(guest2.create() == "");
  for (auto e : {ip(t.node.name(), {"link", "add", "n-net1", "type", "veth", "peer", "name", "net1", "netns", t.pod.name()}),
                 ip(t.node.name(), {"addr", "add", "192.168.88.1/24", "dev", "n-net1"}),
                 ip(t.node.name(), {"link", "set", "n-net1", "up"}),
                 ip(t.pod.name(), {"addr", "add", "192.168.88.2/24", "dev", "net1"}),
                 ip(t.pod.name(), {"link", "set", "net1", "up"})})
    REQUIRE(e == "");
  auto parsed = chl::vmi::parse_vmi(R"(apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: vm2, uid: 5a5a-0002}
spec:
  domain:
    memory: {guest: 128Mi}
    devices:
      interfaces:
      - {name: default, masquerade: {}}
      - {name: storage, bridge: {}}
  networks:
  - {name: default, pod: {}}
  - {name: storage, multus: {networkName: storage-net}}
)");
  REQUIRE(parsed.problems.empty());
  chl::test::TempDir dir("chlnet");
  auto plan = plan_in(t.pod.name(), parsed.vmi, dir);
  REQUIRE(plan.refusals.empty());
  REQUIRE(plan.plans.size() == 2);
  IoThread io;
  std::unique_ptr<WiredNetwork> wired;
  in_netns(t.pod.name(), [&] {
    auto w = wire_pod_network(plan.plans, &io.io);
    REQUIRE_MESSAGE(w, (w ? std::string() : w.error().message()));
    wired = std::move(*w);
  });
  REQUIRE(wired->interfaces().size() == 2);
  CHECK(wired->interfaces()[1].tap == "tap1");
  REQUIRE(t.plug_guest("k6t-eth0", plan.plans[0].mac, 1500) == "");
  for (auto e : {ip(t.pod.name(), {"link", "add", "gst1", "type", "veth", "peer", "name", "eth0", "netns", guest2.name()}),
                 ip(t.pod.name(), {"link", "set", "gst1", "master", "k6t-net1", "up"}),
                 ip(guest2.name(), {"link", "set", "eth0", "address", format_mac(plan.plans[1].mac), "up"})})
    REQUIRE(e == "");
  // Two DHCP servers share port 67, each bound to its bridge: each guest hears only its own.
  std::string log1, log2;
  chl::test::TempDir d1("chlnet"), d2("chlnet");
  auto lease1 = run_udhcpc(t.guest.name(), d1, log1);
  auto lease2 = run_udhcpc(guest2.name(), d2, log2);
  INFO(log1 << "\n" << log2);
  CHECK(lease1["ip"] == "10.0.2.2");
  CHECK(lease1["serverid"] == "10.0.2.1");
  CHECK(lease2["ip"] == "192.168.88.2");
  CHECK(lease2["serverid"] == "169.254.75.10");
  CHECK(lease2["router"] == "");  // net1 has no default route in the pod: none is handed out
  in_netns(t.pod.name(), [&] { CHECK(wired->teardown()); });
  wired.reset();
}

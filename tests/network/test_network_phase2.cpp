// network/phase2: the launcher's half of the pod network in virt-launcher mode, in namespaces
// the test makes. A "node" and a "pod" namespace joined by a veth (pod eth0 192.168.77.2/24),
// virt-handler's phase 1 reproduced in the pod (tests/network/kubevirt_phase1.hpp), then phase 2
// in a forked child that joined the pod namespace and became uid/gid 107 with no capability at
// all, as virt-launcher runs: it must attach to tap0, serve the guest's DHCP and change nothing.
//
// As in test_network_netns.cpp, a veth on k6t-eth0 whose peer (in a "guest" namespace) carries
// the guest's MAC stands in for the VM behind the tap (the tap's guest end is an fd). The child
// also sees /dev/net/tun as the pod does (the tun device plugin's node, owned by the pod's user
// 107): this machine's node is root's 0600, so the child bind-mounts its own node (0660, 107)
// over it in a private mount namespace before dropping its privileges.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "network/phase2.hpp"
#include "network/tap.hpp"
#include "tests/network/kubevirt_phase1.hpp"
#include "tests/network/netns.hpp"
#include "tests/support/test_support.hpp"
#include "vmi/parser.hpp"

using namespace chl::network;
using namespace chl::test::net;
using namespace std::chrono_literals;

namespace {

constexpr const char* kGuestMac = "02:00:00:aa:bb:cc";

struct Pod {
  std::string tag = std::to_string(::getpid());
  Netns node{"chl" + tag + "N"}, pod{"chl" + tag + "P"}, guest{"chl" + tag + "G"};
  chl::test::TempDir dir{"chl-phase2"};

  // `udhcpc`: the test plays the guest with busybox's DHCP client.
  std::string up(bool udhcpc) {
    if (::geteuid() != 0) return "needs root (network namespaces, taps, phase 1 as virt-handler)";
    if (udhcpc && ::access("/bin/busybox", X_OK) != 0) return "busybox (busybox-static) not installed: no udhcpc";
    if (!chl::test::tool("ip")) return "iproute2's ip not found (tests make namespaces with it)";
    if (::access("/dev/net/tun", F_OK) != 0) return "no /dev/net/tun";
    for (auto* ns : {&node, &pod, &guest})
      if (auto e = ns->create(); !e.empty()) return e;
    for (auto e : {ip(node.name(), {"link", "add", "n-eth0", "type", "veth", "peer", "name", "eth0", "netns", pod.name()}),
                   ip(node.name(), {"addr", "add", "192.168.77.1/24", "dev", "n-eth0"}),
                   ip(node.name(), {"link", "set", "n-eth0", "up"}),
                   ip(pod.name(), {"addr", "add", "192.168.77.2/24", "dev", "eth0"}),
                   ip(pod.name(), {"link", "set", "eth0", "up"}),
                   ip(pod.name(), {"link", "set", "lo", "up"}),
                   ip(pod.name(), {"route", "add", "default", "via", "192.168.77.1"})})
      if (!e.empty()) return e;
    // The pod's files, readable by uid 107.
    ::chmod(dir.path().c_str(), 0755);
    chl::test::write_file(dir / "resolv.conf", "nameserver 10.96.0.10\nsearch ns1.svc.cluster.local cluster.local\n");
    ::chmod((dir / "resolv.conf").c_str(), 0644);
    return {};
  }

  std::string plug_guest(const std::string& mac = kGuestMac) {
    for (auto e : {ip(pod.name(), {"link", "add", "gst0", "type", "veth", "peer", "name", "eth0", "netns", guest.name()}),
                   ip(pod.name(), {"link", "set", "gst0", "master", "k6t-eth0", "up"}),
                   ip(guest.name(), {"link", "set", "eth0", "address", mac, "up"}),
                   ip(guest.name(), {"link", "set", "lo", "up"})})
      if (!e.empty()) return e;
    return {};
  }
};


const std::string kMasq = std::string("      - name: default\n        masquerade: {}\n        macAddress: '") + kGuestMac + "'\n";

// Phase 2 in a child: joins the pod namespace, sees a usable /dev/net/tun, becomes 107:107 with
// no capabilities, plans and attaches, and reports on `report` one line: "ok <taps> cap=<CapEff>"
// or "error: <message>". Then serves until `stop` is readable and reports "answers <n>".
struct Phase2Child {
  pid_t pid = -1;
  int report = -1, stop = -1;
  std::string first_line;

  void start(const Pod& t, const chl::vmi::Vmi& vmi, std::uint64_t vcpus = 1) {
    int r[2], s[2];
    REQUIRE(::pipe2(r, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(s, O_CLOEXEC) == 0);
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(r[0]);
      ::close(s[1]);
      child(t, vmi, vcpus, r[1], s[0]);
    }
    ::close(r[1]);
    ::close(s[0]);
    report = r[0];
    stop = s[1];
    first_line = read_line(10s);
  }

  std::string read_line(std::chrono::milliseconds timeout) const {
    std::string line;
    char c;
    pollfd p{report, POLLIN, 0};
    while (::poll(&p, 1, static_cast<int>(timeout.count())) > 0 && ::read(report, &c, 1) == 1 && c != '\n') line += c;
    return line;
  }

  // Stop serving; the child's last line.
  std::string finish() {
    ::close(stop);
    stop = -1;
    auto last = read_line(10s);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ::close(report);
    pid = -1;
    return last;
  }
  ~Phase2Child() {
    if (pid > 0) (void)finish();
  }

  [[noreturn]] static void child(const Pod& t, const chl::vmi::Vmi& vmi, std::uint64_t vcpus, int out, int stop) {
    auto say = [out](const std::string& s) {
      const std::string line = s + "\n";
      (void)!::write(out, line.data(), line.size());
    };
    const int ns = ::open(("/run/netns/" + t.pod.name()).c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0 || ::setns(ns, CLONE_NEWNET) != 0) { say("error: setns"); ::_exit(1); }
    // The pod's /dev/net/tun (see the header comment), then uid/gid 107 and no capabilities.
    const std::string tun = (t.dir / "tun").string();
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        (::mknod(tun.c_str(), S_IFCHR | 0660, ::makedev(10, 200)) != 0 && errno != EEXIST) ||
        ::chown(tun.c_str(), 107, 107) != 0 || ::chmod(tun.c_str(), 0660) != 0 ||
        ::mount(tun.c_str(), "/dev/net/tun", nullptr, MS_BIND, nullptr) != 0) {
      say("error: /dev/net/tun setup");
      ::_exit(1);
    }
    if (::setgroups(0, nullptr) != 0 || ::setresgid(107, 107, 107) != 0 || ::setresuid(107, 107, 107) != 0) {
      say("error: dropping privileges");
      ::_exit(1);
    }
    std::string cap_eff;
    {
      std::ifstream st("/proc/self/status");
      std::string l;
      while (std::getline(st, l))
        if (l.rfind("CapEff:", 0) == 0) cap_eff = l.substr(l.find_first_not_of(" \t", 7));
    }
    boost::asio::io_context io;
    auto facts = read_pod_facts((t.dir / "resolv.conf").string());
    if (!facts) { say("error: " + facts.error().message()); ::_exit(1); }
    auto plan = plan_networks(vmi, *facts, vcpus);
    if (!plan.refusals.empty()) { say("error: refused " + plan.refusals.front().message); ::_exit(1); }
    Phase2Options o;
    o.private_dir = t.dir.path().string();
    auto net = attach_pod_network(plan.plans, &io, o);
    if (!net) { say("error: " + net.error().message()); ::_exit(1); }
    std::string taps;
    for (const auto& w : (*net)->interfaces())
      for (const auto& fd : w.tap_fds) {
        auto n = tap_name_of_fd(fd.get());
        taps += (n ? *n : "?") + ",";
      }
    say("ok " + taps + " cap=" + cap_eff);
    pollfd p{stop, POLLIN, 0};
    while (::poll(&p, 1, 0) == 0) io.run_for(50ms);
    say("answers " + std::to_string((*net)->dhcp_answers()) + " dhcpv6 " + std::to_string((*net)->dhcp6_answers()) +
        " ra " + std::to_string((*net)->router_adverts()));
    net->reset();
    ::_exit(0);
  }
};


}  // namespace

TEST_CASE("phase 2: as uid 107 without capabilities, the launcher attaches to virt-handler's tap0, serves the lease, changes nothing") {
  Pod t;
  if (auto why = t.up(true); !why.empty()) {
    chl::test::skip(why);
    return;
  }
  Phase1 p1{t.pod.name()};
  REQUIRE_MESSAGE(kubevirt_phase1_masquerade(p1) == "", kubevirt_phase1_masquerade(p1));
  REQUIRE(t.plug_guest() == "");
  const auto before = netns_snapshot(t.pod.name());
  INFO("phase 1 left:\n", before);
  REQUIRE(before.find("tap pi off vnet_hdr on persist on user ") != std::string::npos);
  // The owner numerically: `ip` prints a user's name where the node has one (KubeVirt's images
  // have a `qemu` user 107). `ip netns exec` mounts the namespace's own /sys.
  const auto owner = chl::test::run_command(
      {"ip", "netns", "exec", t.pod.name(), "cat", "/sys/class/net/tap0/owner"});
  CHECK_MESSAGE(owner.output == "107\n", owner.output);

  Phase2Child c;
  c.start(t, vmi_with(kMasq));
  REQUIRE_MESSAGE(c.first_line.rfind("ok ", 0) == 0, c.first_line);
  CHECK(c.first_line.find("ok tap0, cap=0000000000000000") == 0);

  std::string log;
  auto lease = run_udhcpc(t.guest.name(), t.dir, log);
  INFO(log);
  // The lease KubeVirt's masquerade DHCP gives (MasqueradeConfigGenerator + startDHCP).
  for (const auto& [key, want] : std::map<std::string, std::string>{{"ip", "10.0.2.2"},
                                                                     {"subnet", "255.255.255.0"},
                                                                     {"router", "10.0.2.1"},
                                                                     {"serverid", "10.0.2.1"},
                                                                     {"dns", "10.96.0.10"},
                                                                     {"domain", "ns1.svc.cluster.local"},
                                                                     {"mtu", "1500"},
                                                                     {"hostname", "vm1"}})
    CHECK_MESSAGE(lease[key] == want, key);
  CHECK(c.finish() == "answers " + std::to_string(lease.empty() ? 0 : 2) + " dhcpv6 0 ra 0");  // OFFER and ACK
  CHECK(netns_snapshot(t.pod.name()) == before);
}

TEST_CASE("phase 2: bridge binding — the guest gets the pod's address, gateway and MAC from virt-handler's DHCP cache, as uid 107") {
  Pod t;
  if (auto why = t.up(true); !why.empty()) {
    chl::test::skip(why);
    return;
  }
  const PodIface pod{"02:00:00:aa:bb:cd", "192.168.77.2/24", "192.168.77.1"};
  REQUIRE(ip(t.pod.name(), {"link", "set", "eth0", "address", pod.mac}) == "");
  Phase1 p1{t.pod.name()};
  p1.mtu = 1400;
  REQUIRE(ip(t.pod.name(), {"link", "set", "eth0", "mtu", "1400"}) == "");
  auto e = kubevirt_phase1_bridge(p1, pod, t.dir.path().string());
  REQUIRE_MESSAGE(e.empty(), e);
  REQUIRE(t.plug_guest(pod.mac) == "");
  const auto before = netns_snapshot(t.pod.name());
  INFO("phase 1 left:\n", before);

  Phase2Child c;
  c.start(t, vmi_with("      - name: default\n        bridge: {}\n"));  // no macAddress: the pod's
  REQUIRE_MESSAGE(c.first_line.rfind("ok tap0, cap=0000000000000000", 0) == 0, c.first_line);
  std::string log;
  auto lease = run_udhcpc(t.guest.name(), t.dir, log);
  INFO(log);
  for (const auto& [key, want] : std::map<std::string, std::string>{{"ip", "192.168.77.2"},
                                                                     {"subnet", "255.255.255.0"},
                                                                     {"router", "192.168.77.1"},
                                                                     {"serverid", "169.254.75.10"},
                                                                     {"mtu", "1400"}})
    CHECK_MESSAGE(lease[key] == want, key);
  CHECK(c.finish() == "answers " + std::to_string(lease.empty() ? 0 : 2) + " dhcpv6 0 ra 0");
  // The guest stand-in's address came from udhcpc's script, in the guest namespace: the pod's
  // namespace is as phase 1 left it.
  CHECK(netns_snapshot(t.pod.name()) == before);
}

TEST_CASE("phase 2: IPv6 masquerade — as uid 107 the guest gets fd10:0:2::2 by DHCPv6, as KubeVirt serves it (no router advertisements)") {
  Pod t;
  if (auto why = t.up(false); !why.empty()) {
    chl::test::skip(why);
    return;
  }
  REQUIRE(ip(t.pod.name(), {"addr", "add", "fd00:77::2/64", "dev", "eth0", "nodad"}) == "");
  Phase1 p1{t.pod.name()};
  p1.ipv6 = true;
  auto e = kubevirt_phase1_masquerade(p1);
  REQUIRE_MESSAGE(e.empty(), e);
  REQUIRE(t.plug_guest() == "");
  REQUIRE(ip(t.guest.name(), {"link", "set", "eth0", "up"}) == "");
  const auto before = netns_snapshot(t.pod.name());
  INFO("phase 1 left:\n", before);
  REQUIRE(before.find("table ip6 nat") != std::string::npos);

  Phase2Child c;
  c.start(t, vmi_with(kMasq));
  REQUIRE_MESSAGE(c.first_line.rfind("ok tap0, cap=0000000000000000", 0) == 0, c.first_line);
  std::string log;
  auto lease6 = run_dhclient6(t.guest.name(), t.dir, 30s, log);
  if (!lease6) {
    chl::test::skip("no DHCPv6 client (dhclient from isc-dhcp-client): the DHCPv6 lease is not checked");
    return;
  }
  CHECK_MESSAGE(*lease6 == "ip6=fd10:0:2::2/128 search=ns1.svc.cluster.local. cluster.local.\n", *lease6, "\n", log);
  const auto last = c.finish();
  CHECK_MESSAGE(last.rfind("answers 0 dhcpv6 ", 0) == 0, last);
  CHECK_MESSAGE(last.find(" dhcpv6 0 ") == std::string::npos, last);  // ADVERTISE and REPLY
  CHECK_MESSAGE(last.find(" ra 0") != std::string::npos, last);      // KubeVirt sends none
  CHECK(netns_snapshot(t.pod.name()) == before);
}

TEST_CASE("phase 2: a bad phase 1 is refused naming the interface and what is wrong, and nothing changes") {
  Pod t;
  if (auto why = t.up(false); !why.empty()) {
    chl::test::skip(why);
    return;
  }
  struct Case {
    const char* what;
    std::uint32_t uid;
    std::uint32_t queues;      // phase 1's
    bool flip_mq;              // phase 1's multi-queue flag disagrees with its queue count
    bool drop_tap;
    std::string vmi_iface;
    std::string devices_extra;
    std::uint64_t vcpus;
    std::string cache;         // vif-cache-eth0.json's content; "" = none
    std::string says;
  };
  const std::string bridge = "      - name: default\n        bridge: {}\n";
  const std::string cache_path = t.dir.path().string() + "/vif-cache-eth0.json";
  for (const auto& k : {
           Case{"no tap", 107, 1, false, true, kMasq, "", 1, "", "interface default: tap tap0 is missing"},
           Case{"root's tap", 0, 1, false, false, kMasq, "", 1, "", "interface default: tap tap0 is not usable by uid:gid 107:107"},
           Case{"multi-queue tap for one queue pair", 107, 1, true, false, kMasq, "", 1, "",
                "interface default: tap tap0 does not match 1 queue pair(s)"},
           Case{"single-queue tap for two queue pairs", 107, 2, true, false, kMasq,
                "      networkInterfaceMultiqueue: true\n", 2, "", "interface default: tap tap0 does not match 2 queue pair(s)"},
           Case{"missing DHCP cache (bridge binding)", 107, 1, false, false, bridge, "", 1, "",
                "interface default: DHCP cache " + cache_path + " is missing"},
           Case{"malformed DHCP cache (bridge binding)", 107, 1, false, false, bridge, "", 1, R"({"Mtu":"big"})",
                "interface default: " + cache_path + " is malformed: DHCP cache: field Mtu"},
       }) {
    CAPTURE(k.what);
    kubevirt_phase1_undo(t.pod.name());
    std::filesystem::remove(cache_path);
    Phase1 p1{t.pod.name()};
    p1.uid = p1.gid = k.uid;
    p1.queues = k.queues;
    p1.multi_queue_flag_override = k.flip_mq;
    auto e = kubevirt_phase1_masquerade(p1);
    REQUIRE_MESSAGE(e.empty(), e);
    if (k.drop_tap) REQUIRE(ip(t.pod.name(), {"link", "del", "tap0"}) == "");
    if (!k.cache.empty()) {
      chl::test::write_file(cache_path, k.cache);
      ::chmod(cache_path.c_str(), 0644);
    }
    const auto before = netns_snapshot(t.pod.name());
    Phase2Child c;
    c.start(t, vmi_with(k.vmi_iface, k.devices_extra), k.vcpus);
    CHECK_MESSAGE(c.first_line.find("error: " + k.says) == 0, c.first_line);
    (void)c.finish();
    CHECK(netns_snapshot(t.pod.name()) == before);
  }
}

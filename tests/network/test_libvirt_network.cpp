// Pod networking on the qemu-kvm path, end to end through `ch-launcher run` (lane qemu): a "node"
// and a "pod" network namespace joined by a veth (MTU 1400); the launcher runs in the pod
// namespace, wires bridge, tap, nftables and DHCP there, and QEMU (TCG, through a libvirtd the
// launcher starts in the pod's namespace) opens the tap by name. The guest is the Linux test
// guest with the networking initramfs (tests/guests/linux/net-initrd.sh, shared with
// bench/network/e2e_qemu.sh): busybox udhcpc, a ping of the gateway, nc listeners on 8080 and
// 9090.
//
// The launcher runs in the pod's network namespace and in a mount namespace of the pod's (see
// PodFixture) with empty /run/libvirt and /run/ch-launcher: libvirtd opens managed='no' taps in
// its own network namespace, so the pod needs its own daemon (as every KubeVirt pod has), not
// one another test left running in the host's.
// No timing assertions: libvirtd's first start probes QEMU.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

#include "drivers/libvirt/daemon.hpp"
#include "network/nft_ruleset.hpp"
#include "tests/support/launcher_harness.hpp"
#include "tests/network/netns.hpp"
#include "tests/support/linux_guest.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace tnet = chl::test::net;

namespace {

constexpr auto kStart =
    240s;  // libvirtd start (+ QEMU probe when not cached) + TCG boot, 2 busy cores

bool have_tool(const char* t) {
  return chl::test::tool(t) || ::access((std::string("/usr/sbin/") + t).c_str(), X_OK) == 0;
}

// Root, QEMU, libvirt, the tools the test drives with: else skip with the reason.
bool runnable() {
  if (::geteuid() != 0) {
    chl::test::skip("needs root (network namespaces, qemu:///system, starting libvirtd)");
    return false;
  }
  for (const char* t : {"qemu-system-x86_64", "libvirtd", "virtlogd", "ip", "unshare", "cpio"}) {
    if (!have_tool(t)) {
      chl::test::skip(std::string(t) + " not installed (scripts/setup.sh)");
      return false;
    }
  }
  return true;
}

// /etc/netns/<ns>/resolv.conf: `ip netns exec` bind-mounts it over /etc/resolv.conf, so the
// launcher reads the pod's DNS from it. Removed on destruction.
struct PodResolvConf {
  fs::path dir;
  PodResolvConf(const std::string& ns, const std::string& text) : dir(fs::path("/etc/netns") / ns) {
    fs::create_directories(dir);
    chl::test::write_file(dir / "resolv.conf", text);
  }
  ~PodResolvConf() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

std::string describe_processes(const std::vector<long>& pids) {
  std::string s;
  for (long p : pids) {
    std::string cmd = chl::test::read_file("/proc/" + std::to_string(p) + "/cmdline");
    for (char& c : cmd)
      if (c == '\0') c = ' ';
    s += std::to_string(p) + ": " + cmd + "\n";
  }
  return s;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

// The "pod": a node and a pod network namespace joined by a veth (MTU 1400, pod 192.168.77.2,
// node 192.168.77.1), the pod's DNS in /etc/netns/<pod>/resolv.conf (`ip netns exec`
// bind-mounts it over /etc/resolv.conf), and a holder process that keeps the pod's mount
// namespace: empty /run/libvirt and /run/ch-launcher, so the launcher starts a libvirtd of the
// pod's own, and a restarted launcher finds it again, as in a pod. The launcher runs inside both
// namespaces (nsenter), with the Linux guest's kernel and networking initramfs as its
// kernel-boot "container".
struct PodFixture {
  std::string tag = std::to_string(::getpid() % 100000);
  tnet::Netns node{"chlqn" + tag};
  tnet::Netns pod{"chlqp" + tag};
  std::optional<PodResolvConf> resolv;
  chl::common::ChildProcess holder;
  chl::test::LauncherRun r;
  std::string skipped;  // why the test cannot run ("" = ready)

  // `vcpus` > 1 with `multiqueue`: networkInterfaceMultiqueue, one queue pair per vCPU.
  // `ipv6`: a dual-stack pod (fd00:77::2/64, node fd00:77::1/64), and `chl.ipv6` for the guest.
  explicit PodFixture(int vcpus = 1, bool multiqueue = false, bool ipv6 = false) {
    if (!runnable()) {
      skipped = "see above";
      return;
    }
    std::string why;
    auto guest = chl::test::find_linux_guest(&why);
    if (!guest) {
      skip(why);
      return;
    }
    r.hypervisor = "qemu-kvm";
    const fs::path kdir = r.dir.path() / "kernel";
    fs::create_directories(kdir);
    fs::copy_file(guest->kernel, kdir / "vmlinuz");
    auto initrd = chl::test::run_command(
        {"bash", (chl::test::source_dir() / "tests/guests/linux/net-initrd.sh").string(),
         guest->kernel.parent_path().string(), (kdir / "initrd.cpio.gz").string()});
    if (initrd.exit_code == 3) {
      skip(initrd.output);
      return;
    }
    REQUIRE_MESSAGE(initrd.exit_code == 0, initrd.output);

    if (auto e = node.create(); !e.empty()) {
      skip("cannot create network namespaces: " + e);
      return;
    }
    REQUIRE(pod.create().empty());
    for (const auto& [ns, args] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {node.name(),
              {"link", "add", "n-eth0", "mtu", "1400", "type", "veth", "peer", "name", "eth0",
               "mtu", "1400", "netns", pod.name()}},
             {node.name(), {"addr", "add", "192.168.77.1/24", "dev", "n-eth0"}},
             {node.name(), {"link", "set", "n-eth0", "up"}},
             {node.name(), {"link", "set", "lo", "up"}},
             {pod.name(), {"addr", "add", "192.168.77.2/24", "dev", "eth0"}},
             {pod.name(), {"link", "set", "eth0", "up"}},
             {pod.name(), {"link", "set", "lo", "up"}},
             {pod.name(), {"route", "add", "default", "via", "192.168.77.1"}},
         }) {
      auto e = tnet::ip(ns, args);
      REQUIRE_MESSAGE(e.empty(), e);
    }
    if (ipv6) {
      for (auto e : {tnet::ip(node.name(), {"addr", "add", "fd00:77::1/64", "dev", "n-eth0", "nodad"}),
                     tnet::ip(pod.name(), {"addr", "add", "fd00:77::2/64", "dev", "eth0", "nodad"}),
                     tnet::ip(pod.name(), {"-6", "route", "add", "default", "via", "fd00:77::1"})})
        REQUIRE_MESSAGE(e.empty(), e);
    }
    std::string nft_error;
    tnet::in_netns(pod.name(), [&] {
      if (auto t = chl::network::nft_list_table(); !t) nft_error = t.error().message();
    });
    if (!nft_error.empty()) {
      skip("nftables not usable in a network namespace here: " + nft_error);
      return;
    }
    resolv.emplace(pod.name(), "nameserver 10.96.0.10\nsearch e2e.svc.cluster.local\n");

    const fs::path ready = r.dir.path() / "holder.ready";
    chl::common::SpawnOptions so;
    so.argv = {*chl::test::tool("ip"), "netns", "exec", pod.name(), "unshare", "--mount",
               "--propagation", "private", "sh", "-c",
               "mount -t tmpfs chl-libvirt /run/libvirt && mkdir -p /run/ch-launcher && "
               "mount -t tmpfs chl-launcher /run/ch-launcher && : > \"$1\" && exec sleep 100000",
               "sh", ready.string()};
    auto h = chl::common::ChildProcess::spawn(so);
    REQUIRE(h);
    holder = std::move(*h);
    REQUIRE_MESSAGE(chl::test::wait_until(10s, [&] { return fs::exists(ready); }, 20ms),
                    "the pod's mount namespace was not set up");
    r.wrapper = {*chl::test::tool("nsenter"),
                 "--mount=/proc/" + std::to_string(holder.pid()) + "/ns/mnt",
                 "--net=/run/netns/" + pod.name(), "--"};

    std::ofstream f(r.vmi_file());
    f << R"(apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: netvm, namespace: default, uid: 5b0c9e2a-0000-4000-8000-0000000000e2}
spec:
  hypervisor: qemu-kvm
  terminationGracePeriodSeconds: 5
  domain:
    cpu: {cores: )" << vcpus << R"(}
    memory: {guest: 256Mi}
    firmware:
      kernelBoot:
        kernelArgs: "console=ttyS0 quiet panic=-1)" << (ipv6 ? " chl.ipv6" : "") << R"("
        container: {image: kernel-boot:latest, kernelPath: /vmlinuz, initrdPath: /initrd.cpio.gz}
    devices:
      autoattachGraphicsDevice: false
      networkInterfaceMultiqueue: )" << (multiqueue ? "true" : "false") << R"(
      interfaces:
      - name: default
        masquerade: {}
        ports: [{port: 8080}]
  networks: [{name: default, pod: {}}]
)";
  }

  void skip(const std::string& why) {
    skipped = why;
    chl::test::skip(why);
  }

  fs::path console_log() const { return r.state_dir() / "virt-serial0-log"; }

  // Start the launcher and wait for the guest's "chl-net: ready"; the console log.
  std::string start_and_wait_ready() {
    r.start({"--accel", "tcg"});
    const bool ready = chl::test::wait_until(
        kStart,
        [&] {
          return chl::test::read_file(console_log()).find("chl-net: ready") != std::string::npos;
        },
        200ms);
    const std::string console = chl::test::read_file(console_log());
    REQUIRE_MESSAGE(ready, "launcher:\n" << r.output() << "\nguest console:\n" << console);
    return console;
  }

  // Exactly the masquerade lease, once, and the gateway answered.
  static void check_lease(const std::string& console) {
    CHECK_MESSAGE(count(console, "chl-net: lease ") == 1, console);
    const std::string lease =
        "chl-net: lease ip=10.0.2.2 subnet=255.255.255.0 router=10.0.2.1 mtu=1400 dns=10.96.0.10";
    const auto at = console.find(lease);
    const bool exact = at != std::string::npos && at + lease.size() < console.size() &&
                       (console[at + lease.size()] == '\r' || console[at + lease.size()] == '\n');
    CHECK_MESSAGE(exact, console);
    CHECK_MESSAGE(console.find("chl-net: gateway ok") != std::string::npos, console);
  }

  // From the node: the forwarded port reaches the guest's listener (retried: the listeners
  // start just before "ready"); 9090, on which the guest listens too, does not.
  void check_ports() {
    std::string back;
    CHECK(chl::test::wait_until(
        60s,
        [&] {
          back.clear();
          return tnet::tcp_connect(node.name(), "192.168.77.2", 8080, 5s, &back) == 0 &&
                 back.find("hello-from-guest") != std::string::npos;
        },
        200ms));
    CHECK_MESSAGE(back.find("hello-from-guest") != std::string::npos, back);
    std::string other;
    const int err = tnet::tcp_connect(node.name(), "192.168.77.2", 9090, 5s, &other);
    CHECK_MESSAGE(other.find("hello-from-guest") == std::string::npos, "port 9090 reached the guest");
    CHECK_MESSAGE(err != 0, "port 9090 accepted a connection");
  }

  std::string nft_table() {
    std::string table = "?";
    tnet::in_netns(pod.name(), [&] {
      auto t = chl::network::nft_list_table();
      table = t ? *t : t.error().message();
    });
    return table;
  }

  // `ch-launcher stop`, the launcher's exit, then nothing left: no bridge, tap or nft table in
  // the pod, no process (launcher, libvirtd, virtlogd, QEMU) in its network namespace but the
  // holder.
  void stop_and_check_clean() {
    // The guest's /init ignores the power button: forced off after the 5 s grace period.
    auto stop = r.cli({"stop"});
    CHECK_MESSAGE(stop.exit_code == 0, stop.output);
    auto exit = r.wait_exit(120s);
    REQUIRE_MESSAGE(exit, r.output());
    CHECK_MESSAGE(exit->exited, r.output());
    // CHL_TEST_SHOW_LAUNCHER=1: the launcher's log even when the test passes.
    if (std::getenv("CHL_TEST_SHOW_LAUNCHER")) MESSAGE("launcher output:\n" << r.output());

    auto links = chl::test::run_command({"ip", "-n", pod.name(), "-o", "link", "show"});
    CHECK_MESSAGE(links.output.find("k6t-") == std::string::npos, links.output);
    CHECK_MESSAGE(links.output.find("tap") == std::string::npos, links.output);
    const std::string table = nft_table();
    CHECK_MESSAGE(table.empty(), table);
    std::vector<long> left;
    auto others = [&] {
      left = chl::test::net::processes_in(pod.name());
      std::erase(left, static_cast<long>(holder.pid()));
      return left.empty();
    };
    CHECK(chl::test::wait_until(20s, others, 100ms));
    CHECK_MESSAGE(left.empty(), describe_processes(left));
  }
};

}  // namespace

TEST_CASE(
    "qemu-kvm run with a masquerade interface: DHCP lease, gateway, forwarded port only, nothing "
    "left") {
  PodFixture p;
  if (!p.skipped.empty()) return;
  const std::string console = p.start_and_wait_ready();
  MESSAGE("guest: " << console.substr(console.find("chl-net:")));

  // The domain XML libvirt got names the wired tap, unmanaged, with the pod's MTU.
  const std::string out = p.r.output();
  CHECK(out.find("<target dev='tap0' managed='no'/>") != std::string::npos);
  CHECK(out.find("<mtu size='1400'/>") != std::string::npos);
  if (auto at = out.find("interface(s) wired in"); at != std::string::npos)
    MESSAGE("launcher: pod network " << out.substr(at, out.find('"', at) - at));

  PodFixture::check_lease(console);
  // The tap is on the bridge while the guest runs.
  auto link = chl::test::run_command({"ip", "-n", p.pod.name(), "-o", "link", "show", "tap0"});
  CHECK_MESSAGE(link.output.find("master k6t-eth0") != std::string::npos, link.output);
  p.check_ports();
  p.stop_and_check_clean();
}

TEST_CASE("qemu-kvm run with networkInterfaceMultiqueue: 2 vCPUs, a 2-queue tap libvirt attaches to, the same lease") {
  PodFixture p(2, true);
  if (!p.skipped.empty()) return;
  const std::string console = p.start_and_wait_ready();
  const std::string out = p.r.output();
  CHECK(out.find("<driver queues='2'/>") != std::string::npos);
  CHECK(out.find("queues 2") != std::string::npos);  // what was wired
  // The tap is multi-queue, and QEMU (through libvirt) holds both queues.
  auto details = chl::test::run_command({"ip", "-n", p.pod.name(), "-d", "link", "show", "tap0"}).output;
  CHECK_MESSAGE(details.find("multi_queue") != std::string::npos, details);
  CHECK_MESSAGE(details.find("numqueues 2") != std::string::npos, details);
  PodFixture::check_lease(console);
  p.check_ports();
  p.stop_and_check_clean();
}

TEST_CASE("qemu-kvm run in a dual-stack pod: the guest finds its IPv6 router from our advertisements and reaches it") {
  PodFixture p(1, false, true);
  if (!p.skipped.empty()) return;
  const std::string console = p.start_and_wait_ready();
  MESSAGE("guest: " << console.substr(console.find("chl-net:")));
  PodFixture::check_lease(console);
  CHECK_MESSAGE(console.find("chl-net: ipv6 router fe80::") != std::string::npos, console);
  CHECK_MESSAGE(console.find("chl-net: ipv6 gateway ok") != std::string::npos, console);
  // From the node over IPv6: the forwarded port reaches the guest (DNAT to fd10:0:2::2).
  std::string back;
  CHECK(chl::test::wait_until(
      30s,
      [&] {
        back.clear();
        return tnet::tcp_connect(p.node.name(), "fd00:77::2", 8080, 5s, &back) == 0 &&
               back.find("hello-from-guest") != std::string::npos;
      },
      200ms));
  CHECK_MESSAGE(back.find("hello-from-guest") != std::string::npos, back);
  p.stop_and_check_clean();
}

TEST_CASE(
    "qemu-kvm run: a launcher killed and started again reuses the pod's bridge, tap and table, "
    "and the guest gets its lease again") {
  PodFixture p;
  if (!p.skipped.empty()) return;
  PodFixture::check_lease(p.start_and_wait_ready());
  auto index_of = [&](const std::string& dev) {
    auto out = chl::test::run_command({"ip", "-n", p.pod.name(), "-o", "link", "show", dev}).output;
    return out.find(':') == std::string::npos ? std::string() : out.substr(0, out.find(':'));
  };
  const std::string bridge_index = index_of("k6t-eth0");
  REQUIRE_FALSE(bridge_index.empty());

  // SIGKILL: no teardown. The bridge, the persistent tap and the table stay; libvirt destroys
  // the AUTODESTROY domain when the launcher's connection drops.
  REQUIRE(p.r.child.kill_and_reap());
  CHECK_MESSAGE(!index_of("tap0").empty(), "the tap went with the launcher");
  fs::rename(p.console_log(), p.r.dir.path() / "first-console.log");

  const std::string console = p.start_and_wait_ready();
  PodFixture::check_lease(console);
  CHECK(index_of("k6t-eth0") == bridge_index);  // reused, not rebuilt
  // The table was replaced, not added to: one masquerade rule, 8080 forwarded once from the pod
  // interface and once from loopback (the pod's own processes), one inbound chain.
  const std::string table = p.nft_table();
  CHECK_MESSAGE(count(table, "masquerade") == 1, table);
  CHECK_MESSAGE(count(table, "tcp dport 8080") == 2, table);
  CHECK_MESSAGE(count(table, "chain inbound_eth0") == 1, table);
  auto links = chl::test::run_command({"ip", "-n", p.pod.name(), "-o", "link", "show"}).output;
  CHECK_MESSAGE(count(links, ": k6t-") == 1, links);
  CHECK_MESSAGE(count(links, ": tap") == 1, links);
  p.check_ports();
  p.stop_and_check_clean();
}

TEST_CASE(
    "qemu-kvm run: a libvirt daemon in another network namespace than the pod's is refused, naming "
    "the taps") {
  if (::geteuid() != 0 || !chl::test::tool("socat") || !chl::test::tool("ip")) {
    chl::test::skip("needs root, socat and ip");
    return;
  }
  const std::string tag = std::to_string(::getpid() % 100000);
  tnet::Netns other("chlqo" + tag);
  if (auto e = other.create(); !e.empty()) {
    chl::test::skip("cannot create a network namespace: " + e);
    return;
  }
  chl::test::TempDir dir("chl-nsd");
  // A stand-in "daemon": whatever listens on the socket is what SO_PEERCRED names.
  auto serve = [&](const std::vector<std::string>& prefix, const fs::path& sock) {
    chl::common::SpawnOptions so;
    so.argv = prefix;
    for (const auto& a :
         {*chl::test::tool("socat"), std::string("UNIX-LISTEN:") + sock.string() + ",fork",
          std::string("SYSTEM:true")})
      so.argv.push_back(a);
    auto c = chl::common::ChildProcess::spawn(so);
    REQUIRE(c);
    REQUIRE(chl::test::wait_until(
        10s, [&] { return chl::libvirt::unix_socket_answers(sock); }, 20ms));
    return std::move(*c);
  };
  auto here = serve({}, dir / "here.sock");
  CHECK(chl::libvirt::check_daemon_network_namespace(dir / "here.sock", {"tap0"}));
  auto there = serve({*chl::test::tool("ip"), "netns", "exec", other.name()}, dir / "there.sock");
  auto st = chl::libvirt::check_daemon_network_namespace(dir / "there.sock", {"tap0", "tap1"});
  REQUIRE_FALSE(st);
  CHECK_MESSAGE(st.error().message().find("another network namespace") != std::string::npos,
                st.error().message());
  CHECK_MESSAGE(st.error().message().find("tap0, tap1") != std::string::npos, st.error().message());
  auto none = chl::libvirt::check_daemon_network_namespace(dir / "absent.sock", {"tap0"});
  CHECK_FALSE(none);
}

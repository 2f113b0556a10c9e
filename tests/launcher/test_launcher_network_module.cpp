// Pod networking is a module (network/network_module.hpp): ch-launcher itself links no
// libnl-route-3 or libnftables, loads libchl-network.so only for a VMI with interfaces, and says
// clearly when the module is missing or broken. Lane vmm: cases run a VM on the double; with
// a pod interface, `run` wires in a child that exits, so the launcher maps none of it either.
#include <unistd.h>

#include <cstdlib>

#include "network/host_namespace.hpp"
#include "network/mac.hpp"
#include "network/nft_ruleset.hpp"
#include "tests/network/netns.hpp"
#include "tests/support/launcher_harness.hpp"
#include "tests/support/module_test_support.hpp"

using chl::test::LauncherRun;
using chl::test::ldd;
using chl::test::ScopedEnv;
namespace fs = std::filesystem;

namespace {

fs::path module_path() { return chl::test::built_module("libchl-network.so"); }

// The harness's VMI plus one masquerade interface on the pod network.
void write_vmi_with_interface(LauncherRun& r) {
  r.write_vmi("console=ttyS0");
  std::ofstream f(r.vmi_file(), std::ios::app);
  f << "      interfaces: [{name: default, masquerade: {}}]\n  networks: [{name: default, pod: {}}]\n";
}

}  // namespace

TEST_CASE("ch-launcher links no libnl, libnftables, libnghttp2 or libprotobuf, the modules next to it do") {
  auto launcher = ldd(chl::test::launcher_binary());
  if (!launcher) return;
  for (const char* lib : {"libnl-", "libnftables", "libnftnl", "libmnl", "libgmp", "libjansson", "libxtables",
                          "libnghttp2", "libprotobuf", "libgrpc"}) {
    CAPTURE(lib);
    CHECK_MESSAGE(launcher->find(lib) == std::string::npos, "ch-launcher links:\n" << *launcher);
  }
  REQUIRE_MESSAGE(fs::exists(module_path()), "no " << module_path() << " (target chl_network_module)");
  auto module = ldd(module_path());
  REQUIRE(module);
  CHECK_MESSAGE(module->find("libnl-route-3.so") != std::string::npos, "libchl-network.so links:\n" << *module);
  CHECK_MESSAGE(module->find("libnftables.so") != std::string::npos, "libchl-network.so links:\n" << *module);
  // The module takes the launcher's own code from the executable: it must not carry a copy.
  CHECK_MESSAGE(module->find("libchl") == std::string::npos, *module);
  // KubeVirt's protocol (virt-launcher mode) is libchl-kubevirt.so: HTTP/2 and protobuf-lite.
  const auto kubevirt = fs::path(chl::test::launcher_binary()).parent_path() / "libchl-kubevirt.so";
  REQUIRE_MESSAGE(fs::exists(kubevirt), "no " << kubevirt << " (target chl_kubevirt_module)");
  auto kv = ldd(kubevirt);
  REQUIRE(kv);
  CHECK_MESSAGE(kv->find("libnghttp2.so") != std::string::npos, *kv);
  CHECK_MESSAGE(kv->find("libprotobuf-lite.so") != std::string::npos, *kv);
  CHECK_MESSAGE(kv->find("libgrpc") == std::string::npos, *kv);
}

TEST_CASE("a VMI without interfaces runs without the network module and never maps its libraries") {
  if (!chl::test::needs_cooperative_guest()) return;  // ends with a graceful stop
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  ScopedEnv env("CHL_NETWORK_MODULE", (r.dir.path() / "nowhere" / "libchl-network.so").string());
  r.start();
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  const std::string maps = chl::test::read_file("/proc/" + std::to_string(r.child.pid()) + "/maps");
  CHECK_MESSAGE(maps.find("libchl-network") == std::string::npos, maps);
  CHECK_MESSAGE(maps.find("libnl-") == std::string::npos, maps);
  CHECK_MESSAGE(maps.find("libnftables") == std::string::npos, maps);
  auto stop = r.cli({"stop"});
  CHECK_MESSAGE(stop.exit_code == 0, stop.output);
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK_MESSAGE(exit->code == 0, exit->describe() << "\n" << r.output());
}

TEST_CASE("a VMI with an interface and CHL_NETWORK_MODULE naming a missing file: exit 1, says what to do") {
  LauncherRun r;
  write_vmi_with_interface(r);
  auto missing = r.dir.path() / "nowhere" / "libchl-network.so";
  ScopedEnv env("CHL_NETWORK_MODULE", missing.string());
  r.start();
  auto exit = r.wait_exit();
  REQUIRE_MESSAGE(exit, "the launcher did not exit; output:\n" << r.output());
  CHECK(exit->exited);
  CHECK_MESSAGE(exit->code == 1, exit->describe() << "\n" << r.output());
  const std::string want =
      "pod network: pod networking support is not installed: libchl-network.so not found at " + missing.string();
  CHECK_MESSAGE(r.output().find(want) != std::string::npos, r.output());
  CHECK_MESSAGE(r.output().find("CHL_NETWORK_MODULE") != std::string::npos, r.output());
  // Nothing was started: no VMM pid recorded, no sockets left.
  r.check_clean(0);
}

TEST_CASE("network plan with a module that is not a shared library: exit 1 with dlopen's reason") {
  LauncherRun r;
  write_vmi_with_interface(r);
  auto broken = r.dir.path() / "libchl-network.so";
  chl::test::write_file(broken, "not an ELF file\n");
  ScopedEnv env("CHL_NETWORK_MODULE", r.dir.path().string());  // a directory holding the module works too
  auto out = chl::test::run_command({chl::test::launcher_binary(), "network", "plan", "--vmi", r.vmi_file().string()});
  CHECK_MESSAGE(out.exit_code == 1, out.output);
  CHECK_MESSAGE(out.output.find("pod networking support is broken: loading " + broken.string() + ": ") !=
                    std::string::npos,
                out.output);
}

TEST_CASE("network plan loads the module beside the launcher") {
  LauncherRun r;
  write_vmi_with_interface(r);
  ::unsetenv("CHL_NETWORK_MODULE");
  // Planning reads this namespace's links (no change, no privilege needed); the pod interface
  // `eth0` may not exist here, which plan reports as a refusal: either way the module ran.
  auto out = chl::test::run_command({chl::test::launcher_binary(), "network", "plan", "--vmi", r.vmi_file().string(),
                                     "--resolv-conf", ""});
  CHECK_MESSAGE(out.output.find("pod networking support is") == std::string::npos, out.output);
  if (out.exit_code == 0) CHECK_MESSAGE(out.output.find("default: masquerade") != std::string::npos, out.output);
  else CHECK_MESSAGE(out.output.find("default") != std::string::npos, out.output);
}

TEST_CASE("run refuses to wire a VMI's interfaces in the host's own network namespace, naming the ways out") {
  if (!chl::network::in_host_network_namespace()) {
    chl::test::skip("this test runs in a network namespace of its own, not the host's");
    return;
  }
  LauncherRun r;
  write_vmi_with_interface(r);
  auto links_before = chl::test::run_command({"ip", "-o", "link"});
  r.start();
  auto exit = r.wait_exit();
  REQUIRE_MESSAGE(exit, "the launcher did not exit; output:\n" << r.output());
  CHECK_MESSAGE(exit->code == 1, exit->describe() << "\n" << r.output());
  CHECK_MESSAGE(r.output().find("this is the host's own network namespace") != std::string::npos, r.output());
  CHECK(r.output().find("autoattachPodInterface: false") != std::string::npos);
  CHECK(r.output().find("--allow-host-network") != std::string::npos);
  // Nothing was wired or started.
  auto links_after = chl::test::run_command({"ip", "-o", "link"});
  CHECK(links_after.output.find("k6t-") == std::string::npos);
  r.check_clean(0);
}

namespace {

// `ch-launcher run` of `r`'s VMI in a pod made of network namespaces (eth0 10.244.0.5/24, a
// veth to a node at 10.244.0.1, the default route through it); a guest stand-in (a veth on the
// bridge with the guest's MAC) asks for a lease. Checks that the launcher maps nothing of the
// wiring once the VM runs, that the stand-in gets `want_ip` from `want_server`, and that the
// launcher's teardown (under its seccomp filter, without the module) leaves the pod as it was.
void run_in_pod(LauncherRun& r, const std::string& want_ip, const std::string& want_server) {
  if (::geteuid() != 0) {
    chl::test::skip("needs root: network namespaces, and the launcher wires the pod");
    return;
  }
  using chl::test::net::ip;
  const std::string tag = "chlm" + std::to_string(::getpid() % 100000);
  chl::test::net::Netns node(tag + "n"), pod(tag + "p"), guest(tag + "g");
  for (auto* ns : {&node, &pod, &guest})
    if (auto why = ns->create(); !why.empty()) {
      chl::test::skip("cannot make network namespaces here: " + why);
      return;
    }
  for (const auto& e : {ip(node.name(), {"link", "add", "n-eth0", "type", "veth", "peer", "name", "eth0", "netns", pod.name()}),
                        ip(node.name(), {"addr", "add", "10.244.0.1/24", "dev", "n-eth0"}),
                        ip(node.name(), {"link", "set", "n-eth0", "up"}),
                        ip(pod.name(), {"addr", "add", "10.244.0.5/24", "dev", "eth0"}),
                        ip(pod.name(), {"link", "set", "eth0", "up"}),
                        ip(pod.name(), {"link", "set", "lo", "up"}),
                        ip(pod.name(), {"route", "add", "default", "via", "10.244.0.1"})})
    REQUIRE_MESSAGE(e.empty(), e);
  const auto addrs_before = chl::test::run_command({"ip", "-n", pod.name(), "-4", "-o", "addr", "show", "dev", "eth0"});
  const auto routes_before = chl::test::run_command({"ip", "-n", pod.name(), "-4", "route"});

  const auto ip_tool = chl::common::find_program("ip");
  REQUIRE(ip_tool);
  r.wrapper = {*ip_tool, "netns", "exec", pod.name()};
  r.start();
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  CHECK_MESSAGE(r.output().find("pod network: 1 interface(s) wired") != std::string::npos, r.output());

  // The launcher (ip netns exec execs it: same pid) maps nothing of the wiring.
  const std::string maps = chl::test::read_file("/proc/" + std::to_string(r.child.pid()) + "/maps");
  REQUIRE(maps.find("ch-launcher") != std::string::npos);
  for (const char* lib : {"libchl-network", "libnl-route", "libnl-3", "libnftables", "libnftnl"}) {
    CAPTURE(lib);
    CHECK_MESSAGE(maps.find(lib) == std::string::npos, maps);
  }
  // What the child wired is there, and the launcher serves it.
  auto links = chl::test::run_command({"ip", "-n", pod.name(), "-o", "link"});
  CHECK_MESSAGE(links.output.find("k6t-eth0") != std::string::npos, links.output);
  CHECK_MESSAGE(links.output.find("tap0") != std::string::npos, links.output);
  if (::access("/bin/busybox", X_OK) == 0) {
    const auto mac = chl::network::generated_mac("6a1f3c2e-0000-4000-8000-00000000abcd", "default");
    for (const auto& e : {ip(pod.name(), {"link", "add", "gst0", "type", "veth", "peer", "name", "eth0", "netns", guest.name()}),
                          ip(pod.name(), {"link", "set", "gst0", "master", "k6t-eth0", "up"}),
                          ip(guest.name(), {"link", "set", "eth0", "address", chl::network::format_mac(mac), "up"})})
      REQUIRE_MESSAGE(e.empty(), e);
    std::string log;
    auto lease = chl::test::net::run_udhcpc(guest.name(), r.dir, log);
    INFO(log);
    CHECK(lease["ip"] == want_ip);
    CHECK(lease["router"] == (want_ip == "10.0.2.2" ? "10.0.2.1" : "10.244.0.1"));
    CHECK(lease["serverid"] == want_server);
    (void)ip(pod.name(), {"link", "del", "gst0"});
  } else {
    MESSAGE("busybox (busybox-static) not installed: the lease is not checked");
  }

  // Teardown at exit, under the launcher's seccomp filter, without the module: no bridge, no
  // tap, no table, and eth0 as it was (a bridge binding gives its address and routes back).
  auto kill = r.cli({"kill"});
  CHECK_MESSAGE(kill.exit_code == 0, kill.output);
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK_MESSAGE(exit->code == 4, exit->describe() << "\n" << r.output());
  CHECK_MESSAGE(r.output().find("network teardown") == std::string::npos, r.output());
  links = chl::test::run_command({"ip", "-n", pod.name(), "-o", "link"});
  CHECK_MESSAGE(links.output.find("k6t-") == std::string::npos, links.output);
  CHECK_MESSAGE(links.output.find("tap0") == std::string::npos, links.output);
  CHECK(chl::test::run_command({"ip", "-n", pod.name(), "-4", "-o", "addr", "show", "dev", "eth0"}).output ==
        addrs_before.output);
  CHECK(chl::test::run_command({"ip", "-n", pod.name(), "-4", "route"}).output == routes_before.output);
  chl::test::net::in_netns(pod.name(), [] { CHECK(chl::network::nft_list_table().value_or("x").empty()); });
  r.check_clean(0);
}

}  // namespace

TEST_CASE("run with a masquerade interface in a pod's namespace: no wiring library mapped once the VM runs, the "
          "guest's lease served, nothing left after") {
  LauncherRun r;
  write_vmi_with_interface(r);
  run_in_pod(r, "10.0.2.2", "10.0.2.1");
}

TEST_CASE("run with KubeVirt's default pod interface (bridge binding) in a pod's namespace: no wiring library "
          "mapped, the pod's address leased to the guest, eth0 given back after") {
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  // KubeVirt's defaulting (vmi/defaults.cpp: the cluster default binding, bridge): without
  // autoattachPodInterface: false the VMI gets an interface "default" on the pod network.
  std::string text = chl::test::read_file(r.vmi_file());
  const std::string line = "      autoattachPodInterface: false\n";
  REQUIRE(text.find(line) != std::string::npos);
  text.replace(text.find(line), line.size(), "      autoattachSerialConsole: true\n");
  chl::test::write_file(r.vmi_file(), text);
  run_in_pod(r, "10.244.0.5", "169.254.75.10");
}

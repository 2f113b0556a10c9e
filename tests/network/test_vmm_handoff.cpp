// network -> VMM: the taps of a wired interface reach the VMM with vm.add-net (SCM_RIGHTS);
// the VMM holds one fd per queue pair, each attached to tap0 (the kernel's tun driver says so
// in /proc/<pid>/fdinfo/<fd>: `iff:\ttap0`), and vm.info carries the NIC's config. CH v52 does
// not name a tap given by fds in vm.info (vmm/src/vm_config.rs NetConfig.tap defaults to None
// and only a tap by name sets it); the VMM double checks each fd is a tap (TUNGETIFF) and
// reports its name there. The wiring runs in a namespace of its own with a veth eth0 standing
// in for the pod interface.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "vmi/parser.hpp"
#include "common/child_process.hpp"
#include "network/vmm_handoff.hpp"
#include "tests/network/netns.hpp"
#include "tests/support/test_support.hpp"
#include "vmm_api/client.hpp"

using namespace chl::network;
using namespace std::chrono_literals;

TEST_CASE("vmm handoff: a multiqueue tap's fds go to the VMM with vm.add-net, which sees tap0") {
  if (::geteuid() != 0 || !chl::test::tool("ip")) {
    chl::test::skip("needs root and iproute2 (a network namespace for the taps)");
    return;
  }
  chl::test::net::Netns pod("chl" + std::to_string(::getpid()) + "h");
  if (auto e = pod.create(); !e.empty()) {
    chl::test::skip(e);
    return;
  }
  REQUIRE(chl::test::net::ip(pod.name(), {"link", "add", "eth0", "mtu", "1450", "type", "veth", "peer", "name", "eth0p"}) == "");
  auto parsed = chl::vmi::parse_vmi(R"(apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: vm1, uid: 77-88}
spec:
  domain:
    memory: {guest: 64Mi}
    devices:
      networkInterfaceMultiqueue: true
      interfaces: [{name: default, masquerade: {}}]
  networks: [{name: default, pod: {}}]
)");
  REQUIRE(parsed.problems.empty());
  std::unique_ptr<WiredNetwork> wired;
  chl::test::net::in_netns(pod.name(), [&] {
    auto facts = discover_pod("");
    REQUIRE(facts);
    auto plan = plan_networks(parsed.vmi, *facts, 2);
    REQUIRE(plan.refusals.empty());
    auto w = wire_pod_network(plan.plans, nullptr);
    REQUIRE_MESSAGE(w, w.error().message());
    wired = std::move(*w);
  });
  auto& wi = wired->interfaces().at(0);
  REQUIRE(wi.tap_fds.size() == 2);

  chl::test::TempDir dir("chlvh");
  const std::string api = (dir / "api.sock").string();
  chl::common::SpawnOptions so;
  so.argv = {chl::test::vmm_binary(), "--api-socket", "path=" + api};
  chl::common::UniqueFd log(::open((dir / "vmm.log").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  so.stdout_fd = so.stderr_fd = log.get();
  auto vmm = chl::common::ChildProcess::spawn(so);
  REQUIRE(vmm);
  chl::vmm_api::Client client(api);
  REQUIRE(chl::test::wait_until(10s, [&] { return client.vmm_ping().has_value(); }));
  chl::test::write_file(dir / "kernel", "the double only reads it");
  chl::vmm_api::VmConfig c;
  c.payload.kernel = (dir / "kernel").string();
  c.cpus = chl::vmm_api::CpusConfig{};
  c.cpus->boot_vcpus = 2;
  c.cpus->max_vcpus = 2;
  c.memory = chl::vmm_api::MemoryConfig{};
  c.memory->size = 64ull << 20;
  REQUIRE(client.vm_create(c));
  auto added = client.vm_add_net(ch_net_config(wi), tap_fd_numbers(wi));
  REQUIRE_MESSAGE(added, (added ? "" : added.error().message() + "\n" + chl::test::read_file(dir / "vmm.log")));
  auto info = client.vm_info();
  REQUIRE(info);
  REQUIRE(info->config.net);
  const auto& net = info->config.net->at(0);
  if (chl::test::using_real_vmm())
    CHECK_FALSE(net.tap.has_value());
  else
    CHECK(net.tap.value_or("") == "tap0");
  // What the VMM process holds: both queue pairs' fds on tap0, read from the kernel.
  int on_tap0 = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(vmm->pid()) + "/fdinfo"))
    if (chl::test::read_file(e.path()).find("iff:\ttap0\n") != std::string::npos) ++on_tap0;
  CHECK(on_tap0 == 2);
  CHECK(net.mac.value_or("") == format_mac(wi.mac));
  CHECK(net.num_queues.value_or(0) == 4);
  CHECK_FALSE(net.mtu.has_value());  // the tap has it; CH would need CAP_NET_ADMIN to set it
  CHECK(net.id.value_or("") == "net-default");

  const std::string xml = libvirt_interface_xml(wi, "");
  CHECK(xml.find("<target dev='tap0' managed='no'/>") != std::string::npos);
  CHECK(xml.find("<driver queues='2'/>") != std::string::npos);
  CHECK(xml.find("<alias name='ua-default'/>") != std::string::npos);

  chl::test::net::in_netns(pod.name(), [&] {
    CHECK(wired->teardown());
    wired.reset();
  });
}

// virt-launcher mode and the pod network as KubeVirt wires it (test_virt_launcher.cpp says how
// these are built and run): virt-handler's phase 1 missing or done, and a real guest's lease
// through phase 2 on the libvirt path.
#include <functional>

#include "tests/kubevirt/virt_launcher_harness.hpp"

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): a pod network without virt-handler's phase 1 — Sync answers success:false naming it, the wiring module is never loaded, the launcher keeps serving") {
  PodNetns pn;
  if (auto why = pn.up(); !why.empty()) {
    chl::test::skip(why);
    return;
  }
  const std::string ns = pn.ns.name();
  const std::string links_before = chl::test::run_command({"ip", "-n", ns, "-o", "link", "show"}).output;
  Pod pod;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  auto cmd = pn.start(pod);
  auto vmi = vmi_with_nic();
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_FALSE(r.success());
  CHECK_MESSAGE(r.message().find("interface default: bridge k6t-eth0 is missing (phase 1 creates it") != std::string::npos,
                r.message() << "\n" << pod.output());
  // Still serving; phase 2 never loaded the wiring libraries and changed no link.
  v1::EmptyRequest empty;
  v1::DomainResponse dom;
  CHECK(call([&](auto& c) { return cmd->GetDomain(&c, empty, &dom); }).ok());
  const std::string maps = chl::test::read_file("/proc/" + std::to_string(pod.child.pid()) + "/maps");
  CHECK_MESSAGE(maps.find("libchl-network") == std::string::npos, maps);
  CHECK_MESSAGE(maps.find("libnl-route") == std::string::npos, maps);
  CHECK_MESSAGE(maps.find("libnftables") == std::string::npos, maps);
  CHECK(chl::test::run_command({"ip", "-n", ns, "-o", "link", "show"}).output == links_before);
  (void)pod.child.signal(SIGTERM);
  auto st = pod.child.wait_for(30s);
  REQUIRE(st);
  CHECK(*st);
}

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): after virt-handler's phase 1 the launcher does phase 2 only — Sync succeeds with a masquerade NIC, the namespace is as phase 1 left it after shutdown") {
  PodNetns pn;
  if (auto why = pn.up(); !why.empty()) {
    chl::test::skip(why);
    return;
  }
  const std::string ns = pn.ns.name();
  chl::test::net::Phase1 p1{ns};
  const auto e = chl::test::net::kubevirt_phase1_masquerade(p1);
  REQUIRE_MESSAGE(e.empty(), e);
  const auto before = chl::test::net::netns_snapshot(ns);
  Pod pod;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  auto cmd = pn.start(pod);
  auto vmi = vmi_with_nic();
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  REQUIRE_MESSAGE(chl::test::wait_until(10s, [&] { return has_state(notify, "MODIFIED Running/Unknown"); }), pod.output());
  CHECK_MESSAGE(pod.output().find("interface default attached (phase 2): tap tap0 mac 02:00:00:aa:bb:cc") != std::string::npos,
                pod.output());
  const std::string proc = "/proc/" + std::to_string(pod.child.pid());
  const std::string maps = chl::test::read_file(proc + "/maps");
  CHECK_MESSAGE(maps.find("libchl-network") == std::string::npos, maps);
  CHECK_MESSAGE(maps.find("libnl-route") == std::string::npos, maps);
  CHECK_MESSAGE(maps.find("libnftables") == std::string::npos, maps);
  std::istringstream status(chl::test::read_file(proc + "/status"));
  for (std::string l; std::getline(status, l);)
    if (l.rfind("VmRSS:", 0) == 0) MESSAGE("launcher RSS in virt-launcher mode, pod network, VM running: " << l);

  REQUIRE(call([&](auto& c) { return cmd->ShutdownVirtualMachine(&c, vmi, &r); }).ok());
  auto st = pod.child.wait_for(60s);
  REQUIRE(st);
  REQUIRE(*st);
  // On the libvirt path, libvirt sets the tap's root qdisc to noqueue when QEMU gets it (it
  // does so under KubeVirt's own virt-launcher too): that one change is libvirt's, not ours.
  const auto without_qdisc = [](const std::string& snap) {
    return kQemu ? std::regex_replace(snap, std::regex(R"(qdisc \S+)"), "qdisc") : snap;
  };
  CHECK(without_qdisc(chl::test::net::netns_snapshot(ns)) == without_qdisc(before));
}

namespace {

// The Linux test guest through the KubeVirt protocol on the libvirt path, after virt-handler's
// phase 1 for `binding` ("masquerade" or "bridge"; `ipv6`: a dual-stack pod and the guest's
// chl.ipv6): its console once it is ready ("" when skipped).
std::string real_guest_console(const std::string& binding, bool ipv6 = false,
                               const std::function<void(const std::string& ns)>& while_ready = {}) {
  if (!chl::test::libvirt_runnable()) return "";  // says why
  std::string why;
  auto guest = chl::test::find_linux_guest(&why);
  if (!guest) {
    chl::test::skip(why);
    return "";
  }
  PodNetns pn;
  if (auto w = pn.up(); !w.empty()) {
    chl::test::skip(w);
    return "";
  }
  Pod pod;
  chl::test::net::Phase1 p1{pn.ns.name()};
  if (binding == "bridge") {
    // The pod's interface as CNI made it (its MAC is the guest's: the VMI sets it here).
    const chl::test::net::PodIface iface{"02:00:00:aa:bb:cc", "10.244.0.5/24", "10.244.0.1"};
    REQUIRE(chl::test::net::ip(pn.ns.name(), {"link", "set", "eth0", "address", iface.mac}) == "");
    fs::create_directories(pod.priv());
    const auto e = chl::test::net::kubevirt_phase1_bridge(p1, iface, pod.priv().string());
    REQUIRE_MESSAGE(e.empty(), e);
  } else {
    if (ipv6) {
      REQUIRE(chl::test::net::ip(pn.ns.name(), {"addr", "add", "fd00:10:244::5/64", "dev", "eth0", "nodad"}) == "");
      p1.ipv6 = true;
    }
    const auto e = chl::test::net::kubevirt_phase1_masquerade(p1);
    REQUIRE_MESSAGE(e.empty(), e);
  }
  // The kernel-boot "container": the Linux guest's kernel and its networking initramfs.
  const auto kb = pod.cdisks() / "kernel-boot";
  fs::create_directories(kb);
  fs::copy_file(guest->kernel, kb / "vmlinuz");
  auto initrd = chl::test::run_command({"bash", (chl::test::source_dir() / "tests/guests/linux/net-initrd.sh").string(),
                                        guest->kernel.parent_path().string(), (kb / "initrd.cpio.gz").string()});
  if (initrd.exit_code == 3) {
    chl::test::skip(initrd.output);
    return "";
  }
  REQUIRE_MESSAGE(initrd.exit_code == 0, initrd.output);
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  auto cmd = pn.start(pod);
  auto j = nlohmann::json::parse(vmi_json());
  j["spec"]["domain"]["memory"]["guest"] = "256Mi";
  j["status"]["memory"] = {{"guestAtBoot", "256Mi"}, {"guestCurrent", "256Mi"}, {"guestRequested", "256Mi"}};
  j["spec"]["domain"]["firmware"]["kernelBoot"] = {
      {"kernelArgs", ipv6 ? "console=ttyS0 quiet panic=-1 chl.ipv6" : "console=ttyS0 quiet panic=-1"},
      {"container", {{"image", "registry.example/linux:1"}, {"kernelPath", "/vmlinuz"}, {"initrdPath", "/initrd.cpio.gz"}}}};
  j["spec"]["domain"]["devices"]["interfaces"] =
      nlohmann::json::parse(R"([{"name": "default", "macAddress": "02:00:00:aa:bb:cc"}])");
  j["spec"]["domain"]["devices"]["interfaces"][0][binding] = nlohmann::json::object();
  j["spec"]["networks"] = nlohmann::json::parse(R"([{"name": "default", "pod": {}}])");
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(j.dump());
  (*vmi.mutable_options()->mutable_interfacedomainattachment())["default"] = "tap";  // as virt-handler sends it
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }, 120s).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  // virtctl console's way in: the guest's lease, printed by its /init.
  const auto console = pod.priv() / kUid / "virt-serial0";
  REQUIRE(chl::test::wait_until(30s, [&] { return fs::exists(console); }));
  const std::string got = chl::test::read_socket_until(console, "chl-net: ready", 180s);
  if (while_ready && got.find("chl-net: ready") != std::string::npos) while_ready(pn.ns.name());
  REQUIRE(call([&](auto& c) { return cmd->KillVirtualMachine(&c, vmi, &r); }).ok());
  auto st = pod.child.wait_for(60s);
  REQUIRE(st);
  REQUIRE(*st);
  return got;
}

}  // namespace

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): a real guest gets its masquerade lease through phase 2 — the Linux test guest's udhcpc, the gateway answers") {
  if (!kQemu) return;  // a real guest needs a real VMM: the libvirt path (QEMU, TCG here)
  std::string forwarded;
  const std::string got = real_guest_console("masquerade", false, [&forwarded](const std::string& ns) {
    // A connection in the pod to a port of its own (virt-handler's output-chain DNAT of loopback,
    // KubeVirt's rule for sidecars) reaches the guest's listener through the tap.
    forwarded = chl::test::run_command({"ip", "netns", "exec", ns, "sh", "-c", "echo | busybox nc -w 5 127.0.0.1 8080"}).output;
  });
  if (got.empty()) return;  // skipped, saying why
  CHECK_MESSAGE(forwarded.find("hello-from-guest") != std::string::npos, forwarded);
  CHECK_MESSAGE(got.find("chl-net: lease ip=10.0.2.2 subnet=255.255.255.0 router=10.0.2.1 mtu=1500") != std::string::npos, got);
  CHECK_MESSAGE(got.find("chl-net: gateway ok") != std::string::npos, got);
}

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): a real guest on a dual-stack pod reaches its IPv6 masquerade gateway through phase 2") {
  if (!kQemu) return;
  const std::string got = real_guest_console("masquerade", true);
  if (got.empty()) return;
  CHECK_MESSAGE(got.find("chl-net: lease ip=10.0.2.2") != std::string::npos, got);
  // KubeVirt's static fd10:0:2::2/120 in the guest (busybox has no DHCPv6 client), fd10:0:2::1
  // on phase 1's bridge answers.
  CHECK_MESSAGE(got.find("chl-net: ipv6 gateway ok") != std::string::npos, got);
}

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): a real guest gets the pod's address over bridge binding through phase 2 — from virt-handler's DHCP cache") {
  if (!kQemu) return;
  const std::string got = real_guest_console("bridge");
  if (got.empty()) return;
  CHECK_MESSAGE(got.find("chl-net: lease ip=10.244.0.5 subnet=255.255.255.0 router=10.244.0.1 mtu=1500") != std::string::npos, got);
}


// virt-launcher mode and the pod network as KubeVirt wires it (test_virt_launcher.cpp says how
// these are built and run): virt-handler's phase 1 missing or done, and a real guest's lease
// through phase 2 on the libvirt path.
#include <sys/stat.h>

#include <atomic>
#include <functional>
#include <thread>

#include "tests/kubevirt/virt_launcher_harness.hpp"
#include "tests/support/real_vmm_limits.hpp"

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): a pod network without virt-handler's phase 1 — Sync answers success:false naming it, the wiring module is never loaded, the launcher keeps serving") {
  PodNetns pn;
  if (!pn.up_or_skip()) return;
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
  if (!pn.up_or_skip()) return;
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
  REQUIRE_MESSAGE(chl::test::wait_until(30s, [&] { return reported_running(notify); }), states_text(notify) << "\n" << pod.output());
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
  // The guest powers off (or, if it does not within 20 s, is killed); then DeleteDomain.
  (void)chl::test::wait_until(20s, [&] { return has_state(notify, "MODIFIED Shutoff/Shutdown"); });
  kill_and_delete(*cmd, vmi);
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

// KubeVirt's non-root launcher on Cloud Hypervisor: uid 107, no capability, after virt-handler's
// phase 1. CH v52 makes the virtio-net device from the tap fds with TUNGETIFF, TUNSETIFF and
// TUNSETVNETHDRSZ (no privilege needed on a tap owned by 107) and would set the tap's MTU
// (SIOCSIFMTU, CAP_NET_ADMIN) if the net config had one: the launcher gives none, so the boot
// works. The VMM double issues the same ioctls (tests/vmm_double/tap_device.cpp), so a launcher
// that sent `mtu` fails here as on a real CH (issue 29 item 2).
TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR
          "): the launcher as uid 107 without capabilities boots on virt-handler's tap, and the "
          "VMM runs as 107 too") {
  if (kQemu) return;  // the libvirt path as uid 107: the real-guest cases below
  PodNetns pn;
  if (!pn.up_or_skip()) return;
  const std::string ns = pn.ns.name();
  chl::test::net::Phase1 p1{ns};
  const auto e = chl::test::net::kubevirt_phase1_masquerade(p1);
  REQUIRE_MESSAGE(e.empty(), e);
  const auto before = chl::test::net::netns_snapshot(ns);
  Pod pod;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  std::unique_ptr<v1::Cmd::Stub> cmd;
  if (auto w = pn.start_non_root(pod, cmd); !w.empty()) {
    chl::test::skip(w);
    return;
  }
  auto vmi = vmi_with_nic();
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  REQUIRE_MESSAGE(
      chl::test::wait_until(30s, [&] { return reported_running(notify); }),
      states_text(notify) << "\n" << pod.output());
  const std::string none = "0000000000000000";
  const std::string want = "Uid=107,107,107,107 Gid=107,107,107,107 CapPrm=" + none +
                           " CapEff=" + none + " CapBnd=" + none + " CapAmb=" + none +
                           " NoNewPrivs=1";
  std::vector<std::string> procs;
  for (long p : chl::test::net::processes_in(ns)) {
    std::string comm = chl::test::read_file("/proc/" + std::to_string(p) + "/comm");
    if (!comm.empty() && comm.back() == '\n') comm.pop_back();
    procs.push_back(comm + ": " + credentials(p));
  }
  CHECK_MESSAGE(procs.size() >= 2, procs.size());  // the launcher and its VMM
  for (const auto& p : procs) CHECK_MESSAGE(p.find(want) != std::string::npos, p);
  kill_and_delete(*cmd, vmi);  // as virt-handler ends it (without DeleteDomain the launcher waits 45 s)
  auto st = pod.child.wait_for(60s);
  REQUIRE(st);
  CHECK_MESSAGE(*st, pod.output());
  (void)chl::test::wait_until(15s, [&] { return chl::test::net::processes_in(ns).empty(); });
  CHECK(chl::test::net::processes_in(ns).empty());
  CHECK(chl::test::net::netns_snapshot(ns) == before);
}

// Issue 29: virt-handler's netstat.go reads every domain interface's Alias and MAC without a nil
// check, keys the pod-cache IP by the alias, and guest-agent entries match the MAC exactly. A VMI
// with a masquerade interface on the pod network (no macAddress: KubeVirt's default) and a bridge
// one on a Multus network (an uppercase macAddress): every event and GetDomain read as
// virt-handler reads them (go_domain.hpp), each interface by its VMI name with the MAC the VMM
// gave the guest NIC, on the tap phase 1 made, and the pod's address in the derived status.
TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR
          "): a masquerade and a bridge interface — the domain names each by its VMI interface "
          "with the guest NIC's MAC on phase 1's tap, virt-handler derives MAC and IP") {
  PodNetns pn;
  if (!pn.up_or_skip()) return;
  const std::string ns = pn.ns.name();
  // The Multus network's pod interface as CNI made it (an older pod's ordinal name, net1).
  for (auto e :
       {chl::test::net::ip(ns, {"link", "add", "net1", "type", "veth", "peer", "name", "peer1"}),
        chl::test::net::ip(ns, {"link", "set", "net1", "up"})})
    REQUIRE_MESSAGE(e.empty(), e);
  Pod pod;
  fs::create_directories(pod.priv());
  chl::test::net::Phase1 masq{ns};
  auto e = chl::test::net::kubevirt_phase1_masquerade(masq);
  REQUIRE_MESSAGE(e.empty(), e);
  chl::test::net::Phase1 bridge{ns};
  bridge.pod_iface = "net1";
  e = chl::test::net::kubevirt_phase1_bridge(
      bridge, {"02:00:00:aa:bb:01", "192.168.77.2/24", "192.168.77.1"}, pod.priv().string());
  REQUIRE_MESSAGE(e.empty(), e);

  auto j = nlohmann::json::parse(vmi_json());
  j["spec"]["domain"]["devices"]["interfaces"] = nlohmann::json::parse(
      R"([{"name": "default", "masquerade": {}}, {"name": "storage", "bridge": {}, "macAddress": "02:00:00:AA:BB:01"}])");
  j["spec"]["networks"] = nlohmann::json::parse(
      R"([{"name": "default", "pod": {}}, {"name": "storage", "multus": {"networkName": "storage-net"}}])");
  // The VMI as virt-handler has it, with the pod-interface cache its phase 1 wrote
  // (netpod/discover.go:106-137: the pod interfaces' addresses before phase 1 moved them).
  auto handler_vmi = chl::test::HandlerVmi::from_vmi_json(j);
  handler_vmi.pod_ips = {{"default", {"10.244.0.5"}}, {"storage", {"192.168.77.2"}}};
  CHECK(handler_vmi.guest_macs["storage"] == "02:00:00:aa:bb:01");
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  notify.expect_vmi(handler_vmi);
  auto cmd = pn.start(pod);
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(j.dump());
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }, 120s).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  REQUIRE_MESSAGE(
      chl::test::wait_until(30s, [&] { return reported_running(notify); }),
      states_text(notify) << "\n" << pod.output());

  // The guest NICs' MACs as the VMM has them (`ch-launcher status`: CH's vm.info, libvirt's live
  // XML).
  std::map<std::string, std::string> vmm_mac;
  nlohmann::json st;
  const bool has_info = chl::test::wait_until(10s, [&] {  // once the VMM's boot call has returned
    st = pod.status();
    return st.is_object() && st.contains("info");
  });
  REQUIRE_MESSAGE(has_info, pod.status_text() << "\n" << pod.output());
  for (const auto& n : st["info"]["config"].value("net", nlohmann::json::array())) {
    std::string id = n.value("id", "");
    if (id.rfind("net-", 0) == 0) id.erase(0, 4);
    vmm_mac[id] = n.value("mac", "");
  }
  REQUIRE_MESSAGE(vmm_mac.count("default"), st.dump());
  CHECK(vmm_mac["storage"] == "02:00:00:aa:bb:01");
  handler_vmi.guest_macs["default"] =
      vmm_mac["default"];  // lowercase already, or the reader says so
  notify.expect_vmi(handler_vmi);

  std::string text;
  const auto read = get_domain(*cmd, handler_vmi, &text);
  REQUIRE(read.status.synced);
  const auto* def = read.status.interface("default");
  const auto* sto = read.status.interface("storage");
  REQUIRE(def);
  REQUIRE(sto);
  CHECK(def->mac == vmm_mac["default"]);
  CHECK(def->ip == "10.244.0.5");
  CHECK(sto->mac == "02:00:00:aa:bb:01");
  CHECK(sto->ip == "192.168.77.2");
  CHECK(read.status.interfaces.front().name == "default");
  const auto doc = nlohmann::json::parse(text);
  const auto& ifaces = doc["Spec"]["Devices"]["Interfaces"];
  REQUIRE(ifaces.size() == 2);
  CHECK(ifaces[0]["Alias"] == nlohmann::json({{"Name", "default"}, {"UserDefined", true}}));
  CHECK(ifaces[0]["Target"] == nlohmann::json({{"Device", "tap0"}, {"Managed", "no"}}));
  CHECK(ifaces[0]["MTU"] == nlohmann::json({{"Size", "1500"}}));
  CHECK(ifaces[0]["Type"] == "ethernet");
  CHECK(ifaces[1]["Target"]["Device"] == "tap1");
  CHECK(ifaces[1]["Alias"]["Name"] == "storage");
  // Every event too: the last one virt-handler read derives the same.
  REQUIRE(notify.last_read());
  CHECK(notify.last_read()->status.interface("default"));

  kill_and_delete(*cmd, vmi);  // as virt-handler ends it: the launcher then exits 0
  auto ended = pod.child.wait_for(kQemu ? 120s : 60s);
  REQUIRE(ended);
  CHECK(*ended);
}

namespace {

// What one run of the Linux test guest through the KubeVirt protocol gave.
struct RealGuestRun {
  bool skipped = true;
  std::string console;                  // the guest's console until "chl-net: ready"
  std::string launcher_credentials;     // credentials(launcher) while the guest ran
  std::vector<std::string> pod_processes;  // "comm: credentials" of each process in the pod's namespace then
  std::string loopback;                 // the pod's own 127.0.0.1:8080 (masquerade's output-chain DNAT)
  std::string inbound, inbound6;        // the node's connection to the pod's 10.244.0.5:8080 / [fd00:10:244::5]:8080
  std::string outbound_from, outbound6_from;  // where the node's listener saw the guest's connection come from
  std::string before, after;            // netns_snapshot after phase 1 (before Sync), and after the launcher exited
  std::vector<long> left;              // processes left in the pod's namespace after the launcher exited
  std::string output;                   // the launcher's output
};

// The Linux test guest through the KubeVirt protocol on the libvirt path, after virt-handler's
// phase 1 for `binding` ("masquerade" or "bridge"; `ipv6`: a dual-stack pod, and the guest's
// chl.ipv6), with the launcher as KubeVirt's non-root one (uid/gid 107, no capability:
// PodNetns::start_non_root; libvirt's session daemon and QEMU then run as 107 too). The pod's
// eth0 is cabled to a node namespace (10.244.0.1, fd00:10:244::1) that listens on 8081; the
// guest connects there (chl.reach) and the node connects to the pod's 8080.
RealGuestRun real_guest(const std::string& binding, bool ipv6 = false) {
  RealGuestRun run;
  if (kQemu && !chl::test::libvirt_runnable()) return run;  // says why
  std::string why;
  auto guest = chl::test::find_linux_guest(&why);
  if (!guest) {
    chl::test::skip(why);
    return run;
  }
  if (!kQemu) {
    // A real CH that cannot run the Linux guest's kernel here, proven by CH alone.
    if (const auto& no = chl::test::real_vmm_cannot_run_linux(guest->kernel.string(), guest->initramfs.string())) {
      chl::test::skip(*no);
      return run;
    }
  }
  PodNetns pn;
  if (!pn.up_or_skip()) return run;
  if (auto w = pn.add_node(ipv6); !w.empty()) {
    chl::test::skip("a node namespace for the pod: " + w);
    return run;
  }
  const std::string ns = pn.ns.name(), node = pn.node.name();
  Pod pod;
  chl::test::net::Phase1 p1{ns};
  if (binding == "bridge") {
    // The pod's interface as CNI made it (its MAC is the guest's: the VMI sets it here).
    const chl::test::net::PodIface iface{"02:00:00:aa:bb:cc", "10.244.0.5/24", "10.244.0.1"};
    REQUIRE(chl::test::net::ip(ns, {"link", "set", "eth0", "address", iface.mac}) == "");
    fs::create_directories(pod.priv());
    const auto e = chl::test::net::kubevirt_phase1_bridge(p1, iface, pod.priv().string());
    REQUIRE_MESSAGE(e.empty(), e);
  } else {
    p1.ipv6 = ipv6;
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
    return run;
  }
  REQUIRE_MESSAGE(initrd.exit_code == 0, initrd.output);
  // The node's listeners, for the guest's way out through the pod interface.
  auto listen4 = chl::test::net::tcp_listen(node, 8081);
  REQUIRE(listen4);
  chl::common::UniqueFd listen6;
  if (ipv6) {
    listen6 = chl::test::net::tcp_listen(node, 8081, true);
    REQUIRE(listen6);
  }
  run.before = chl::test::net::netns_snapshot(ns);
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  std::unique_ptr<v1::Cmd::Stub> cmd;
  if (auto w = pn.start_non_root(pod, cmd); !w.empty()) {
    chl::test::skip(w);
    return run;
  }
  run.skipped = false;
  // The node answers the guest's connection (one each) until the guest is ready: it connects
  // before that.
  std::atomic<bool> stop{false};
  const auto answer = [&stop](int fd, const char* greeting, std::string& from) {
    while (!stop && from.empty()) from = chl::test::net::accept_one(fd, 1s, greeting);
  };
  std::thread accept4([&] { answer(listen4.get(), "hello-from-node\n", run.outbound_from); });
  std::thread accept6([&] {
    if (ipv6) answer(listen6.get(), "hello-from-node6\n", run.outbound6_from);
  });
  struct Joined {  // also when a REQUIRE below throws
    std::atomic<bool>& stop;
    std::thread &a, &b;
    void join() {
      stop = true;
      if (a.joinable()) a.join();
      if (b.joinable()) b.join();
    }
    ~Joined() { join(); }
  } joined{stop, accept4, accept6};
  auto j = nlohmann::json::parse(vmi_json());
  j["spec"]["domain"]["memory"]["guest"] = "256Mi";
  j["status"]["memory"] = {{"guestAtBoot", "256Mi"}, {"guestCurrent", "256Mi"}, {"guestRequested", "256Mi"}};
  std::string args = "console=ttyS0 quiet panic=-1 chl.reach=10.244.0.1,8081";
  if (ipv6) args += " chl.ipv6 chl.reach=fd00:10:244::1,8081";
  j["spec"]["domain"]["firmware"]["kernelBoot"] = {
      {"kernelArgs", args},
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
  REQUIRE_MESSAGE(chl::test::wait_until(30s, [&] { return fs::exists(console); }), pod.output());
  run.console = chl::test::read_socket_until(console, "chl-net: ready", 240s);
  if (run.console.find("chl-net: ready") != std::string::npos) {
    run.launcher_credentials = credentials(pod.child.pid());
    std::istringstream status(chl::test::read_file("/proc/" + std::to_string(pod.child.pid()) + "/status"));
    for (std::string l; std::getline(status, l);)
      if (l.rfind("VmRSS:", 0) == 0) MESSAGE("launcher RSS as uid 107, " << binding + (ipv6 ? " dual-stack" : "") << ", guest running: " << l);
    for (long p : chl::test::net::processes_in(ns))
    {
      std::string comm = chl::test::read_file("/proc/" + std::to_string(p) + "/comm");
      if (!comm.empty() && comm.back() == '\n') comm.pop_back();
      run.pod_processes.push_back(comm + ": " + credentials(p));
    }
    std::string back;
    if (chl::test::net::tcp_connect(node, "10.244.0.5", 8080, 10s, &back) == 0) run.inbound = back;
    if (ipv6 && chl::test::net::tcp_connect(node, "fd00:10:244::5", 8080, 10s, &back) == 0) run.inbound6 = back;
    if (binding == "masquerade")
      run.loopback = chl::test::run_command({"ip", "netns", "exec", ns, "sh", "-c", "echo | busybox nc -w 5 127.0.0.1 8080"}).output;
  }
  joined.join();
  kill_and_delete(*cmd, vmi);
  auto st = pod.child.wait_for(60s);
  REQUIRE(st);
  CHECK_MESSAGE(*st, pod.output());
  run.output = pod.output();
  // Nothing of the launcher's stays: libvirt's session daemons and QEMU go with it.
  (void)chl::test::wait_until(15s, [&] { return chl::test::net::processes_in(ns).empty(); });
  run.left = chl::test::net::processes_in(ns);
  run.after = chl::test::net::netns_snapshot(ns);
  return run;
}

// A real guest needs a real VMM: the libvirt path (QEMU, TCG here) runs these cases, and the
// Cloud Hypervisor path with CLOUD_HYPERVISOR_BIN (the VMM double runs no guest). True when this
// path can run a real guest: libvirt (QEMU), or a real Cloud Hypervisor (CLOUD_HYPERVISOR_BIN); the
// VMM double runs no guest (its CH-path case is the one above).
bool real_guest_path() {
  if (kQemu || chl::test::using_real_vmm()) return true;
  chl::test::skip(
      "a real guest needs a real VMM: the libvirt path (test_virt_launcher_qemu) or "
      "CLOUD_HYPERVISOR_BIN; "
      "the VMM double runs no guest (the CH path as uid 107 is checked against it by 'the launcher "
      "as uid 107 "
      "boots on virt-handler's tap')");
  return false;
}

// What every real-guest run asserts: the launcher and everything it started in the pod ran as
// uid/gid 107 with no capability; the namespace's links, addresses and nftables rules are
// exactly as phase 1 left them (not even libvirt's noqueue qdisc on the tap: without
// CAP_NET_ADMIN it cannot set it); nothing is left running.
void check_non_root_and_untouched(const RealGuestRun& run) {
  const std::string none = "0000000000000000";
  const std::string want = "Uid=107,107,107,107 Gid=107,107,107,107 CapPrm=" + none + " CapEff=" + none +
                           " CapBnd=" + none + " CapAmb=" + none + " NoNewPrivs=1";
  CHECK_MESSAGE(run.launcher_credentials == want, run.launcher_credentials);
  // The launcher, libvirtd, virtlogd and QEMU; or the launcher and Cloud Hypervisor.
  CHECK_MESSAGE(run.pod_processes.size() >= (kQemu ? 4u : 2u), run.pod_processes.size());
  bool vmm = false;
  for (const auto& p : run.pod_processes) {
    CHECK_MESSAGE(p.find(want) != std::string::npos, p);
    vmm = vmm || p.rfind(kQemu ? "qemu-system" : "cloud-hyperviso", 0) == 0;
  }
  CHECK(vmm);
  // libvirt's session daemon, started by the launcher under the pod's XDG_RUNTIME_DIR.
  if (kQemu)
    CHECK_MESSAGE(run.output.find("libvirt: using ch-launcher's session libvirtd as uid 107") !=
                      std::string::npos,
                  run.output);
  CHECK_MESSAGE(run.after == run.before, "before Sync:\n" << run.before << "\nafter the launcher exited:\n" << run.after);
  CHECK_MESSAGE(run.left.empty(), run.left.size() << " process(es) left in the pod's namespace");
}

}  // namespace

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): a real guest behind masquerade, the launcher as uid 107 without capabilities — the lease and gateway, reached from the node and from the pod through port 8080, reaches the node through the pod interface, the namespace untouched") {
  if (!real_guest_path()) return;
  const auto run = real_guest("masquerade");
  if (run.skipped) return;  // skipped, saying why
  const std::string& got = run.console;
  CHECK_MESSAGE(got.find("chl-net: lease ip=10.0.2.2 subnet=255.255.255.0 router=10.0.2.1 mtu=1500") != std::string::npos, got);
  CHECK_MESSAGE(got.find("chl-net: gateway ok") != std::string::npos, got);
  // The node reaches the guest's listener through the pod's address (phase 1's prerouting DNAT).
  CHECK_MESSAGE(run.inbound.find("hello-from-guest") != std::string::npos, run.inbound);
  // A connection in the pod to a port of its own (virt-handler's output-chain DNAT of loopback,
  // KubeVirt's rule for sidecars) reaches the guest's listener through the tap.
  CHECK_MESSAGE(run.loopback.find("hello-from-guest") != std::string::npos, run.loopback);
  // The guest reaches the node, which sees the pod's address (phase 1's masquerade).
  CHECK_MESSAGE(got.find("chl-net: reach 10.244.0.1 8081: hello-from-node") != std::string::npos, got);
  CHECK(run.outbound_from == "10.244.0.5");
  check_non_root_and_untouched(run);
}

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): a real guest on a dual-stack pod behind masquerade, the launcher as uid 107 — its IPv6 gateway, reached from the node over IPv6, reaches the node over IPv6 as the pod") {
  if (!real_guest_path()) return;
  const auto run = real_guest("masquerade", true);
  if (run.skipped) return;
  const std::string& got = run.console;
  CHECK_MESSAGE(got.find("chl-net: lease ip=10.0.2.2") != std::string::npos, got);
  // KubeVirt's static fd10:0:2::2/120 and gateway fd10:0:2::1 in the guest (busybox has no
  // DHCPv6 client, and phase 2 sends no router advertisements, as KubeVirt's): the gateway on
  // phase 1's bridge answers.
  CHECK_MESSAGE(got.find("chl-net: ipv6 static gateway") != std::string::npos, got);
  CHECK_MESSAGE(got.find("chl-net: ipv6 gateway ok") != std::string::npos, got);
  CHECK_MESSAGE(run.inbound6.find("hello-from-guest") != std::string::npos, run.inbound6);
  CHECK_MESSAGE(got.find("chl-net: reach fd00:10:244::1 8081: hello-from-node6") != std::string::npos, got);
  CHECK(run.outbound6_from == "fd00:10:244::5");
  // And IPv4 the same.
  CHECK_MESSAGE(run.inbound.find("hello-from-guest") != std::string::npos, run.inbound);
  CHECK(run.outbound_from == "10.244.0.5");
  check_non_root_and_untouched(run);
}

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): a real guest over bridge binding, the launcher as uid 107 — the pod's address from virt-handler's DHCP cache, the node and the guest reach each other on the pod's segment") {
  if (!real_guest_path()) return;
  const auto run = real_guest("bridge");
  if (run.skipped) return;
  const std::string& got = run.console;
  CHECK_MESSAGE(got.find("chl-net: lease ip=10.244.0.5 subnet=255.255.255.0 router=10.244.0.1 mtu=1500") != std::string::npos, got);
  CHECK_MESSAGE(run.inbound.find("hello-from-guest") != std::string::npos, run.inbound);
  CHECK_MESSAGE(got.find("chl-net: reach 10.244.0.1 8081: hello-from-node") != std::string::npos, got);
  CHECK(run.outbound_from == "10.244.0.5");
  check_non_root_and_untouched(run);
}

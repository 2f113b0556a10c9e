// A VM's end of life in virt-launcher mode, driven by the virt-handler stand-in
// (virt_handler_loop.hpp: KubeVirt's reconcile loop, its order and timing, the phase derived as
// vm.go does): a guest that powers off, one that ignores the power button, a pod deleted
// (SIGTERM), a failed boot, a re-Sync of a Running VMI, and the launcher outliving DeleteDomain
// (../shared/reference/kubevirt-domain-contract.md §2, §3). Built twice, as test_virt_launcher.cpp.
#include "tests/kubevirt/virt_handler_loop.hpp"
#include "tests/kubevirt/virt_launcher_harness.hpp"

namespace {

// This file's VMI name: its own libvirt domain (default_<name>), apart from the other
// virt-launcher tests' default_testvm, which other checkouts on the same host may be running.
const std::string kName = "lifecycle-" + std::to_string(::getpid());

// The VMI with these kernel words and this grace period.
std::string lifecycle_vmi(const std::string& words, int grace_s) {
  auto j = nlohmann::json::parse(vmi_json());
  j["metadata"]["name"] = kName;
  // Its own UUID too: libvirt refuses a second domain with another's UUID.
  char uuid[40];
  std::snprintf(uuid, sizeof uuid, "0b8a3c6e-8f0e-4f4e-9d5e-%012x",
                static_cast<unsigned>(::getpid()));
  j["spec"]["domain"]["firmware"]["uuid"] = uuid;
  j["spec"]["domain"]["firmware"]["kernelBoot"]["kernelArgs"] = "console=ttyS0 kv-flow " + words;
  j["spec"]["terminationGracePeriodSeconds"] = grace_s;
  return j.dump();
}

// Start the launcher, Sync the VMI, wait for Running; the stub.
std::unique_ptr<v1::Cmd::Stub> start_running(Pod& pod, chl::test::TestNotifyServer& notify,
                                             const std::string& vmi) {
  auto cmd = pod.serve();
  v1::VMIRequest req;
  req.mutable_vmi()->set_vmijson(vmi);
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, req, &r); }).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  REQUIRE_MESSAGE(
      chl::test::wait_until(kQemu ? 60s : 30s, [&] { return reported_running(notify); }),
      states_text(notify) << "\n"
                          << pod.output());
  return cmd;
}

chl::test::VirtHandlerLoopOptions loop_options(const Pod& pod, const std::string& vmi) {
  chl::test::VirtHandlerLoopOptions o;
  o.launcher_socket = chl::kubevirt::ready_socket_path(pod.share());
  o.vmi_json = vmi;
  o.busy_delay = 3s;
  return o;
}

// The GracePeriod.DeletionTimestamp values the notifications carried (null ones left out).
std::set<std::string> grace_timestamps(const chl::test::TestNotifyServer& notify) {
  std::set<std::string> ts;
  for (const auto& n : notify.received()) {
    if (n.k8s) continue;
    const auto* g = chl::test::vh::grace_period(&n.json);
    if (g && g->contains("DeletionTimestamp") && (*g)["DeletionTimestamp"].is_string())
      ts.insert((*g)["DeletionTimestamp"].get<std::string>());
  }
  return ts;
}

// The launcher's exit: 0 within `t`, having delivered its final notification (it did not give it
// up, nor wait for its final_notify_timeout).
void check_exit_0(Pod& pod, std::chrono::seconds t) {
  auto st = pod.child.wait_for(t);
  REQUIRE(st);
  REQUIRE_MESSAGE(*st, "the launcher did not exit\n" << pod.output());
  CHECK_MESSAGE(((*st)->exited && (*st)->code == 0), pod.output());
  CHECK_MESSAGE(pod.output().find("the final domain notification was not delivered") == std::string::npos,
                pod.output());
}

// The last domain notification is KubeVirt's "gone": MODIFIED NoState/NonExistent with
// ObjectMeta.deletionTimestamp, never DELETED.
void check_final_notification(const chl::test::TestNotifyServer& notify) {
  std::optional<chl::test::ReceivedNotification> last;
  for (const auto& n : notify.received()) {
    CHECK(n.event_type != "DELETED");
    if (!n.k8s) last = n;
  }
  REQUIRE(last);
  CHECK(last->event_type == "MODIFIED");
  CHECK(last->json["Status"]["Status"] == "NoState");
  CHECK(last->json["ObjectMeta"].contains("deletionTimestamp"));
}

// A guest runs here and powers off on the power button (the project's PVH guest does under QEMU,
// the double and a real CH: docs/guests.md); else false, having said why.
bool cooperative_guest_runnable() {
  if (!guest_runnable()) return false;
  return kQemu || chl::test::needs_cooperative_guest(chl::test::guest_kernel());
}

// The guest's console on virt-serial0: one client, connected once the bridge listens and read
// until the guest says "ready" (its words act after that); `seen` is all it has written.
struct GuestConsole {
  std::optional<chl::common::UniqueFd> client;
  std::string seen;
  explicit GuestConsole(const fs::path& console) {
    REQUIRE(chl::test::wait_until(30s, [&] {
      auto c = chl::common::connect_unix(console);
      if (c) client.emplace(std::move(*c));
      return client.has_value();
    }));
    REQUIRE_MESSAGE(chl::test::wait_until(60s, [&] {
                      read_more();
                      return seen.find("ready") != std::string::npos;
                    }),
                    seen);
  }
  void read_more() {
    char buf[4096];
    pollfd p{client->get(), POLLIN, 0};
    while (::poll(&p, 1, 0) > 0) {
      const ssize_t n = ::read(client->get(), buf, sizeof buf);
      if (n <= 0) break;
      seen.append(buf, static_cast<std::size_t>(n));
    }
  }
  void type(const std::string& words) {
    REQUIRE(::write(client->get(), words.data(), words.size()) == static_cast<ssize_t>(words.size()));
  }
};

}  // namespace

TEST_CASE("virt-launcher lifecycle (" CHL_VL_HYPERVISOR
          "): VMI deleted, the guest powers off -> Succeeded, re-Sync of a Running VMI sends "
          "nothing, DeletionTimestamp set once, exit 0 after DeleteDomain") {
  if (!cooperative_guest_runnable()) return;
  Pod pod;
  pod.vmi_name = kName;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  const std::string vmi = lifecycle_vmi("", 10);
  auto cmd = start_running(pod, notify, vmi);

  // Every reconcile of a Running VMI Syncs it again: nothing changes, no event.
  {
    auto running = nlohmann::json::parse(vmi);
    running["status"]["phase"] = "Running";
    v1::VMIRequest req;
    req.mutable_vmi()->set_vmijson(running.dump());
    std::this_thread::sleep_for(300ms);  // the Running events are in
    const std::size_t before = notify.received().size();
    for (int i = 0; i < 3; ++i) {
      v1::Response r;
      REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, req, &r); }).ok());
      CHECK_MESSAGE(r.success(), r.message());
    }
    std::this_thread::sleep_for(500ms);
    CHECK(notify.received().size() == before);
  }

  chl::test::VirtHandlerLoop loop(loop_options(pod, vmi), notify);
  loop.delete_vmi();
  const bool done = loop.run(90s);
  INFO(loop.log() << pod.output());
  REQUIRE(done);
  CHECK(loop.phase() == "Succeeded");
  // Ping before Shutdown; Shutdown answered; no Kill; DeleteDomain answered after Shutoff.
  REQUIRE_FALSE(loop.actions().empty());
  CHECK(loop.actions().front().what == "Ping");
  for (const auto& a : loop.actions()) CHECK_MESSAGE(a.ok, a.what << ": " << a.detail);
  CHECK(loop.actions("Shutdown").size() >= 1);
  CHECK(loop.actions("Kill").empty());
  REQUIRE(loop.actions("DeleteDomain").size() == 1);
  CHECK(has_state(notify, "MODIFIED Shutoff/Shutdown"));
  CHECK(grace_timestamps(notify).size() == 1);  // set at the first Shutdown, never reset
  check_exit_0(pod, 30s);
  check_final_notification(notify);
  CHECK_FALSE(fs::exists(chl::kubevirt::ready_socket_path(pod.share())));
}

TEST_CASE("virt-launcher lifecycle (" CHL_VL_HYPERVISOR
          "): a guest that ignores the power button -> Shutdown re-sent, Kill after "
          "DeletionTimestamp + grace -> Failed (ACPI), exit 0") {
  if (!guest_runnable()) return;
  Pod pod;
  pod.vmi_name = kName;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  constexpr int kGrace = 7;
  const std::string vmi = lifecycle_vmi("ignore-acpi", kGrace);
  auto cmd = start_running(pod, notify, vmi);

  chl::test::VirtHandlerLoop loop(loop_options(pod, vmi), notify);
  loop.delete_vmi();
  const bool done = loop.run(90s);
  INFO(loop.log() << pod.output());
  REQUIRE(done);
  CHECK(loop.phase() == "Failed");  // Shutoff/Destroyed with Features.ACPI and a grace period
  for (const auto& a : loop.actions()) CHECK_MESSAGE(a.ok, a.what << ": " << a.detail);
  const auto shutdowns = loop.actions("Shutdown");
  const auto kills = loop.actions("Kill");
  REQUIRE(shutdowns.size() >= 2);  // re-sent: a booting OS can miss ACPI
  // Kill once the grace period has passed (again on a domain event while the VM is still going
  // down, as virt-handler does: Kill is idempotent): an order, by the domain's own clock — the
  // first Kill comes after GracePeriod.DeletionTimestamp + grace, and after the last Shutdown.
  REQUIRE_FALSE(kills.empty());
  const auto stamps = grace_timestamps(notify);
  REQUIRE(stamps.size() == 1);
  const auto start = chl::test::vh::unix_seconds(*stamps.begin());
  REQUIRE(start);
  CHECK(kills[0].wall_s >= *start + kGrace);
  CHECK(kills[0].at_s > shutdowns.back().at_s);
  CHECK(has_state(notify, "MODIFIED Shutoff/Destroyed"));
  CHECK(grace_timestamps(notify).size() == 1);
  REQUIRE(loop.actions("DeleteDomain").size() == 1);
  check_exit_0(pod, 30s);
  check_final_notification(notify);
}

TEST_CASE("virt-launcher lifecycle (" CHL_VL_HYPERVISOR
          "): pod deleted (SIGTERM) -> MarkedForGracefulShutdown, virt-handler shuts down -> "
          "Succeeded, exit 0") {
  if (!cooperative_guest_runnable()) return;
  Pod pod;
  pod.vmi_name = kName;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  const std::string vmi = lifecycle_vmi("", 10);
  auto cmd = start_running(pod, notify, vmi);

  REQUIRE(::kill(pod.child.pid(), SIGTERM) == 0);
  // The launcher marks the domain and does not stop the VM itself.
  const auto marked = [&] {
    for (const auto& n : notify.received()) {
      if (n.k8s) continue;
      if (chl::test::vh::graceful_shutdown_trigger(&n.json)) return true;
    }
    return false;
  };
  REQUIRE_MESSAGE(chl::test::wait_until(10s, marked), pod.output());
  std::this_thread::sleep_for(1s);
  CHECK_FALSE(
      has_state(notify, "MODIFIED Shutoff/Shutdown"));  // still running: nobody pressed the button

  chl::test::VirtHandlerLoop loop(loop_options(pod, vmi), notify);  // the VMI is not deleted
  const bool done = loop.run(90s);
  INFO(loop.log() << pod.output());
  REQUIRE(done);
  CHECK(loop.phase() == "Succeeded");
  CHECK(loop.actions("Shutdown").size() >= 1);
  CHECK(loop.actions("Kill").empty());
  CHECK(loop.actions("DeleteDomain").size() == 1);
  check_exit_0(pod, 30s);
  check_final_notification(notify);
}

TEST_CASE("virt-launcher lifecycle (" CHL_VL_HYPERVISOR
          "): the Shutoff domain is served until DeleteDomain, Shutdown and Kill are no-ops then") {
  if (!cooperative_guest_runnable()) return;
  Pod pod;
  pod.vmi_name = kName;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  const std::string vmi = lifecycle_vmi("", 10);
  auto cmd = start_running(pod, notify, vmi);
  v1::VMIRequest req;
  req.mutable_vmi()->set_vmijson(vmi);
  v1::Response r;
  // Shutdown, re-sent every 2 s as virt-handler re-sends it (a booting guest can miss the
  // button): each a success.
  const auto powered_off = [&] {
    REQUIRE(call([&](auto& c) { return cmd->ShutdownVirtualMachine(&c, req, &r); }).ok());
    CHECK_MESSAGE(r.success(), r.message());
    return chl::test::wait_until(2s,
                                 [&] { return has_state(notify, "MODIFIED Shutoff/Shutdown"); });
  };
  REQUIRE_MESSAGE(chl::test::wait_until(60s, powered_off), pod.output());
  std::this_thread::sleep_for(2s);  // long after the VMM has gone
  // Still serving: Ping, GetDomain (Shutoff/Shutdown), and Shutdown and Kill are no-ops.
  v1::EmptyRequest empty;
  REQUIRE(call([&](auto& c) { return cmd->Ping(&c, empty, &r); }).ok());
  CHECK(r.success());
  v1::DomainResponse dom;
  REQUIRE(call([&](auto& c) { return cmd->GetDomain(&c, empty, &dom); }).ok());
  auto d = nlohmann::json::parse(dom.domain());
  CHECK(d["Status"]["Status"] == "Shutoff");
  CHECK(d["Status"]["Reason"] == "Shutdown");
  REQUIRE(call([&](auto& c) { return cmd->ShutdownVirtualMachine(&c, req, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  REQUIRE(call([&](auto& c) { return cmd->KillVirtualMachine(&c, req, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  CHECK_FALSE(has_state(notify, "MODIFIED NoState/NonExistent"));
  auto st = pod.child.wait_for(0s);
  REQUIRE(st);
  CHECK_FALSE(*st);  // not exited
  // DeleteDomain: the final notification, then the launcher ends, exit 0.
  REQUIRE(call([&](auto& c) { return cmd->DeleteVirtualMachine(&c, req, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  check_exit_0(pod, 15s);
  check_final_notification(notify);
}

TEST_CASE("virt-launcher lifecycle (" CHL_VL_HYPERVISOR
          "): a boot the VMM refuses -> Sync success:false with its message, a Warning event, "
          "still serving, the next Sync boots") {
  if (!guest_runnable()) return;
  Pod pod;
  pod.vmi_name = kName;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  // The first boot fails: on a real VMM (QEMU, a real Cloud Hypervisor) the kernel is cut short
  // after its PVH note (our checks pass it; the VMM cannot load its segment); the VMM double does
  // not load kernels, so it refuses the first boot by its fault injection (VMM_DOUBLE_FAIL=vm.boot,
  // a marker file saying it has).
  const bool injected = !kQemu && !chl::test::using_real_vmm();
  if (injected) {
    const fs::path wrapper = pod.dir.path() / "vmm-once.sh",
                   marker = pod.dir.path() / "failed-once";
    {
      std::ofstream f(wrapper);
      f << "#!/bin/sh\nif [ ! -e '" << marker.string() << "' ]; then : > '" << marker.string()
        << "'; export VMM_DOUBLE_FAIL=vm.boot; fi\nexec '" << chl::test::vmm_binary()
        << "' \"$@\"\n";
    }
    fs::permissions(wrapper, fs::perms::owner_all);
    pod.vmm_binary = wrapper.string();
  }
  auto cmd = pod.serve();
  const fs::path kernel = pod.cdisks() / "kernel-boot" / "guest.elf";
  if (!injected) fs::resize_file(kernel, 0x1000 + 0x18);  // the ELF headers and the PVH note only
  v1::VMIRequest req;
  req.mutable_vmi()->set_vmijson(lifecycle_vmi("", 10));
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, req, &r); }, 120s).ok());
  CHECK_FALSE(r.success());
  // The VMM's own error chain.
  CHECK_MESSAGE(r.message().rfind("starting the VM: ", 0) == 0, r.message());
  if (injected)
    CHECK_MESSAGE(r.message().find("injected failure") != std::string::npos, r.message());
  const std::string why = r.message().substr(std::string("starting the VM: ").size());
  MESSAGE("the refused boot: " << r.message());
  // A Warning event names it; the domain stays defined and not running (Shutoff/Unknown).
  REQUIRE(chl::test::wait_until(5s, [&] {
    for (const auto& n : notify.received())
      if (n.k8s && n.json.value("type", "") == "Warning" &&
          n.json.value("message", "").find(why) != std::string::npos)
        return true;
    return false;
  }));
  {
    const auto seq = states(notify.received());
    REQUIRE_FALSE(seq.empty());
    CHECK_MESSAGE(seq.back().find("Shutoff/Unknown") != std::string::npos, seq.back());
  }
  // Still serving, and the next Sync boots.
  v1::EmptyRequest empty;
  REQUIRE(call([&](auto& c) { return cmd->Ping(&c, empty, &r); }).ok());
  CHECK(r.success());
  fs::copy_file(chl::test::guest_kernel(), kernel, fs::copy_options::overwrite_existing);
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, req, &r); }, 120s).ok());
  CHECK_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  CHECK(chl::test::wait_until(kQemu ? 60s : 30s, [&] { return reported_running(notify); }));
  auto seq = states(notify.received());
  CHECK(std::count(seq.begin(), seq.end(), "ADDED Shutoff/Unknown") == 1);  // defined once
  REQUIRE(call([&](auto& c) { return cmd->KillVirtualMachine(&c, req, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  REQUIRE(
      chl::test::wait_until(20s, [&] { return has_state(notify, "MODIFIED Shutoff/Destroyed"); }));
  REQUIRE(call([&](auto& c) { return cmd->DeleteVirtualMachine(&c, req, &r); }).ok());
  check_exit_0(pod, 15s);
}

TEST_CASE("virt-launcher lifecycle (" CHL_VL_HYPERVISOR
          "): SoftReboot without a guest agent reboots the guest (QEMU: an ACPI reboot, CH: its "
          "reset) -> it boots again, the domain stays Running") {
  if (!cooperative_guest_runnable()) return;
  Pod pod;
  pod.vmi_name = kName;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  const std::string vmi = lifecycle_vmi("", 10);
  auto cmd = start_running(pod, notify, vmi);
  const fs::path console = pod.priv() / kUid / "virt-serial0";
  // The guest's own lines, or the VMM double's (it runs no guest code, and prints no heartbeat).
  const bool guest_code = kQemu || chl::test::using_real_vmm();
  const std::string banner = guest_code ? "hello from COM1" : "pretend guest: booted";
  const std::string ready = guest_code ? "guest ready" : "ready";
  // The guest polls the power button once it is up: its first heartbeat.
  const std::string up = guest_code ? "heartbeat 1" : ready;
  std::string got = chl::test::read_socket_until(console, up, 60s);
  REQUIRE_MESSAGE(got.find(up) != std::string::npos, got << "\n" << pod.output());
  const std::size_t before = notify.received().size();

  // KubeVirt's SoftRebootVMI without AgentConnected: libvirt's DOMAIN_REBOOT_ACPI_POWER_BTN. The
  // PVH guest powers off on the button; libvirt restarts it ("fake reboot"), never a reset (a
  // reset would boot again without "powering off" on the console). Cloud Hypervisor v52 has no
  // ACPI reboot (its vm.power-button powers off, and CH ends when the guest does): SoftReboot
  // there is vm.reboot, CH's reset (CloudHypervisorDriver::acpi_reboot), and the guest boots
  // again without powering off.
  v1::VMIRequest req;
  req.mutable_vmi()->set_vmijson(vmi);
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SoftRebootVirtualMachine(&c, req, &r); }, 70s).ok());
  REQUIRE_MESSAGE(r.success(), r.message());
  // The console's scrollback (sent to every new client) with two boots in it.
  const auto boots = [&banner](const std::string& s) {
    std::size_t n = 0;
    for (auto p = s.find(banner); p != std::string::npos; p = s.find(banner, p + 1)) ++n;
    return n;
  };
  CHECK_MESSAGE(chl::test::wait_until(
                    90s,
                    [&] {
                      got = chl::test::read_socket_until(console, ready, 5s);
                      return boots(got) >= 2 && got.rfind(ready) > got.rfind(banner);
                    }),
                got << "\n"
                    << pod.output());
  const auto off = got.find("ACPI power button: powering off");
  if (kQemu) {
    CHECK_MESSAGE(off != std::string::npos, got);
    CHECK_MESSAGE(off < got.rfind(banner), got);  // the button, then the second boot
  } else {
    CHECK_MESSAGE(off == std::string::npos, got);  // a reset: the guest never powered off
  }
  // Its heartbeat counter starts over in the second boot.
  if (guest_code)
    CHECK(chl::test::wait_until(30s, [&] {
      got = chl::test::read_socket_until(console, "heartbeat 1", 5s);
      return got.find("heartbeat 1", got.rfind(banner)) != std::string::npos;
    }));
  // The domain never went Shutoff, and is Running.
  const auto received = notify.received();
  for (std::size_t i = before; i < received.size(); ++i) {
    const auto& n = received[i];
    if (!n.k8s) CHECK_MESSAGE(n.json["Status"]["Status"] != "Shutoff", n.json.dump());
  }
  v1::EmptyRequest empty;
  v1::DomainResponse dom;
  REQUIRE(call([&](auto& c) { return cmd->GetDomain(&c, empty, &dom); }).ok());
  CHECK(nlohmann::json::parse(dom.domain())["Status"]["Status"] == "Running");

  REQUIRE(call([&](auto& c) { return cmd->KillVirtualMachine(&c, req, &r); }).ok());
  REQUIRE(call([&](auto& c) { return cmd->DeleteVirtualMachine(&c, req, &r); }).ok());
  check_exit_0(pod, 30s);
}

// virt-handler's processVmDelete closes the VMI's notify pipe right after DeleteDomain answers
// (its deferred CloseLauncherClient, pkg/virt-handler/vm.go:1708; pipe.go:138-145): the socket
// file goes, the connections it accepted stay served. Here the pipe is closed before DeleteDomain,
// the strict end of that race: the final NoState must still arrive, over the launcher's open
// connection, and the launcher exit at once after it (not after its final_notify_timeout).
TEST_CASE("virt-launcher lifecycle (" CHL_VL_HYPERVISOR
          "): the notify pipe closed around DeleteDomain -> the final event over the open "
          "connection, exit 0 right after it") {
  if (!guest_runnable()) return;
  Pod pod;
  pod.vmi_name = kName;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  const std::string vmi = lifecycle_vmi("ignore-acpi", 10);
  auto cmd = start_running(pod, notify, vmi);
  v1::VMIRequest req;
  req.mutable_vmi()->set_vmijson(vmi);
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->KillVirtualMachine(&c, req, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  REQUIRE(chl::test::wait_until(60s, [&] { return has_state(notify, "MODIFIED Shutoff/Destroyed"); }));
  const std::size_t connections = notify.accepted();
  notify.close_pipe();
  REQUIRE_FALSE(fs::exists(pod.share() / "domain-notify-pipe.sock"));
  const auto asked = std::chrono::steady_clock::now();
  REQUIRE(call([&](auto& c) { return cmd->DeleteVirtualMachine(&c, req, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  check_exit_0(pod, 30s);
  const auto exited = std::chrono::steady_clock::now();
  check_final_notification(notify);
  CHECK(notify.accepted() == connections);  // over the connection it had: no new one
  MESSAGE("DeleteDomain -> launcher exit: "
          << std::chrono::duration_cast<std::chrono::milliseconds>(exited - asked).count()
          << " ms (a figure, not a bound; load " << chl::test::read_file("/proc/loadavg") << ")");
}

// virt-handler re-sends Shutdown (on our GracePeriod event, and every <= 5 s) while the guest may
// already be powering off: Cloud Hypervisor then answers a VM that is ending (its control loop
// tearing the VM down: "API response receive error: receiving on a closed channel"; after it
// "API request send error", or no answer), and libvirt "domain is not running". KubeVirt's
// SignalShutdownVMI treats such a domain as done (manager.go:2153-2194): every Shutdown succeeds.
// The guest powers off by itself (typed on its console); the VMM double holds its API while it
// tears the VM down (VMM_DOUBLE_POWEROFF_TEARDOWN_MS), so a press always lands in that window.
TEST_CASE("virt-launcher lifecycle (" CHL_VL_HYPERVISOR
          "): Shutdown again and again while the guest powers off by itself -> each a success, "
          "Shutoff/Shutdown, exit 0") {
  if (!guest_runnable()) return;
  Pod pod;
  pod.vmi_name = kName;
  const bool teardown = !kQemu && !chl::test::using_real_vmm();
  if (teardown) {
    const fs::path wrapper = pod.dir.path() / "vmm-slow-teardown.sh";
    chl::test::write_file(wrapper, "#!/bin/sh\nexport VMM_DOUBLE_POWEROFF_TEARDOWN_MS=2000\nexec '" +
                                       chl::test::vmm_binary() + "' \"$@\"\n");
    fs::permissions(wrapper, fs::perms::owner_all);
    pod.vmm_binary = wrapper.string();
  }
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  const std::string vmi = lifecycle_vmi("", 10);
  auto cmd = start_running(pod, notify, vmi);
  const fs::path console = pod.priv() / kUid / "virt-serial0";
  // One console client, kept until the end (virt-serial0 serves one client at a time).
  GuestConsole guest(console);
  guest.type("poweroff\r");
  v1::VMIRequest req;
  req.mutable_vmi()->set_vmijson(vmi);
  int shutdowns = 0;
  std::vector<std::string> failed;
  const bool off = chl::test::wait_until(
      60s,
      [&] {
        v1::Response r;
        const auto st = call([&](auto& c) { return cmd->ShutdownVirtualMachine(&c, req, &r); });
        ++shutdowns;
        if (!st.ok() || !r.success()) failed.push_back(st.ok() ? r.message() : st.error_message());
        return has_state(notify, "MODIFIED Shutoff/Shutdown");
      },
      0ms);
  guest.read_more();
  REQUIRE_MESSAGE(off, states_text(notify) << "\nconsole:\n" << guest.seen);
  CHECK_MESSAGE(failed.empty(), failed.size() << " of " << shutdowns << " Shutdowns failed, the first: "
                                              << (failed.empty() ? "" : failed.front()));
  const bool in_window = pod.output().find("the VM is already ending") != std::string::npos;
  if (teardown)
    CHECK_MESSAGE(in_window, "no Shutdown reached the VMM while it tore the VM down");
  else
    MESSAGE("a Shutdown reached the VMM while the VM ended: " << std::string(in_window ? "yes" : "no") << " ("
                                                               << shutdowns << " Shutdowns)");
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->DeleteVirtualMachine(&c, req, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  check_exit_0(pod, 30s);
  check_final_notification(notify);
}

// A detached hotplug volume whose device the VMM keeps: Cloud Hypervisor drops the disk from its
// config at once but keeps the device until the guest ejects it (vmm/src/vm.rs
// Vm::remove_device), so the domain keeps the disk -- source and target: virt-handler's volume
// status stays Ready (vm.go updateVolumeStatusesFromDomain) -- as libvirt keeps a disk until
// QEMU's DEVICE_DELETED. The PVH guest's word no-eject makes it leave removed devices to CH (on
// the real CH and, by its command line, in the double); test_virt_launcher.cpp has the eject.
TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): a detached volume the guest does not eject stays in the domain (Ready)") {
  if (kQemu) return;  // libvirt's detach waits for QEMU itself
  if (!guest_runnable()) return;
  if (chl::test::using_real_vmm() && !chl::test::is_project_pvh_guest(chl::test::guest_kernel())) {
    chl::test::skip("needs the project's PVH guest (its word no-eject; CHL_TEST_GUEST_KERNEL names another)");
    return;
  }
  Pod pod;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  fs::create_directories(pod.hotplug());
  { std::ofstream(pod.hotplug() / "hp1.img").put('\0'); }
  fs::resize_file(pod.hotplug() / "hp1.img", 1 << 20);
  auto cmd = pod.serve();
  auto base = nlohmann::json::parse(vmi_json());
  base["spec"]["domain"]["firmware"]["kernelBoot"]["kernelArgs"] = "console=ttyS0 kv-flow no-eject";
  auto j = base;
  j["spec"]["volumes"] = nlohmann::json::parse(R"([{"name": "hp1", "persistentVolumeClaim": {"claimName": "hp1-pvc", "hotpluggable": true}}])");
  j["spec"]["domain"]["devices"]["disks"] = nlohmann::json::parse(R"([{"name": "hp1", "disk": {"bus": "scsi"}}])");
  j["status"]["volumeStatus"] = nlohmann::json::parse(
      R"([{"name": "hp1", "target": "", "phase": "HotplugVolumeMounted", "hotplugVolume": {"attachPodName": "hp-volume-x", "attachPodUID": "u1"}}])");
  v1::VMIRequest plugged;
  plugged.mutable_vmi()->set_vmijson(j.dump());
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, plugged, &r); }, 120s).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  // The guest has read its command line (words act after `guest ready`) before the unplug.
  const fs::path console = pod.priv() / kUid / "virt-serial0";
  GuestConsole guest(console);  // kept: virt-serial0 serves one client at a time
  // Unplugged: CH's config loses it at once; the domain keeps it while the device stays.
  v1::VMIRequest unplugged;
  unplugged.mutable_vmi()->set_vmijson(base.dump());
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, unplugged, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  const auto st = pod.status();
  REQUIRE(st.contains("info"));
  CHECK(st["info"]["config"].dump().find("hp1.img") == std::string::npos);
  CHECK(st["info"]["device_tree"].contains("hotplug-hp1"));
  std::string text;
  const auto read = get_domain(*cmd, chl::test::HandlerVmi::from_vmi_json(j), &text);
  CHECK_MESSAGE(text.find((pod.hotplug() / "hp1.img").string()) != std::string::npos, text);
  REQUIRE(read.status.volume("hp1"));
  CHECK_MESSAGE(!read.status.volume("hp1")->target.empty(), text);
  CHECK(read.status.volume("hp1")->phase == "Ready");
  CHECK(pod.output().find("the VMM keeps device hotplug-hp1 until the guest ejects it") != std::string::npos);
  // A guest reboot: CH makes a new VM from its config (vmm/src/lib.rs vm_reboot), without the
  // device and with no device-removed said: the domain loses the disk then.
  guest.type("reboot\r");
  CHECK_MESSAGE(chl::test::wait_until(60s, [&] {
                  guest.read_more();
                  get_domain(*cmd, chl::test::HandlerVmi::from_vmi_json(j), &text);
                  return text.find("hp1.img") == std::string::npos;
                }),
                text << "\nconsole:\n" << guest.seen);
  kill_and_delete(*cmd, unplugged);
  auto end = pod.child.wait_for(30s);
  REQUIRE(end);
  CHECK(*end);
}

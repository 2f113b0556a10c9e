// What the launcher does to the guest through its agent on the Cloud Hypervisor path, driven as
// virt-handler drives it: FreezeVirtualMachine / UnfreezeVirtualMachine (KubeVirt's FreezeVMI /
// UnfreezeVMI: the status read first, the safety thaw after unfreezeTimeoutSeconds,
// Status.FSFreezeStatus in the domain with an event), SoftRebootVirtualMachine through the agent
// (guest-shutdown {"mode":"reboot"}), the guest's clock set after UnpauseVirtualMachine
// (setGuestTime). A real qemu-ga on the host must never freeze, set the time or reboot, so the
// double's pretend guest bridges vsock port 1024 to a SCRIPTED agent
// (tests/guest_agent/scripted_agent.hpp). Against a real cloud-hypervisor: skipped (the PVH test
// guest has no agent).
#include "tests/support/real_vmm_limits.hpp"
#include "tests/guest_agent/scripted_agent.hpp"
#include "tests/kubevirt/virt_launcher_harness.hpp"

namespace {

// Status.FSFreezeStatus.Status of the newest domain notification ("" when none says).
std::string freeze_status(const chl::test::TestNotifyServer& server) {
  std::string s;
  for (const auto& n : server.received()) {
    if (n.k8s) continue;
    const auto& st = n.json["Status"];
    if (st.is_object() && st.contains("FSFreezeStatus") && st["FSFreezeStatus"].is_object())
      s = st["FSFreezeStatus"].value("Status", "");
    else if (st.is_object())
      s = "";
  }
  return s;
}

bool agent_connected(const chl::test::TestNotifyServer& server) {
  bool up = false;
  for (const auto& n : server.received()) {
    if (n.k8s) continue;
    const auto& ch = n.json["Spec"]["Devices"]["Channels"];
    if (!ch.is_array()) continue;
    for (const auto& c : ch)
      if (c["Target"]["Name"] == "org.qemu.guest_agent.0")
        up = c["Target"].value("State", "") == "connected";
  }
  return up;
}

struct AgentPod {
  Pod pod;
  std::unique_ptr<chl::test::ScriptedAgent> agent;
  std::unique_ptr<chl::test::TestNotifyServer> notify;
  std::unique_ptr<v1::Cmd::Stub> cmd;
};

// The launcher with the scripted agent behind the double's vsock, synced and connected.
bool start(AgentPod& p) {
  if (!guest_runnable()) return false;
  if (const auto no_agent = chl::test::real_vmm_has_no_guest_agent()) {
    chl::test::skip(*no_agent);
    return false;
  }
  p.agent = std::make_unique<chl::test::ScriptedAgent>(p.pod.dir.path() / "qga.sock");
  p.pod.vmm_binary = (p.pod.dir.path() / "vmm.sh").string();
  chl::test::write_file(p.pod.vmm_binary, "#!/bin/sh\nexport VMM_DOUBLE_VSOCK_LISTEN='1024=" +
                                              (p.pod.dir.path() / "qga.sock").string() +
                                              "'\nexec '" + chl::test::vmm_binary() + "' \"$@\"\n");
  fs::permissions(p.pod.vmm_binary, fs::perms::owner_all);
  p.notify =
      std::make_unique<chl::test::TestNotifyServer>(p.pod.share() / "domain-notify-pipe.sock");
  p.cmd = p.pod.serve();
  v1::VMIRequest sync;
  sync.mutable_vmi()->set_vmijson(vmi_json());
  v1::Response r;
  REQUIRE(call([&](auto& c) { return p.cmd->SyncVirtualMachine(&c, sync, &r); }).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << p.pod.output());
  REQUIRE_MESSAGE(chl::test::wait_until(20s, [&] { return agent_connected(*p.notify); }),
                  p.pod.output());
  return true;
}

v1::Response freeze(AgentPod& p, int unfreeze_timeout) {
  v1::FreezeRequest f;
  f.mutable_vmi()->set_vmijson(vmi_json());
  f.set_unfreezetimeoutseconds(unfreeze_timeout);
  v1::Response r;
  REQUIRE(call([&](auto& c) { return p.cmd->FreezeVirtualMachine(&c, f, &r); }, 70s).ok());
  return r;
}

v1::Response vmi_call(AgentPod& p,
                      grpc::Status (v1::Cmd::Stub::*fn)(grpc::ClientContext*, const v1::VMIRequest&,
                                                        v1::Response*)) {
  v1::VMIRequest q;
  q.mutable_vmi()->set_vmijson(vmi_json());
  v1::Response r;
  REQUIRE(call([&](auto& c) { return ((*p.cmd).*fn)(&c, q, &r); }, 70s).ok());
  return r;
}

void finish(AgentPod& p) {
  v1::VMIRequest down;
  down.mutable_vmi()->set_vmijson(vmi_json());
  v1::Response r;
  REQUIRE(call([&](auto& c) { return p.cmd->KillVirtualMachine(&c, down, &r); }).ok());
  CHECK(p.pod.child.wait_for(30s).has_value());
}

}  // namespace

TEST_CASE(
    "virt-launcher mode (cloud-hypervisor): Freeze reads the status, freezes, shows 'frozen' in "
    "the domain with an event - a second Freeze is a success without a second freeze - Unfreeze "
    "thaws and shows 'thawed'") {
  AgentPod p;
  if (!start(p)) return;
  auto r = freeze(p, 0);
  REQUIRE_MESSAGE(r.success(), r.message());
  CHECK(p.agent->freeze_state() == "frozen");
  CHECK(p.agent->calls_of("guest-fsfreeze-freeze").size() == 1);
  // FreezeVMI reads guest-fsfreeze-status before freezing.
  const auto calls = p.agent->calls();
  std::vector<std::string> seq;
  for (const auto& c : calls)
    if (c.command.rfind("guest-fsfreeze-", 0) == 0) seq.push_back(c.command);
  REQUIRE(seq.size() >= 2);
  CHECK(seq[seq.size() - 2] == "guest-fsfreeze-status");
  CHECK(seq.back() == "guest-fsfreeze-freeze");
  // Nothing polls FSFreezeStatus: a domain event carries it (virt-handler copies it into
  // vmi.status.fsFreezeStatus; the snapshot controller waits for it).
  CHECK_MESSAGE(chl::test::wait_until(10s, [&] { return freeze_status(*p.notify) == "frozen"; }),
                p.pod.output());
  // GetGuestInfo says so too.
  v1::EmptyRequest empty;
  v1::GuestInfoResponse gi;
  REQUIRE(call([&](auto& c) { return p.cmd->GetGuestInfo(&c, empty, &gi); }).ok());
  CHECK(nlohmann::json::parse(gi.guestinforesponse())["fsFreezeStatus"] == "frozen");

  // Idempotent: already frozen is success, and no second guest-fsfreeze-freeze is sent.
  r = freeze(p, 0);
  CHECK_MESSAGE(r.success(), r.message());
  CHECK(p.agent->calls_of("guest-fsfreeze-freeze").size() == 1);

  r = vmi_call(p, &v1::Cmd::Stub::UnfreezeVirtualMachine);
  REQUIRE_MESSAGE(r.success(), r.message());
  CHECK(p.agent->freeze_state() == "thawed");
  CHECK(p.agent->calls_of("guest-fsfreeze-thaw").size() == 1);
  CHECK_MESSAGE(chl::test::wait_until(10s, [&] { return freeze_status(*p.notify) == "thawed"; }),
                p.pod.output());
  // Unfreeze of a thawed guest: success, no thaw sent.
  r = vmi_call(p, &v1::Cmd::Stub::UnfreezeVirtualMachine);
  CHECK_MESSAGE(r.success(), r.message());
  CHECK(p.agent->calls_of("guest-fsfreeze-thaw").size() == 1);
  finish(p);
}

TEST_CASE(
    "virt-launcher mode (cloud-hypervisor): without Unfreeze the launcher thaws by itself after "
    "unfreezeTimeoutSeconds (KubeVirt's safety unfreeze) - an Unfreeze in time cancels it") {
  AgentPod p;
  if (!start(p)) return;
  // In time: Unfreeze within the timeout, no thaw afterwards.
  auto r = freeze(p, 3);
  REQUIRE_MESSAGE(r.success(), r.message());
  r = vmi_call(p, &v1::Cmd::Stub::UnfreezeVirtualMachine);
  REQUIRE(r.success());
  const auto thaws = p.agent->calls_of("guest-fsfreeze-thaw").size();
  CHECK(thaws == 1);
  std::this_thread::sleep_for(4s);  // past the cancelled safety thaw
  CHECK(p.agent->calls_of("guest-fsfreeze-thaw").size() == thaws);

  // No Unfreeze: thawed by the launcher 2 s later, and the domain says so.
  r = freeze(p, 2);
  REQUIRE_MESSAGE(r.success(), r.message());
  CHECK(p.agent->freeze_state() == "frozen");
  CHECK_MESSAGE(chl::test::wait_until(15s, [&] { return p.agent->freeze_state() == "thawed"; }),
                p.pod.output());
  CHECK(p.agent->calls_of("guest-fsfreeze-thaw").size() == thaws + 1);
  CHECK_MESSAGE(chl::test::wait_until(10s, [&] { return freeze_status(*p.notify) == "thawed"; }),
                p.pod.output());
  finish(p);
}

TEST_CASE(
    "virt-launcher mode (cloud-hypervisor): SoftReboot goes through the agent "
    "(guest-shutdown mode reboot) while it is connected - Unpause sets the guest's clock "
    "(guest-set-time with the host's time)") {
  AgentPod p;
  if (!start(p)) return;
  auto r = vmi_call(p, &v1::Cmd::Stub::SoftRebootVirtualMachine);
  REQUIRE_MESSAGE(r.success(), r.message());
  REQUIRE(chl::test::wait_until(5s, [&] { return !p.agent->calls_of("guest-shutdown").empty(); }));
  CHECK(p.agent->calls_of("guest-shutdown")[0].arguments == nlohmann::json{{"mode", "reboot"}});

  r = vmi_call(p, &v1::Cmd::Stub::PauseVirtualMachine);
  REQUIRE_MESSAGE(r.success(), r.message());
  CHECK(p.agent->calls_of("guest-set-time").empty());
  r = vmi_call(p, &v1::Cmd::Stub::UnpauseVirtualMachine);
  REQUIRE_MESSAGE(r.success(), r.message());
  REQUIRE_MESSAGE(
      chl::test::wait_until(10s, [&] { return !p.agent->calls_of("guest-set-time").empty(); }),
      p.pod.output());
  const auto t = p.agent->calls_of("guest-set-time")[0].arguments["time"].get<std::int64_t>();
  const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  CHECK(std::llabs(now - t) < 10'000'000'000LL);  // the host's clock, in nanoseconds
  // Taken once: no retries after a success.
  std::this_thread::sleep_for(2s);
  CHECK(p.agent->calls_of("guest-set-time").size() == 1);
  finish(p);
}

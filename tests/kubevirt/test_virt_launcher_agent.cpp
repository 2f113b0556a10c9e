// The guest agent in virt-launcher mode on Cloud Hypervisor, driven as virt-handler drives it:
// the launcher adds a hybrid vsock to the VM, connects through it to the guest's qemu-ga, shows
// the channel "connected" in the domain (virt-handler's AgentConnected, vm.go:665), pushes OS
// info and interfaces with a MODIFIED event, and answers GetGuestInfo / GetUsers /
// GetFilesystems from the poller's cache, GuestPing and Exec through the agent. The double's
// pretend guest "listens" on vsock port 1024 by bridging to a REAL qemu-ga on the host
// (unix-listen, dangerous commands blocked: tests/guest_agent/host_qemu_ga.hpp); against a real
// cloud-hypervisor the guest's own qemu-ga would answer, which the PVH test guest lacks: skipped.
#include "tests/support/real_vmm_limits.hpp"
#include "tests/guest_agent/host_qemu_ga.hpp"
#include "tests/kubevirt/virt_launcher_harness.hpp"

namespace {

// The domain's agent channel state in the newest domain notification ("" when none).
std::string agent_state(const chl::test::TestNotifyServer& server,
                        nlohmann::json* domain = nullptr) {
  std::string state;
  for (const auto& n : server.received()) {
    if (n.k8s) continue;
    const auto& ch = n.json["Spec"]["Devices"]["Channels"];
    if (!ch.is_array()) continue;
    for (const auto& c : ch)
      if (c["Target"]["Name"] == "org.qemu.guest_agent.0") {
        state = c["Target"].value("State", "");
        if (domain) *domain = n.json;
      }
  }
  return state;
}

bool k8s_event_seen(const chl::test::TestNotifyServer& server, const std::string& reason) {
  for (const auto& n : server.received())
    if (n.k8s && n.json.value("reason", "") == reason) return true;
  return false;
}

}  // namespace

TEST_CASE(
    "virt-launcher mode (cloud-hypervisor): the guest agent over hybrid vsock — channel connected, "
    "OS info and interfaces in the domain, GetGuestInfo/GetUsers/GetFilesystems, GuestPing, Exec "
    "with exit codes, disconnected when the agent dies") {
  if (!guest_runnable()) return;
  if (const auto no_agent = chl::test::real_vmm_has_no_guest_agent()) {
    chl::test::skip(*no_agent);
    return;
  }
  Pod pod;
  std::string why;
  auto ga = chl::test::HostQemuGa::start(pod.dir / "ga", pod.dir / "qga.sock", why);
  if (!ga) {
    chl::test::skip(why);
    return;
  }
  // The launcher gives the VMM a clean environment: the pretend guest's listener travels in a
  // wrapper.
  pod.vmm_binary = (pod.dir / "vmm.sh").string();
  chl::test::write_file(pod.vmm_binary, "#!/bin/sh\nexport VMM_DOUBLE_VSOCK_LISTEN='1024=" +
                                     (pod.dir / "qga.sock").string() + "'\nexec '" +
                                     chl::test::vmm_binary() + "' \"$@\"\n");
  fs::permissions(pod.vmm_binary, fs::perms::owner_all);
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  auto cmd = pod.serve();

  v1::VMIRequest sync;
  sync.mutable_vmi()->set_vmijson(vmi_json());
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, sync, &r); }).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());

  // The channel is there from the start and turns "connected"; OS info follows in an event.
  nlohmann::json domain;
  REQUIRE_MESSAGE(
      chl::test::wait_until(20s,
                            [&] {
                              return agent_state(notify, &domain) == "connected" &&
                                     !domain["Status"]["OSInfo"].value("Id", "").empty();
                            }),
      pod.output());
  CHECK(domain["Spec"]["Devices"]["Channels"][0]["Type"] == "unix");
  CHECK(domain["Spec"]["Devices"]["Channels"][0]["Target"]["Type"] == "virtio");
  // netstat.go merges these by MAC; "lo" is never among them.
  for (const auto& i : domain["Status"]["Interfaces"]) CHECK(i["InterfaceName"] != "lo");

  // GetDomain says the same.
  v1::EmptyRequest empty;
  v1::DomainResponse dom;
  REQUIRE(call([&](auto& c) { return cmd->GetDomain(&c, empty, &dom); }).ok());
  CHECK(nlohmann::json::parse(dom.domain())["Spec"]["Devices"]["Channels"][0]["Target"]["State"] ==
        "connected");

  // GetGuestInfo from the cache: the agent's real command list (no AgentVersionNotSupported).
  v1::GuestInfoResponse gi;
  REQUIRE(chl::test::wait_until(20s, [&] {
    if (!call([&](auto& c) { return cmd->GetGuestInfo(&c, empty, &gi); }).ok() ||
        !gi.response().success())
      return false;
    auto j = nlohmann::json::parse(gi.guestinforesponse());
    return j.contains("supportedCommands") && j.contains("hostname") &&
           j.contains("fsFreezeStatus");
  }));
  const auto info = nlohmann::json::parse(gi.guestinforesponse());
  CHECK_FALSE(info["guestAgentVersion"].get<std::string>().empty());
  std::set<std::string> commands;
  for (const auto& c : info["supportedCommands"]) commands.insert(c["name"]);
  for (const char* c : {"guest-ping", "guest-get-time", "guest-info", "guest-shutdown",
                        "guest-network-get-interfaces", "guest-get-fsinfo", "guest-get-host-name",
                        "guest-get-users", "guest-get-timezone", "guest-get-osinfo"})
    CHECK_MESSAGE(commands.count(c) == 1, c);
  CHECK_FALSE(info["os"].value("id", "").empty());
  CHECK(info["fsFreezeStatus"] == "thawed");
  CHECK(info["timezone"].get<std::string>().find(", ") != std::string::npos);

  v1::GuestUserListResponse users;
  REQUIRE(call([&](auto& c) { return cmd->GetUsers(&c, empty, &users); }).ok());
  REQUIRE(users.response().success());
  CHECK(nlohmann::json::parse(users.guestuserlistresponse()).is_array());
  v1::GuestFilesystemsResponse fsr;
  REQUIRE(call([&](auto& c) { return cmd->GetFilesystems(&c, empty, &fsr); }).ok());
  REQUIRE(fsr.response().success());
  const auto fsl = nlohmann::json::parse(fsr.guestfilesystemsresponse());
  REQUIRE(fsl.is_array());
  REQUIRE_FALSE(fsl.empty());
  CHECK(fsl[0].contains("mountPoint"));

  // GuestPing and Exec through the agent.
  v1::GuestPingRequest ping;
  ping.set_domainname("default_testvm");
  ping.set_timeoutseconds(5);
  v1::GuestPingResponse pr;
  REQUIRE(call([&](auto& c) { return cmd->GuestPing(&c, ping, &pr); }).ok());
  CHECK(pr.response().success());

  v1::ExecRequest ex;
  ex.set_domainname("default_testvm");
  ex.set_command("/bin/echo");
  ex.add_args("probe");
  ex.add_args("ok");
  ex.set_timeoutseconds(5);
  v1::ExecResponse er;
  REQUIRE(call([&](auto& c) { return cmd->Exec(&c, ex, &er); }).ok());
  CHECK(er.response().success());
  CHECK(er.exitcode() == 0);
  CHECK(er.stdout() == "probe ok\n");
  ex.set_command("/bin/false");
  ex.clear_args();
  REQUIRE(call([&](auto& c) { return cmd->Exec(&c, ex, &er); }).ok());
  CHECK(er.response().success());  // a non-zero exit is an answer, not a failure
  CHECK(er.exitcode() == 1);

  // The agent dies: the channel turns "disconnected" (an event), GuestPing fails as a gRPC
  // error with a GuestAgentPingFailed event, Exec too; other RPCs keep answering.
  ga->kill();
  CHECK_MESSAGE(chl::test::wait_until(20s, [&] { return agent_state(notify) == "disconnected"; }),
                pod.output());
  auto st = call([&](auto& c) { return cmd->GuestPing(&c, ping, &pr); });
  CHECK_FALSE(st.ok());
  CHECK(st.error_message().find("not connected") != std::string::npos);
  CHECK(chl::test::wait_until(5s, [&] { return k8s_event_seen(notify, "GuestAgentPingFailed"); }));
  ex.set_command("/bin/true");
  CHECK_FALSE(call([&](auto& c) { return cmd->Exec(&c, ex, &er); }).ok());
  REQUIRE(call([&](auto& c) { return cmd->GetDomain(&c, empty, &dom); }).ok());
  CHECK(nlohmann::json::parse(dom.domain())["Spec"]["Devices"]["Channels"][0]["Target"]["State"] ==
        "disconnected");

  // The VM shuts down as usual.
  v1::VMIRequest down;
  down.mutable_vmi()->set_vmijson(vmi_json());
  REQUIRE(call([&](auto& c) { return cmd->KillVirtualMachine(&c, down, &r); }).ok());
  CHECK(pod.child.wait_for(30s).has_value());
}

// The guest agent on the libvirt path (QEMU, TCG here) with Debian's REAL qemu-ga inside the
// Linux test guest (tests/guests/linux/agent starts it on the org.qemu.guest_agent.0
// virtio-serial port), driven through KubeVirt's protocol as virt-handler drives it. The launcher
// reaches the agent through libvirt (virDomainQemuAgentCommand) and learns connected/disconnected
// from libvirt's agent lifecycle event, as KubeVirt's virt-launcher does; the same client, poller
// and RPC code serve the Cloud Hypervisor path (test_virt_launcher_agent*.cpp). Asserted: the
// channel "connected" in the domain, OS info, the interface with the guest's DHCP address (merged
// by MAC), GetGuestInfo / GetUsers / GetFilesystems, GuestPing, Exec with exit codes, Freeze /
// Unfreeze with the guest really frozen (qemu-ga refuses guest-exec while frozen), the clock set
// after Unpause, and a soft reboot through the agent. Access credentials in the same boot: the
// VMI's qemuGuestAgent SSH keys and password from Secrets at KubeVirt's mount path, checked INSIDE
// the guest (~chl/.ssh/authorized_keys as qemu-ga writes it, /etc/shadow), reported in the
// domain, and a Secret change re-applied; and virt-probe (KubeVirt's exec-probe binary) against
// this launcher, with KubeVirt's exit codes.
#include <regex>

#include "tests/kubevirt/access_secrets.hpp"
#include "tests/kubevirt/virt_launcher_harness.hpp"

namespace {

// The agent channel's state and the domain of the newest domain notification.
std::string channel_state(const chl::test::TestNotifyServer& server, nlohmann::json* domain) {
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

// How many times the notifications went from "connected" to "disconnected".
int disconnects(const chl::test::TestNotifyServer& server) {
  int n = 0;
  std::string prev;
  for (const auto& r : server.received()) {
    if (r.k8s) continue;
    const auto& ch = r.json["Spec"]["Devices"]["Channels"];
    if (!ch.is_array() || ch.empty()) continue;
    const std::string s = ch[0]["Target"].value("State", "");
    if (prev == "connected" && s == "disconnected") ++n;
    prev = s;
  }
  return n;
}

struct ExecOut {
  bool ok = false;
  int exit_code = -1;
  std::string out, error;
};

ExecOut exec(v1::Cmd::Stub& cmd, const std::string& script) {
  v1::ExecRequest ex;
  ex.set_domainname("default_testvm");
  ex.set_command("/bin/sh");
  ex.add_args("-c");
  ex.add_args(script);
  ex.set_timeoutseconds(20);
  v1::ExecResponse er;
  ExecOut o;
  auto st = call([&](auto& c) { return cmd.Exec(&c, ex, &er); });
  o.ok = st.ok() && er.response().success();
  o.error = st.ok() ? er.response().message() : st.error_message();
  o.exit_code = er.exitcode();
  o.out = er.stdout();
  return o;
}

v1::Response vmi_call(v1::Cmd::Stub& cmd, const v1::VMIRequest& vmi,
                      grpc::Status (v1::Cmd::Stub::*fn)(grpc::ClientContext*, const v1::VMIRequest&,
                                                        v1::Response*)) {
  v1::Response r;
  REQUIRE(call([&](auto& c) { return (cmd.*fn)(&c, vmi, &r); }, 70s).ok());
  return r;
}

}  // namespace

TEST_CASE(
    "virt-launcher mode (qemu-kvm): Debian's qemu-ga in the guest through libvirt — connected, OS "
    "info, the DHCP address by MAC, guest info, users, filesystems, ping, exec exit codes, "
    "freeze/thaw, the clock after unpause, soft reboot through the agent") {
  if (!chl::test::libvirt_runnable()) return;  // says why
  std::string why;
  auto guest = chl::test::find_linux_guest(&why);
  if (!guest) {
    chl::test::skip(why);
    return;
  }
  if (!fs::exists("/usr/sbin/qemu-ga")) {
    chl::test::skip(
        "qemu-ga is not installed (qemu-guest-agent; scripts/setup.sh): the test guest has no "
        "agent");
    return;
  }
  PodNetns pn;
  if (!pn.up_or_skip()) return;
  Pod pod;
  // Access-credential Secrets where KubeVirt mounts them (<private dir>/secret/<name>-access-cred),
  // written before the launcher starts (start_non_root hands the pod's files to uid 107);
  // batches of 300 ms instead of KubeVirt's 15 s (the flag is ours; the logic is the same).
  pod.extra_args = {"--access-credentials-batch-ms", "300"};
  const fs::path keys_dir = pod.priv() / "secret" / "guest-keys-access-cred";
  const fs::path pass_dir = pod.priv() / "secret" / "guest-pass-access-cred";
  const std::string k1 = chl::test::make_ssh_key('a', "alice@example"),
                    k2 = chl::test::make_ssh_key('b', "bob@example"),
                    k3 = chl::test::make_ssh_key('c', "carol@example");
  chl::test::write_secret(keys_dir, {{"key1", k1 + "\n" + k2 + "\n"}}, 1);
  chl::test::write_secret(pass_dir, {{"chl", "s3cret\n"}}, 1);
  chl::test::net::Phase1 p1{pn.ns.name()};
  {
    const auto e = chl::test::net::kubevirt_phase1_masquerade(p1);
    REQUIRE_MESSAGE(e.empty(), e);
  }
  const auto kb = pod.cdisks() / "kernel-boot";
  fs::create_directories(kb);
  fs::copy_file(guest->kernel, kb / "vmlinuz");
  auto initrd = chl::test::run_command(
      {"bash", (chl::test::source_dir() / "tests/guests/linux/net-initrd.sh").string(),
       guest->kernel.parent_path().string(), (kb / "initrd.cpio.gz").string()});
  if (initrd.exit_code == 3) {
    chl::test::skip(initrd.output);
    return;
  }
  REQUIRE_MESSAGE(initrd.exit_code == 0, initrd.output);
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  std::unique_ptr<v1::Cmd::Stub> cmd;
  if (auto w = pn.start_non_root(pod, cmd); !w.empty()) {
    chl::test::skip(w);
    return;
  }
  auto j = nlohmann::json::parse(vmi_json());
  j["spec"]["domain"]["memory"]["guest"] = "256Mi";
  j["status"]["memory"] = {
      {"guestAtBoot", "256Mi"}, {"guestCurrent", "256Mi"}, {"guestRequested", "256Mi"}};
  j["spec"]["domain"]["firmware"]["kernelBoot"] = {
      {"kernelArgs", "console=ttyS0 quiet panic=-1 no_timer_check"},
      {"container",
       {{"image", "registry.example/linux:1"},
        {"kernelPath", "/vmlinuz"},
        {"initrdPath", "/initrd.cpio.gz"}}}};
  const std::string mac = "02:00:00:aa:bb:cc";
  j["spec"]["domain"]["devices"]["interfaces"] = nlohmann::json::array(
      {{{"name", "default"}, {"macAddress", mac}, {"masquerade", nlohmann::json::object()}}});
  j["spec"]["networks"] = nlohmann::json::parse(R"([{"name": "default", "pod": {}}])");
  // chl: the guest's user with a home (tests/guests/linux/net-initrd.sh).
  j["spec"]["accessCredentials"] = nlohmann::json::parse(R"([
    {"sshPublicKey": {"source": {"secret": {"secretName": "guest-keys"}},
                      "propagationMethod": {"qemuGuestAgent": {"users": ["chl"]}}}},
    {"userPassword": {"source": {"secret": {"secretName": "guest-pass"}},
                      "propagationMethod": {"qemuGuestAgent": {}}}}])");
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(j.dump());
  (*vmi.mutable_options()->mutable_interfacedomainattachment())["default"] = "tap";
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }, 120s).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());

  const auto console_sock = pod.priv() / kUid / "virt-serial0";
  REQUIRE_MESSAGE(chl::test::wait_until(30s, [&] { return fs::exists(console_sock); }),
                  pod.output());
  const std::string console = chl::test::read_socket_until(console_sock, "chl-net: ready", 300s);
  REQUIRE_MESSAGE(console.find("chl-net: ready") != std::string::npos, console << "\n"
                                                                               << pod.output());
  REQUIRE_MESSAGE(console.find("chl-guest: agent started on virtio-serial") != std::string::npos,
                  console);
  std::smatch lease;
  REQUIRE_MESSAGE(std::regex_search(console, lease, std::regex("chl-net: lease ip=([0-9.]+)")),
                  console);
  const std::string ip = lease[1];

  // libvirt's agent lifecycle event -> the channel "connected"; the poller's first round at once:
  // OS info and the interfaces follow in domain events.
  nlohmann::json domain;
  REQUIRE_MESSAGE(
      chl::test::wait_until(60s,
                            [&] {
                              if (channel_state(notify, &domain) != "connected") return false;
                              if (domain["Status"]["OSInfo"].value("Id", "") != "debian")
                                return false;
                              for (const auto& i : domain["Status"]["Interfaces"])
                                if (i.value("Mac", "") == mac && i.value("Ip", "") == ip)
                                  return true;
                              return false;
                            }),
      domain.dump() << "\n"
                    << pod.output());
  CHECK(domain["Status"]["OSInfo"].value("KernelRelease", "") == guest->kernel_release);
  for (const auto& i : domain["Status"]["Interfaces"]) CHECK(i["InterfaceName"] != "lo");

  // GetGuestInfo from the cache: qemu-ga 7.2's real command list, the OS, the freeze state.
  v1::EmptyRequest empty;
  v1::GuestInfoResponse gi;
  REQUIRE(chl::test::wait_until(30s, [&] {
    if (!call([&](auto& c) { return cmd->GetGuestInfo(&c, empty, &gi); }).ok() ||
        !gi.response().success())
      return false;
    const auto g = nlohmann::json::parse(gi.guestinforesponse());
    return g.contains("supportedCommands") && g.contains("fsFreezeStatus");
  }));
  const auto info = nlohmann::json::parse(gi.guestinforesponse());
  std::set<std::string> commands;
  for (const auto& c : info["supportedCommands"]) commands.insert(c["name"]);
  for (const char* c : {"guest-ping", "guest-get-time", "guest-info", "guest-shutdown",
                        "guest-network-get-interfaces", "guest-get-fsinfo", "guest-get-host-name",
                        "guest-get-users", "guest-get-timezone", "guest-get-osinfo"})
    CHECK_MESSAGE(commands.count(c) == 1, c);
  CHECK(info["os"].value("id", "") == "debian");
  CHECK(info["fsFreezeStatus"] == "thawed");
  v1::GuestUserListResponse users;
  REQUIRE(call([&](auto& c) { return cmd->GetUsers(&c, empty, &users); }).ok());
  REQUIRE(users.response().success());
  CHECK(nlohmann::json::parse(users.guestuserlistresponse()).is_array());  // nobody logged in
  v1::GuestFilesystemsResponse fsr;
  REQUIRE(call([&](auto& c) { return cmd->GetFilesystems(&c, empty, &fsr); }).ok());
  REQUIRE(fsr.response().success());
  bool data = false;
  for (const auto& f : nlohmann::json::parse(fsr.guestfilesystemsresponse()))
    data = data ||
           (f.value("mountPoint", "") == "/mnt/data" && f.value("fileSystemType", "") == "ext4");
  CHECK_MESSAGE(data, fsr.guestfilesystemsresponse());

  v1::GuestPingRequest ping;
  ping.set_domainname("default_testvm");
  ping.set_timeoutseconds(10);
  v1::GuestPingResponse pr;
  REQUIRE(call([&](auto& c) { return cmd->GuestPing(&c, ping, &pr); }).ok());
  CHECK(pr.response().success());

  // Exec: stdout, and a non-zero exit as a successful answer with that code.
  auto e = exec(*cmd, "echo probe ok");
  CHECK_MESSAGE(e.ok, e.error);
  CHECK(e.exit_code == 0);
  CHECK(e.out == "probe ok\n");
  e = exec(*cmd, "exit 3");
  CHECK_MESSAGE(e.ok, e.error);
  CHECK(e.exit_code == 3);

  // Access credentials: applied through qemu-ga once it is up (a pass with the agent offline is
  // retried at the next batch), reported as Spec.Metadata.KubeVirt.AccessCredential in a domain
  // event. Inside the guest: ~chl/.ssh/authorized_keys holds the keys (qemu-ga 7.2 joins them
  // with newlines, no final one: read line by line), the directory 0700 and the
  // file 0600, both the user's (qga/commands-posix-ssh.c), and the password is in /etc/shadow
  // (qemu-ga ran the guest's chpasswd).
  REQUIRE_MESSAGE(
      chl::test::wait_until(
          60s, [&] { return chl::test::access_credential(notify)["Succeeded"] == true; }),
      chl::test::access_credential(notify).dump() << "\n"
                                                  << pod.output());
  CHECK(chl::test::access_credential(notify)["Message"] == "");
  const std::string keys_in_guest =
      "while IFS= read -r l || [ -n \"$l\" ]; do echo \"$l\"; done "
      "</home/chl/.ssh/authorized_keys; stat -c '%a %u:%g' /home/chl/.ssh "
      "/home/chl/.ssh/authorized_keys";
  e = exec(*cmd, keys_in_guest);
  REQUIRE_MESSAGE(e.ok, e.error);
  CHECK(e.out == k1 + "\n" + k2 + "\n700 1000:1000\n600 1000:1000\n");
  e = exec(*cmd, "grep '^chl:' /etc/shadow | cut -d: -f2");
  REQUIRE_MESSAGE(e.ok, e.error);
  CHECK_MESSAGE(e.out.rfind("$6$", 0) == 0, e.out);  // was "!": sha512-crypted by chpasswd
  CHECK_MESSAGE(chl::test::run_command({"busybox", "mkpasswd", "-m", "sha512", "s3cret",
                                        e.out.substr(3, e.out.find('$', 3) - 3)})
                        .output == e.out,
                "the guest's hash is not of s3cret: " << e.out);
  // A Secret change, as the kubelet makes it: the keys in the guest are replaced.
  chl::test::write_secret(keys_dir, {{"key1", k3 + "\n"}}, 2);
  CHECK_MESSAGE(chl::test::wait_until(20s,
                                      [&] {
                                        auto k = exec(*cmd, keys_in_guest);
                                        return k.ok && k.out == k3 + "\n700 1000:1000\n600 "
                                                                     "1000:1000\n";
                                      }),
                exec(*cmd, keys_in_guest).out << "\n"
                                              << pod.output());
  CHECK(chl::test::access_credential(notify)["Succeeded"] == true);

  // virt-probe, as the pod's exec probes run it (KubeVirt's template.go / rendercontainer.go),
  // against this launcher: guest-ping, and exec with the guest command's exit code.
  const std::string sock = (pod.share() / "sockets" / "launcher-sock").string();
  auto probe = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {(chl::test::binary_dir() / "bin" / "virt-probe").string(),
                                     "--socket",
                                     sock,
                                     "--domainName",
                                     "default_testvm",
                                     "--timeoutSeconds",
                                     "10"};
    argv.insert(argv.end(), args.begin(), args.end());
    return chl::test::run_command(argv);
  };
  auto p = probe({"--guestAgentPing"});
  CHECK_MESSAGE(p.exit_code == 0, p.output);
  p = probe({"--command", "/bin/echo", "--", "hello", "probe"});
  CHECK_MESSAGE(p.exit_code == 0, p.output);
  CHECK(p.output.find("hello probe\n") != std::string::npos);
  p = probe({"--command", "/bin/false", "--"});
  CHECK_MESSAGE(p.exit_code == 1, p.output);  // the guest command's exit code
  p = probe({"--command", "/bin/sh", "--", "-c", "exit 7"});
  CHECK_MESSAGE(p.exit_code == 7, p.output);

  // Freeze: /mnt/data (ext2 on a loop device) is frozen; qemu-ga then refuses guest-exec, so the
  // guest really is frozen. A second Freeze reads "frozen" and succeeds without freezing again
  // (qemu-ga would refuse a second guest-fsfreeze-freeze). Unfreeze thaws; exec works again.
  v1::FreezeRequest fr;
  fr.mutable_vmi()->set_vmijson(j.dump());
  fr.set_unfreezetimeoutseconds(0);
  REQUIRE(call([&](auto& c) { return cmd->FreezeVirtualMachine(&c, fr, &r); }, 70s).ok());
  REQUIRE_MESSAGE(r.success(), r.message());
  CHECK_MESSAGE(chl::test::wait_until(10s,
                                      [&] {
                                        (void)channel_state(notify, &domain);
                                        return domain["Status"]["FSFreezeStatus"].value(
                                                   "Status", "") == "frozen";
                                      }),
                domain.dump());
  e = exec(*cmd, "true");
  CHECK_FALSE(e.ok);
  CHECK_MESSAGE(e.error.find("disabled") != std::string::npos, e.error);
  REQUIRE(call([&](auto& c) { return cmd->FreezeVirtualMachine(&c, fr, &r); }, 70s).ok());
  CHECK_MESSAGE(r.success(), r.message());
  REQUIRE(call([&](auto& c) { return cmd->GetGuestInfo(&c, empty, &gi); }).ok());
  CHECK(nlohmann::json::parse(gi.guestinforesponse())["fsFreezeStatus"] == "frozen");
  r = vmi_call(*cmd, vmi, &v1::Cmd::Stub::UnfreezeVirtualMachine);
  REQUIRE_MESSAGE(r.success(), r.message());
  CHECK(chl::test::wait_until(10s, [&] {
    (void)channel_state(notify, &domain);
    return domain["Status"]["FSFreezeStatus"].value("Status", "") == "thawed";
  }));
  e = exec(*cmd, "echo thawed > /mnt/data/x && cat /mnt/data/x");
  CHECK_MESSAGE(e.ok, e.error);
  CHECK(e.out == "thawed\n");

  // The clock: set wrong in the guest, then Pause/Unpause: the launcher sets it (guest-set-time
  // through libvirt's virDomainSetTime, as KubeVirt's setGuestTime).
  e = exec(*cmd, "date -s @1000000000 >/dev/null; date +%s");
  REQUIRE_MESSAGE(e.ok, e.error);
  CHECK(std::stoll(e.out) < 1000001000LL);
  r = vmi_call(*cmd, vmi, &v1::Cmd::Stub::PauseVirtualMachine);
  REQUIRE_MESSAGE(r.success(), r.message());
  r = vmi_call(*cmd, vmi, &v1::Cmd::Stub::UnpauseVirtualMachine);
  REQUIRE_MESSAGE(r.success(), r.message());
  long long guest_now = 0, host_now = 0;
  CHECK_MESSAGE(chl::test::wait_until(30s,
                                      [&] {
                                        auto d = exec(*cmd, "date +%s");
                                        if (!d.ok) return false;
                                        guest_now = std::stoll(d.out);
                                        host_now =
                                            std::chrono::duration_cast<std::chrono::seconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count();
                                        return std::llabs(host_now - guest_now) < 30;
                                      }),
                "guest " << guest_now << ", host " << host_now << "\n"
                         << pod.output());

  // Soft reboot through the agent: qemu-ga runs the guest's shutdown -r; the guest boots again
  // (its uptime starts over) and its agent connects again (libvirt: disconnected, connected).
  e = exec(*cmd, "cut -d. -f1 /proc/uptime");
  REQUIRE_MESSAGE(e.ok, e.error);
  const long up_before = std::stol(e.out);
  const int disc_before = disconnects(notify);
  r = vmi_call(*cmd, vmi, &v1::Cmd::Stub::SoftRebootVirtualMachine);
  REQUIRE_MESSAGE(r.success(), r.message());
  CHECK_MESSAGE(chl::test::wait_until(60s, [&] { return disconnects(notify) > disc_before; }),
                pod.output());
  long up_after = -1;
  CHECK_MESSAGE(chl::test::wait_until(300s,
                                      [&] {
                                        if (channel_state(notify, nullptr) != "connected")
                                          return false;
                                        auto u = exec(*cmd, "cut -d. -f1 /proc/uptime");
                                        if (!u.ok) return false;
                                        up_after = std::stol(u.out);
                                        return true;
                                      }),
                pod.output());
  CHECK_MESSAGE(up_after >= 0, "the agent did not come back");
  CHECK_MESSAGE(up_after < up_before, "uptime before " << up_before << ", after " << up_after);

  kill_and_delete(*cmd, vmi);
  auto st = pod.child.wait_for(60s);
  REQUIRE(st);
  CHECK_MESSAGE(*st, pod.output());
}

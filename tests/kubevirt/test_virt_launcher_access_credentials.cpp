// Access credentials and virt-probe in virt-launcher mode on Cloud Hypervisor, driven as
// virt-handler and the kubelet drive them. The VMI names two Secrets with
// propagationMethod.qemuGuestAgent; they are laid out as the kubelet's atomic writer mounts them
// at KubeVirt's path (<private dir>/secret/<name>-access-cred/: ..<timestamp>/, ..data, key
// symlinks) and changed the way it changes them (a new ..<timestamp>, ..data swapped by rename).
// The guest's agent is a SCRIPTED stand-in behind the VMM double's hybrid vsock (never a real
// host qemu-ga: it would write keys and passwords on the host), which checks each command's
// arguments as qemu-ga does and keeps the pretend guest's authorized_keys and passwords.
// Against a real cloud-hypervisor the guest itself would have to run an agent: skipped.
#include "tests/support/real_vmm_limits.hpp"
#include "tests/kubevirt/access_secrets.hpp"
#include "tests/kubevirt/scripted_agent.hpp"
#include "tests/kubevirt/virt_launcher_harness.hpp"

namespace {

using chl::test::access_credential;
using chl::test::write_secret;

std::string make_key(char seed, const std::string& comment) {
  return chl::test::make_ssh_key(seed, comment);
}

std::string vmi_with_credentials() {
  auto j = nlohmann::json::parse(vmi_json());
  j["spec"]["accessCredentials"] = nlohmann::json::parse(R"([
    {"sshPublicKey": {"source": {"secret": {"secretName": "my-keys"}},
                      "propagationMethod": {"qemuGuestAgent": {"users": ["fedora", "root"]}}}},
    {"userPassword": {"source": {"secret": {"secretName": "my-pass"}},
                      "propagationMethod": {"qemuGuestAgent": {}}}}])");
  return j.dump();
}

std::string virt_probe() { return (chl::test::binary_dir() / "bin" / "virt-probe").string(); }

}  // namespace

TEST_CASE(
    "virt-launcher mode (cloud-hypervisor): access credentials through the guest agent — offline "
    "reported, applied once the agent is up, a Secret change re-applied, a malformed key named, "
    "and "
    "virt-probe (guest-ping and exec forms) with KubeVirt exit codes") {
  if (!guest_runnable()) return;
  if (const auto no_agent = chl::test::real_vmm_has_no_guest_agent()) {
    chl::test::skip(*no_agent);
    return;
  }
  Pod pod;
  const fs::path agent_sock = pod.dir.path() / "agent.sock";
  pod.vmm_binary = (pod.dir.path() / "vmm.sh").string();
  chl::test::write_file(pod.vmm_binary,
                        "#!/bin/sh\nexport VMM_DOUBLE_VSOCK_LISTEN='1024=" + agent_sock.string() +
                            "'\nexec '" + chl::test::vmm_binary() + "' \"$@\"\n");
  fs::permissions(pod.vmm_binary, fs::perms::owner_all);
  // Batches of 300 ms instead of KubeVirt's 15 s (the flag is ours; the logic is the same).
  pod.extra_args = {"--access-credentials-batch-ms", "300"};
  const fs::path keys_dir = pod.priv() / "secret" / "my-keys-access-cred";
  const fs::path pass_dir = pod.priv() / "secret" / "my-pass-access-cred";
  const std::string k1 = make_key('a', "alice@example"), k2 = make_key('b', "bob@example"),
                    k3 = make_key('c', "carol@example");
  write_secret(keys_dir, {{"key1", k1 + "\n\n" + k2 + "\n"}}, 1);
  write_secret(pass_dir, {{"fedora", "s3cret\n"}}, 1);

  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  auto cmd = pod.serve();
  v1::VMIRequest sync;
  sync.mutable_vmi()->set_vmijson(vmi_with_credentials());
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, sync, &r); }).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());

  // No agent yet: the pass says so (reloadCredentialFiles' ping), in a MODIFIED event.
  REQUIRE_MESSAGE(chl::test::wait_until(20s,
                                        [&] {
                                          auto a = access_credential(notify);
                                          return a.is_object() &&
                                                 a["Message"] == "Guest agent is offline";
                                        }),
                  pod.output());
  CHECK(access_credential(notify)["Succeeded"] == false);

  // The agent comes up: the client reconnects (backoff up to 10 s) and the next batch applies.
  chl::test::ScriptedAgent agent(agent_sock);
  REQUIRE(agent.ok());
  REQUIRE_MESSAGE(
      chl::test::wait_until(30s, [&] { return access_credential(notify)["Succeeded"] == true; }),
      pod.output());
  CHECK(access_credential(notify)["Message"] == "");
  auto keys = agent.authorized_keys();
  CHECK(keys["fedora"] == std::vector<std::string>{k1, k2});
  CHECK(keys["root"] == std::vector<std::string>{k1, k2});
  CHECK(agent.passwords()["fedora"] ==
        "s3cret");  // sent base64, crypted false: checked by the stand-in
  for (const auto& c : agent.commands("guest-ssh-add-authorized-keys"))
    CHECK(c["arguments"]["reset"] == true);  // libvirt's AuthorizedSSHKeysSet, flags 0
  for (const auto& c : agent.commands("guest-set-user-password")) {
    CHECK(c["arguments"]["crypted"] == false);
    CHECK(c["arguments"]["password"] == chl::test::ScriptedAgent::base64("s3cret"));
  }
  // The pass began with a guest-ping.
  CHECK_FALSE(agent.commands("guest-ping").empty());

  // The Secret changes as the kubelet changes it: picked up by the watch and re-applied.
  write_secret(keys_dir, {{"key1", k1 + "\n"}, {"key2", k3 + "\n"}}, 2);
  CHECK_MESSAGE(chl::test::wait_until(
                    10s,
                    [&] {
                      return agent.authorized_keys()["root"] == std::vector<std::string>{k1, k3};
                    }),
                pod.output());
  CHECK(agent.authorized_keys()["fedora"] == std::vector<std::string>{k1, k3});

  // A malformed key: named (Secret, key, line), the users' keys left as they are, the password
  // still applied, the launcher serving on.
  const auto password_calls = agent.commands("guest-set-user-password").size();
  write_secret(keys_dir, {{"key1", k1 + "\nnot-a-key at all\n"}, {"key2", k3 + "\n"}}, 3);
  REQUIRE_MESSAGE(chl::test::wait_until(10s,
                                        [&] {
                                          auto a = access_credential(notify);
                                          return a["Succeeded"] == false &&
                                                 a["Message"].get<std::string>().find("my-keys") !=
                                                     std::string::npos;
                                        }),
                  pod.output());
  const std::string msg = access_credential(notify)["Message"];
  CHECK_MESSAGE(msg.find("key1 line 2") != std::string::npos, msg);
  CHECK(agent.authorized_keys()["root"] == std::vector<std::string>{k1, k3});
  // The error is reported as the pass reads the Secrets, before it sends the password: wait for it.
  CHECK(chl::test::wait_until(
      10s, [&] { return agent.commands("guest-set-user-password").size() > password_calls; }));
  v1::EmptyRequest empty;
  CHECK(call([&](auto& c) { return cmd->Ping(&c, empty, &r); }).ok());
  // A Secret left without any key is named too.
  write_secret(keys_dir, {}, 4);
  CHECK_MESSAGE(
      chl::test::wait_until(10s,
                            [&] {
                              return access_credential(notify)["Message"].get<std::string>().find(
                                         "no SSH public key") != std::string::npos;
                            }),
      pod.output());
  CHECK(agent.authorized_keys()["root"] == std::vector<std::string>{k1, k3});  // not wiped
  // Fixed: applied again (a failed pass is retried at the next batch).
  write_secret(keys_dir, {{"key1", k2 + "\n"}}, 5);
  CHECK_MESSAGE(
      chl::test::wait_until(10s, [&] { return access_credential(notify)["Succeeded"] == true; }),
      pod.output());
  CHECK(agent.authorized_keys()["root"] == std::vector<std::string>{k2});

  // virt-probe, as the pod's exec probes run it (template.go:1468, rendercontainer.go:268).
  const std::string sock = (pod.share() / "sockets" / "launcher-sock").string();
  auto probe = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {virt_probe(),     "--socket",         sock, "--domainName",
                                     "default_testvm", "--timeoutSeconds", "2"};
    argv.insert(argv.end(), args.begin(), args.end());
    return chl::test::run_command(argv);
  };
  auto p = probe({"--guestAgentPing"});
  CHECK_MESSAGE(p.exit_code == 0, p.output);
  p = probe({"--command", "/bin/echo", "--", "hello", "probe"});
  CHECK_MESSAGE(p.exit_code == 0, p.output);
  CHECK(p.output.find("hello probe\n\n") != std::string::npos);  // fmt.Println(stdOut)
  p = probe({"--command", "/bin/false", "--"});
  CHECK_MESSAGE(p.exit_code == 1, p.output);  // the guest command's exit code
  p = probe({"--command", "/no/such", "--"});
  CHECK_MESSAGE(p.exit_code == 255, p.output);  // an error without an answer: os.Exit(-1)
  CHECK(p.output.find("Failed executing the command") != std::string::npos);
  p = probe({"--guestAgentPing", "--no-such-flag"});
  CHECK(p.exit_code == 2);  // pflag's ExitOnError
  CHECK(p.output.find("unknown flag: --no-such-flag") != std::string::npos);

  // The agent goes: the probe fails (1), and the next pass says the agent is offline.
  agent.stop();
  CHECK(chl::test::wait_until(20s, [&] { return probe({"--guestAgentPing"}).exit_code == 1; }));
  write_secret(keys_dir, {{"key1", k1 + "\n"}}, 6);
  CHECK_MESSAGE(
      chl::test::wait_until(
          10s, [&] { return access_credential(notify)["Message"] == "Guest agent is offline"; }),
      pod.output());

  v1::VMIRequest down;
  down.mutable_vmi()->set_vmijson(vmi_with_credentials());
  REQUIRE(call([&](auto& c) { return cmd->KillVirtualMachine(&c, down, &r); }).ok());
  CHECK(pod.child.wait_for(30s).has_value());
}

// virt-launcher mode (Cloud Hypervisor): the guest's console log where KubeVirt's pod reads it.
// virt-controller renders a `guest-console-log` sidecar running
// `virt-tail --logfile /var/run/kubevirt-private/<vmi-uid>/virt-serial0-log`
// (pkg/virt-controller/services/serialconsolelog.go:19); KubeVirt's domain writes that file through
// virtlogd, appending (converter/compute/console.go:78-83, append="on"), when logSerialConsole is
// true or absent with the cluster's serial console log not disabled (virtwrap/manager.go:1432).
#include "tests/kubevirt/virt_launcher_harness.hpp"

namespace {

// A VM Synced with `vmi` (and `options`), Running, then killed and deleted. The launcher's output.
std::string run_once(Pod& pod, const std::string& vmi_text, const v1::VirtualMachineOptions* options,
                     const std::function<void()>& while_running) {
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  auto cmd = pod.serve();
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(vmi_text);
  if (options) *vmi.mutable_options() = *options;
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  REQUIRE_MESSAGE(chl::test::wait_until(30s, [&] { return reported_running(notify); }), states_text(notify) << "\n" << pod.output());
  // The guest has printed its command line once the console socket replays it.
  const auto console = pod.priv() / kUid / "virt-serial0";
  REQUIRE(chl::test::wait_until(10s, [&] { return fs::exists(console); }));
  const std::string seen = chl::test::read_socket_until(console, "kv-flow", 10s);
  REQUIRE_MESSAGE(seen.find("kv-flow") != std::string::npos, seen);
  while_running();
  kill_and_delete(*cmd, vmi);
  auto st = pod.child.wait_for(60s);
  REQUIRE(st);
  REQUIRE(*st);
  CHECK_MESSAGE(((*st)->exited && (*st)->code == 0), pod.output());
  return pod.output();
}

}  // namespace

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): the guest's console log is <private>/<uid>/virt-serial0-log, guest-console-log's file, appended to") {
  if (!guest_runnable()) return;
  Pod pod;
  const auto log = pod.priv() / kUid / "virt-serial0-log";
  // What an earlier compute container of this pod wrote (the private volume outlives it): kept.
  fs::create_directories(log.parent_path());
  chl::test::write_file(log, "an earlier run's line\n");
  const std::string out = run_once(pod, vmi_json(), nullptr, [&] {
    CHECK_MESSAGE(chl::test::wait_until(10s, [&] { return chl::test::read_file(log).find("kv-flow") != std::string::npos; }),
                  chl::test::read_file(log));
  });
  const std::string text = chl::test::read_file(log);
  CHECK_MESSAGE(text.rfind("an earlier run's line\n", 0) == 0, text);  // appended, not truncated
  CHECK(text.find("kv-flow") != std::string::npos);
  // (A log the launcher creates is mode 0600: tests/console_bridge; the pod's uid reads it.)
  // Not in the state directory any more (where `run` keeps it).
  CHECK_FALSE(fs::exists(pod.ephemeral() / "ch-launcher" / "virt-serial0-log"));
  CHECK_MESSAGE(out.find(log.string()) != std::string::npos, out);
}

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): no console log when KubeVirt's would have none (logSerialConsole: false, or the cluster's DisableSerialConsoleLog)") {
  if (!guest_runnable()) return;
  Pod pod;
  const auto log = pod.priv() / kUid / "virt-serial0-log";
  std::string vmi = vmi_json();
  v1::VirtualMachineOptions options;
  SUBCASE("the VMI's logSerialConsole: false") {
    auto j = nlohmann::json::parse(vmi);
    j["spec"]["domain"]["devices"]["logSerialConsole"] = false;
    vmi = j.dump();
  }
  SUBCASE("the cluster's serial console log disabled, the VMI silent") {
    options.mutable_clusterconfig()->set_serialconsolelogdisabled(true);
  }
  // The console itself works (run_once reads the guest's output on virt-serial0); no log file.
  const std::string out = run_once(pod, vmi, &options, [&] { CHECK_FALSE(fs::exists(log)); });
  CHECK_FALSE(fs::exists(log));
  CHECK_FALSE(fs::exists(pod.ephemeral() / "ch-launcher" / "virt-serial0-log"));
  CHECK_MESSAGE(out.find("(log off)") != std::string::npos, out);
}

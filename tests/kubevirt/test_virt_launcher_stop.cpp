// ch-launcher in virt-launcher mode: Kill is final, SIGTERM is bounded, nothing the launcher
// started outlives it (issue #34). Built twice like test_virt_launcher.cpp: Cloud Hypervisor
// (lane vmm) and the libvirt path (--hypervisor kvm, lane qemu). The guest ignores the power
// button (the PVH test guest's `ignore-acpi`), so only a forced stop ends it. Each case ends
// with the final Shutoff/Destroyed, a bounded exit and no process of the launcher's left: its
// VMM (by the pid it reported), its descendants, and on the libvirt path the libvirtd and
// virtlogd this launcher started (by the pids in their pid files) — never other processes.
// The exit code is not asserted here: in virt-launcher mode it is the protocol's business
// (docs/kubevirt/lifecycle.md); `run`'s exit codes are asserted in test_launcher_kill /
// test_libvirt_kill.
#include <dirent.h>
#include <sys/file.h>

#include <map>
#include <thread>

#include "tests/kubevirt/virt_launcher_harness.hpp"

namespace {

// The VMI with a guest that ignores the ACPI power button.
v1::VMIRequest deaf_vmi() {
  auto j = nlohmann::json::parse(vmi_json());
  j["spec"]["domain"]["firmware"]["kernelBoot"]["kernelArgs"] = "console=ttyS0 ignore-acpi";
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(j.dump());
  return vmi;
}

// Every process whose parent chain leads to `root` (root excluded), from /proc.
std::vector<pid_t> descendants(pid_t root) {
  std::map<pid_t, pid_t> parent;
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
      if (pid <= 0) continue;
      std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
      std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      const auto close = text.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(text.substr(close + 2));
      char state = 0;
      pid_t ppid = 0;
      rest >> state >> ppid;
      if (state != 'Z' && state != 'X') parent[pid] = ppid;
    }
    ::closedir(d);
  }
  std::vector<pid_t> out;
  for (const auto& [pid, pp] : parent) {
    for (pid_t p = pp; p > 1;) {
      if (p == root) {
        out.push_back(pid);
        break;
      }
      auto it = parent.find(p);
      if (it == parent.end()) break;
      p = it->second;
    }
  }
  return out;
}

// A process that exists and is not a zombie (a killed daemon re-parented to a pid 1 that does
// not reap lingers as one).
bool alive(pid_t pid) {
  if (pid <= 0) return false;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z' &&
         text[close + 2] != 'X';
}

pid_t pid_in(const fs::path& file) {
  std::ifstream f(file);
  long pid = -1;
  return (f >> pid) ? static_cast<pid_t>(pid) : -1;
}

// One launcher pod running the deaf guest, and what it started.
struct Running {
  Pod pod;
  chl::test::TestNotifyServer notify{pod.share() / "domain-notify-pipe.sock"};
  std::unique_ptr<v1::Cmd::Stub> cmd;
  v1::VMIRequest vmi = deaf_vmi();
  v1::Response r;
  pid_t vmm = -1;
  std::map<pid_t, std::string> started;  // pid -> what, everything this launcher started

  // Sync, Running, and the processes listed. False (having said why) when it cannot run here.
  bool up() {
    if (!guest_runnable()) return false;
    cmd = pod.serve();
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
    REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
    REQUIRE_MESSAGE(
        chl::test::wait_until(kQemu ? 60s : 30s,
                              [&] { return reported_running(notify); }),
        states_text(notify) << "\n" << pod.output());
    const auto st = pod.status();
    REQUIRE_MESSAGE(st.contains("vmm"), pod.status_text());
    vmm = st["vmm"].value("pid", -1);
    REQUIRE(vmm > 0);
    started[vmm] = "the VMM";
    for (pid_t p : descendants(pod.child.pid())) started.emplace(p, "a descendant of the launcher");
    // The libvirt daemons, when this launcher started them (not when it found them running).
    if (kQemu && pod.output().find("started by this launcher") != std::string::npos) {
      for (const char* d : {"libvirtd", "virtlogd"}) {
        const pid_t p = pid_in(fs::path("/run/ch-launcher/libvirt") / (std::string(d) + ".pid"));
        CHECK_MESSAGE(alive(p), d << " of this launcher not found");
        if (p > 0) started[p] = d;
      }
    }
    return true;
  }
  // Other launchers' domains on the same daemons (other test runs on this machine): then the
  // daemons rightly outlive this launcher.
  static bool daemons_shared() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/run/libvirt/qemu", ec))
      if (e.path().extension() == ".pid" && e.path().stem() != "default_testvm" &&
          alive(pid_in(e.path())))
        return true;
    return false;
  }
  void forget_daemons() {
    for (auto it = started.begin(); it != started.end();)
      it = (it->second == "libvirtd" || it->second == "virtlogd") ? started.erase(it)
                                                                  : std::next(it);
  }
  grpc::Status shutdown() {
    return call([&](auto& c) { return cmd->ShutdownVirtualMachine(&c, vmi, &r); });
  }
  grpc::Status kill() {
    return call([&](auto& c) { return cmd->KillVirtualMachine(&c, vmi, &r); });
  }

  grpc::Status delete_domain() {
    return call([&](auto& c) { return cmd->DeleteVirtualMachine(&c, vmi, &r); });
  }

  // The domain is Shutoff/Destroyed within `bound`; virt-handler then deletes it (the launcher
  // serves the stopped domain until DeleteDomain, as KubeVirt's does: docs/kubevirt/lifecycle.md),
  // and the launcher exits within a few seconds of that. Shutoff/Destroyed was the domain's last
  // state, and everything it started is gone within `linger` of its exit.
  void ends_destroyed(std::chrono::seconds bound, std::chrono::seconds linger = 10s) {
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE_MESSAGE(chl::test::wait_until(
                        bound, [&] { return has_state(notify, "MODIFIED Shutoff/Destroyed"); }),
                    "not Shutoff/Destroyed " << bound.count() << " s later:\n"
                                             << pod.output());
    REQUIRE(delete_domain().ok());  // as virt-handler does once it sees the domain stopped
    CHECK_MESSAGE(r.success(), r.message());
    auto st = pod.child.wait_for(30s);  // an eventual bound, generous on a loaded machine
    REQUIRE(st);
    REQUIRE_MESSAGE(st->has_value(), "the launcher still runs 30 s after DeleteDomain:\n"
                                         << pod.output());
    MESSAGE("launcher exited " << std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::steady_clock::now() - t0)
                                      .count()
                               << " ms after the wait began: " << (*st)->describe());
    final_state_destroyed();
    nothing_left(linger);
  }
  void final_state_destroyed() {
    std::string last;
    for (const auto& s : states(notify.received()))
      if (s.find("NoState") == std::string::npos)
        last = s;  // the final NoState/NonExistent follows
    CHECK_MESSAGE(last == "MODIFIED Shutoff/Destroyed", "last domain state: " << last << "\n"
                                                                              << pod.output());
  }
  void nothing_left(std::chrono::seconds linger) {
    for (const auto& [pid, what] : started) {
      const pid_t p = pid;
      CHECK_MESSAGE(
          chl::test::wait_until(linger, [p] { return !alive(p); }),
          what << " (pid " << p << ") outlived the launcher by " << linger.count() << " s");
    }
  }
};

}  // namespace

TEST_CASE("virt-launcher stop (" CHL_VL_HYPERVISOR
          "): Shutdown, then Kill before the grace period ends: destroyed at once") {
  Running vm;
  if (!vm.up()) return;
  REQUIRE(vm.shutdown().ok());
  CHECK_MESSAGE(vm.r.success(), vm.r.message());
  std::this_thread::sleep_for(1s);  // the power button is pressed; the guest ignores it
  REQUIRE(vm.kill().ok());
  CHECK_MESSAGE(vm.r.success(), vm.r.message());
  // The grace period (10 s) is not waited for: the Kill ends the domain.
  vm.ends_destroyed(8s);
}

TEST_CASE("virt-launcher stop (" CHL_VL_HYPERVISOR "): Kill twice") {
  Running vm;
  if (!vm.up()) return;
  REQUIRE(vm.kill().ok());
  CHECK_MESSAGE(vm.r.success(), vm.r.message());
  REQUIRE(vm.kill().ok());  // its answer is the protocol's (idempotent): the stop is what counts
  vm.ends_destroyed(8s);
}

TEST_CASE("virt-launcher stop (" CHL_VL_HYPERVISOR "): Kill, then SIGTERM") {
  Running vm;
  if (!vm.up()) return;
  REQUIRE(vm.kill().ok());
  CHECK_MESSAGE(vm.r.success(), vm.r.message());
  REQUIRE(vm.pod.child.signal(SIGTERM));
  vm.ends_destroyed(8s);
}

TEST_CASE(
    "virt-launcher stop (" CHL_VL_HYPERVISOR
    "): SIGTERM during a pending graceful stop ends within the grace period and a few seconds") {
  Running vm;
  if (!vm.up()) return;
  REQUIRE(vm.shutdown().ok());
  CHECK_MESSAGE(vm.r.success(), vm.r.message());
  std::this_thread::sleep_for(1s);
  REQUIRE(vm.pod.child.signal(SIGTERM));
  // --grace-period-seconds 10 (the harness), then the forced stop.
  vm.ends_destroyed(10s + 10s);
}

TEST_CASE("virt-launcher stop (" CHL_VL_HYPERVISOR
          "): the launcher SIGKILLed: its VMM and the daemons it started go too") {
  Running vm;
  if (!vm.up()) return;
  if (kQemu && (vm.started.size() < 3 || Running::daemons_shared())) {
    chl::test::skip_part(
        "the libvirt daemons were not started by this launcher, or other launchers use them");
    vm.forget_daemons();
  }
  REQUIRE(vm.pod.child.signal(SIGKILL));
  auto st = vm.pod.child.wait_for(10s);
  REQUIRE(st);
  REQUIRE(st->has_value());
  // CH: the VMM dies with its parent (PR_SET_PDEATHSIG). libvirt: the launcher's connection
  // closes, libvirtd destroys the AUTODESTROY domain, and both daemons, idle, end themselves.
  vm.nothing_left(30s);
}

TEST_CASE("virt-launcher stop (" CHL_VL_HYPERVISOR
          "): libvirtd stops answering: Kill still ends the domain, the launcher exits bounded") {
  if (!kQemu) return;  // the libvirt path's own failure
  Running vm;
  if (!vm.up()) return;
  pid_t libvirtd = -1;
  for (const auto& [pid, what] : vm.started)
    if (what == "libvirtd") libvirtd = pid;
  if (libvirtd <= 0 || Running::daemons_shared())
    return chl::test::skip(
        "the libvirtd was not started by this launcher, or other launchers use it");
  // The symptom, made on purpose: the destroy never answers and no Stopped event comes.
  REQUIRE(::kill(libvirtd, SIGSTOP) == 0);
  struct Cont {
    pid_t pid;
    ~Cont() { (void)::kill(pid, SIGCONT); }
  } cont{libvirtd};
  REQUIRE(vm.kill().ok());
  CHECK_MESSAGE(vm.r.success(), vm.r.message());
  // The forced stop's 5 s, then QEMU killed through its verified pidfd, then 3 s for an event
  // that does not come: the launcher ends the domain itself.
  REQUIRE_MESSAGE(chl::test::wait_until(
                      30s, [&] { return has_state(vm.notify, "MODIFIED Shutoff/Destroyed"); }),
                  "not Shutoff/Destroyed with libvirtd stopped:\n"
                      << vm.pod.output());
  REQUIRE(vm.delete_domain().ok());  // virt-handler's DeleteDomain: the launcher may leave
  auto st = vm.pod.child.wait_for(10s);
  REQUIRE(st);
  REQUIRE_MESSAGE(st->has_value(), "the launcher still runs with libvirtd stopped:\n"
                                       << vm.pod.output());
  CHECK_FALSE(alive(vm.vmm));
  vm.final_state_destroyed();
  const std::string out = vm.pod.output();
  CHECK_MESSAGE(
      out.find("killing QEMU pid " + std::to_string(vm.vmm) + " (verified") != std::string::npos,
      out);
  CHECK(out.find("libvirt has not reported it") != std::string::npos);
  // libvirtd woken: it finds the launcher gone, and the daemons end once idle.
  (void)::kill(libvirtd, SIGCONT);
  vm.nothing_left(30s);
}

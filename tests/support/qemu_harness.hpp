#pragma once
// ch-launcher run on qemu-kvm for the fault tests: real QEMU through a real libvirtd (started by
// the launcher when none answers), the PVH guest under TCG. The same checks as the lifecycle
// tests (test_libvirt_lifecycle.cpp): root, QEMU, libvirtd and the guest, else skip with the
// reason; nothing left behind (sockets, pid file, QEMU, the libvirt domain, stray files).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "drivers/libvirt/daemon.hpp"
#include "tests/support/launcher_harness.hpp"

namespace chl::test {

inline constexpr auto kQemuStart =
    std::chrono::seconds(180);  // libvirtd start + probe + boot, busy cores

inline bool libvirt_runnable() {
  if (::geteuid() != 0) {
    skip("qemu-kvm tests need root (qemu:///system, and starting libvirtd)");
    return false;
  }
  for (const char* t : {"qemu-system-x86_64", "libvirtd", "virtlogd"}) {
    if (!tool(t) && ::access((std::string("/usr/sbin/") + t).c_str(), X_OK) != 0) {
      skip(std::string(t) +
           " not installed (scripts/setup.sh installs qemu-system-x86 libvirt-daemon-system)");
      return false;
    }
  }
  if (!std::filesystem::exists(guest_kernel())) {
    skip("no PVH test guest at " + guest_kernel().string() + " (build target pvh_guest)");
    return false;
  }
  return true;
}

struct QemuRun : LauncherRun {
  QemuRun() { hypervisor = "qemu-kvm"; }
  void go(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> e = {"--accel", "tcg"};
    e.insert(e.end(), extra.begin(), extra.end());
    start(e);
  }
  bool running() {
    bool ok = wait_state("Running", kQemuStart);
    if (!ok) MESSAGE("launcher output:\n" << output());
    return ok;
  }
  long qemu_pid() {
    auto d = domain();
    return d.contains("vmm") && d["vmm"].contains("pid") ? d["vmm"]["pid"].get<long>() : -1;
  }
  // No domain of this VMI's name on a daemon that still answers.
  static bool domain_gone() {
    if (!libvirt::unix_socket_answers("/run/libvirt/libvirt-sock")) return true;
    auto r = run_command({"virsh", "-c", "qemu:///system", "list", "--all", "--name"});
    return r.output.find("default_testvm") == std::string::npos;
  }
  // `lasting`: more names the VM keeps across runs (its NVRAM, prepared disks).
  void check_clean_qemu(long pid, const std::vector<std::string>& lasting = {}) {
    check_clean(-1);
    if (pid > 0)
      CHECK_MESSAGE(!libvirt::process_alive(static_cast<pid_t>(pid)),
                    "QEMU pid " << pid << " still alive");
    CHECK(domain_gone());
    // Only the launcher's lasting files remain in the state directory.
    for (const auto& e : std::filesystem::directory_iterator(state_dir())) {
      auto n = e.path().filename().string();
      const bool kept = std::find(lasting.begin(), lasting.end(), n) != lasting.end();
      CHECK_MESSAGE(
          (kept || n == "launcher.lock" || n == "vmi.uid" || n.rfind("virt-serial0-log", 0) == 0),
          "left behind: " << n);
    }
  }
};

}  // namespace chl::test

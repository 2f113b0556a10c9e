#pragma once
// Runs `ch-launcher run` as a child process for the lifecycle tests, against the VMM double or a
// real cloud-hypervisor (CLOUD_HYPERVISOR_BIN). The guest is the project's PVH test guest (built
// from tests/guests), booted directly as a kernel: under the double any readable file would do,
// under real Cloud Hypervisor it really runs and acts on its command line (poweroff, panic, ...).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <thread>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "control/command_client.hpp"
#include "common/child_process.hpp"
#include "common/unix_socket.hpp"
#include "tests/support/test_support.hpp"

namespace chl::test {

inline std::filesystem::path guest_kernel() {
  if (const char* k = std::getenv("CHL_TEST_GUEST_KERNEL"); k && *k) return k;
  return binary_dir() / "guests" / "pvh-guest.elf";
}

// A test whose launcher stops its VM gracefully (`stop` or SIGTERM: the power button, then
// Shutoff (Shutdown), exit 0) needs a guest that powers off on the button: it says so with this
// (test_support.hpp; the project's PVH guest does under real Cloud Hypervisor, docs/guests.md).
inline bool needs_cooperative_guest() { return needs_cooperative_guest(guest_kernel()); }

struct LauncherRun {
  TempDir dir{"chl-run"};
  // spec.hypervisor of the VMI write_vmi() writes: "cloud-hypervisor" (the VMM double or a real
  // CH) or "qemu-kvm" (QEMU through libvirt; --vmm-binary is then not passed).
  std::string hypervisor = "cloud-hypervisor";
  std::filesystem::path state_dir() const { return dir.path() / "state"; }
  std::filesystem::path socket() const { return state_dir() / "launcher.sock"; }
  std::filesystem::path vmi_file() const { return dir.path() / "vmi.yaml"; }
  std::filesystem::path output_file() const { return dir.path() / "launcher.out"; }
  common::ChildProcess child;
  std::optional<common::ExitStatus> status;
  // Run the launcher through this command (argv prefix), e.g. {"ip", "netns", "exec", "pod"}.
  std::vector<std::string> wrapper;

  // A kernel-boot VMI whose guest reads `cmdline`; grace period in seconds.
  void write_vmi(const std::string& cmdline, int grace = 30, const std::string& name = "testvm") {
    std::filesystem::create_directories(dir.path() / "kernel");
    std::filesystem::copy_file(guest_kernel(), dir.path() / "kernel" / "guest.elf",
                               std::filesystem::copy_options::overwrite_existing);
    std::ofstream f(vmi_file());
    f << "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata:\n  name: " << name
      << "\n  namespace: default\n  uid: 6a1f3c2e-0000-4000-8000-00000000abcd\n"
      << "spec:\n  hypervisor: " << hypervisor << "\n  terminationGracePeriodSeconds: " << grace << "\n"
      << "  domain:\n    cpu:\n      cores: 1\n    memory:\n      guest: 64Mi\n"
      << "    firmware:\n      kernelBoot:\n        kernelArgs: \"" << cmdline << "\"\n"
      << "        container:\n          image: kernel-boot:latest\n          kernelPath: /guest.elf\n"
      << "    devices:\n      autoattachPodInterface: false\n"
      << (hypervisor == "qemu-kvm" ? "      autoattachGraphicsDevice: false\n" : "");
  }

  // A wrapper VMM binary that runs the double with fault-injection variables (the launcher
  // gives the VMM a clean environment, so faults travel in the wrapper).
  std::string vmm_with_env(const std::map<std::string, std::string>& env) {
    auto path = dir.path() / "vmm-wrapper.sh";
    std::ofstream f(path);
    f << "#!/bin/sh\n";
    for (const auto& [k, v] : env) f << "export " << k << "='" << v << "'\n";
    f << "exec '" << vmm_binary() << "' \"$@\"\n";
    f.close();
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    return path.string();
  }

  void start(const std::vector<std::string>& extra = {}, const std::string& vmm = vmm_binary()) {
    std::vector<std::string> argv = {launcher_binary(), "run", "--vmi", vmi_file().string(), "--state-dir",
                                     state_dir().string(), "--volume",
                                     "kernel-boot=" + (dir.path() / "kernel").string(), "--log-level", "debug"};
    if (hypervisor == "cloud-hypervisor") {
      argv.push_back("--vmm-binary");
      argv.push_back(vmm);
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.begin(), wrapper.begin(), wrapper.end());
    common::SpawnOptions so;
    so.argv = argv;
    for (char** e = environ; *e; ++e) so.env.emplace_back(*e);
    int out = ::open(output_file().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    so.stdout_fd = out;
    so.stderr_fd = out;
    so.new_session = false;
    auto c = common::ChildProcess::spawn(so);
    ::close(out);
    REQUIRE(c);
    child = std::move(*c);
    status.reset();  // a previous run's exit status is not this one's
  }

  std::string output() const { return read_file(output_file()); }

  // Connect to virt-serial0, type `input`, and collect what the guest prints until `until`
  // appears (or the timeout passes). Returns everything received (scrollback included).
  std::string console(const std::string& input, const std::string& until,
                      std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    const auto path = state_dir() / "virt-serial0";
    auto conn = common::connect_unix(path);
    if (!conn) return "<cannot connect to " + path.string() + ">";
    const int fd = conn->get();
    std::string got;
    // Let the scrollback arrive first so `until` is looked for in what follows the input.
    (void)!::write(fd, input.data(), input.size());
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) {
        char buf[4096];
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) break;
        got.append(buf, static_cast<std::size_t>(n));
        if (!until.empty() && got.find(until) != std::string::npos) break;
      }
    }
    return got;
  }

  nlohmann::json domain() const {
    auto r = control::command_request(socket(), "GET", "/v1/domain", {}, std::chrono::seconds(10));
    if (!r || r->status != 200) return nlohmann::json::object();
    return nlohmann::json::parse(r->body, nullptr, false);
  }

  // Waits for the launcher to report `state`; false at once when the launcher has exited (it
  // will report nothing more), else after `timeout`.
  bool wait_state(const std::string& state, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    bool ended = false;
    bool seen = wait_until(
        timeout,
        [&] {
          if (domain().value("state", "") == state) return true;
          ended = launcher_exited();
          return ended;
        },
        std::chrono::milliseconds(20));
    return seen && !ended;
  }

  // The launcher process has exited (reaped; its status kept in `status`).
  bool launcher_exited() {
    if (status) return true;
    if (child.pid() <= 0) return false;
    auto st = child.try_wait();
    if (st && *st) status = **st;
    return status.has_value();
  }

  // The launcher's exit status (waits up to `timeout`).
  std::optional<common::ExitStatus> wait_exit(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    auto st = child.wait_for(timeout);
    if (st && *st) status = **st;
    return status;
  }

  CommandResult cli(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {launcher_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--state-dir");
    argv.push_back(state_dir().string());
    return run_command(argv);
  }

  // No socket or pid file left, and the VMM process gone.
  void check_clean(long vmm_pid) const {
    CHECK_FALSE(std::filesystem::exists(socket()));
    CHECK_FALSE(std::filesystem::exists(state_dir() / "virt-serial0"));
    CHECK_FALSE(std::filesystem::exists(state_dir() / "ch-api.sock"));
    CHECK_FALSE(std::filesystem::exists(state_dir() / "vmm.pid"));
    if (vmm_pid > 0) CHECK(::kill(static_cast<pid_t>(vmm_pid), 0) == -1);
  }

  ~LauncherRun() {
    if (child.running()) {
      MESSAGE("launcher output:\n" << output());
      (void)child.kill_and_reap();
    }
  }
};

}  // namespace chl::test

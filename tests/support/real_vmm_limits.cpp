#include "tests/support/real_vmm_limits.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "common/child_process.hpp"
#include "tests/support/linux_guest.hpp"
#include "tests/support/test_support.hpp"
#include "vmm_api/client.hpp"

namespace chl::test {
namespace {

using namespace std::chrono_literals;

// The guest the probe boots: CHL_TEST_GUEST_KERNEL (what the real-ch lane boots), else the
// project's PVH guest.
std::string probe_kernel() {
  if (const char* k = std::getenv("CHL_TEST_GUEST_KERNEL"); k && *k) return k;
  return project_pvh_guest().string();
}

// The first line of a long message (CH's last string may carry a Rust backtrace).
std::string first_lines(const std::string& s) {
  const auto cut = s.find("\n\nStack backtrace");
  return cut == std::string::npos ? s : s.substr(0, cut);
}

std::optional<std::string> probe() {
  if (!using_real_vmm()) return std::nullopt;
  const std::string vmm = vmm_binary();
  auto said = [&](const std::string& what) {
    std::cerr << "real-VMM probe (" << vmm << "): " << what << std::endl;
    return std::nullopt;
  };
  TempDir dir("chl-probe");
  common::SpawnOptions o;
  o.argv = {vmm, "--api-socket", "path=" + (dir / "api.sock").string()};
  o.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"};
  common::UniqueFd log(::open((dir / "vmm.log").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  o.stdout_fd = log.get();
  o.stderr_fd = log.get();
  auto child = common::ChildProcess::spawn(o);
  if (!child) return said("could not start it: " + child.error().message());
  vmm_api::Client api((dir / "api.sock").string());
  if (!wait_until(20s, [&] { return api.vmm_ping().has_value(); }))
    return said("it did not answer vmm.ping: " + read_file(dir / "vmm.log"));
  const std::string kernel = probe_kernel();
  vmm_api::VmConfig c;
  c.payload.kernel = kernel;
  c.payload.cmdline = "console=ttyS0 chl-probe";
  c.cpus = vmm_api::CpusConfig{};
  c.cpus->boot_vcpus = 1;
  c.cpus->max_vcpus = 1;
  c.memory = vmm_api::MemoryConfig{};
  c.memory->size = 64ull << 20;
  c.serial = vmm_api::SerialConfig{};
  c.serial->mode = vmm_api::ConsoleMode::Null;
  c.console = vmm_api::ConsoleConfig{};
  c.console->mode = vmm_api::ConsoleMode::Off;
  if (auto r = api.vm_create(c); !r) return said("vm.create: " + r.error().message());
  if (auto r = api.vm_boot(); !r) return said("vm.boot: " + r.error().message());
  if (auto r = api.vm_pause(); !r) return said("vm.pause: " + r.error().message());
  vmm_api::VmSnapshotConfig snap;
  std::filesystem::create_directories(dir / "snapshot");
  snap.destination_url = "file://" + (dir / "snapshot").string();
  auto taken = api.vm_snapshot(snap);
  (void)api.vmm_shutdown();
  (void)child->kill_and_reap();
  if (taken) return said("vm.snapshot of a paused VM succeeded: this machine can save vCPU state");
  const std::string chain = first_lines(taken.error().message());
  if (chain.find("GetNestedState") == std::string::npos)
    return said("vm.snapshot failed, but not for the machine's KVM: " + chain);
  return "this machine's KVM (nested) cannot give a vCPU's nested state, so the real VMM can take "
         "neither a snapshot nor a live migration: " +
         vmm + " alone (no launcher) booted " + kernel +
         " and answered vm.pause + vm.snapshot with: " + chain;
}

std::optional<std::string> probe_linux(const std::string& kernel, const std::string& initramfs) {
  if (!using_real_vmm()) return std::nullopt;
  const std::string vmm = vmm_binary();
  TempDir dir("chl-probe");
  const auto serial = dir / "serial";
  const std::string cmdline = "console=ttyS0 earlyprintk=ttyS0 panic=-1 poweroff";
  common::SpawnOptions o;
  o.argv = {vmm,           "--kernel",  kernel,      "--initramfs", initramfs,
            "--cmdline",   cmdline,     "--memory",  "size=256M",   "--serial",
            "file=" + serial.string(),  "--console", "off"};
  o.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"};
  common::UniqueFd log(::open((dir / "vmm.log").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  o.stdout_fd = log.get();
  o.stderr_fd = log.get();
  auto child = common::ChildProcess::spawn(o);
  if (!child) {
    std::cerr << "real-VMM Linux probe (" << vmm << "): could not start it: " << child.error().message() << std::endl;
    return std::nullopt;
  }
  // Linux runs only when its /init does: the kernel alone sometimes prints its first lines on this
  // KVM and then goes quiet, which is no running Linux (the Linux guest's /init says
  // "chl-guest: init started" first thing: tests/guests/linux/init).
  const std::string marker = "chl-guest: init started";
  std::error_code ec;
  const bool ran = wait_until(60s, [&] {
    return std::filesystem::exists(serial, ec) && read_file(serial).find(marker) != std::string::npos;
  }, 200ms);
  (void)child->kill_and_reap();
  const std::string printed = std::filesystem::exists(serial, ec) ? read_file(serial) : std::string();
  if (ran) {
    std::cerr << "real-VMM Linux probe (" << vmm << "): its /init ran: " << printed.substr(0, 200) << std::endl;
    return std::nullopt;
  }
  std::cerr << "real-VMM Linux probe (" << vmm << "): no /init in 60 s; COM1 had " << printed.size()
            << " bytes" << (printed.empty() ? "" : ", ending: ") << printed.substr(printed.size() > 160 ? printed.size() - 160 : 0)
            << std::endl;
  return "this machine's KVM (nested) does not run a full Linux kernel: " + vmm +
         " alone (no launcher) booted " + kernel + " with " + initramfs + " and `" + cmdline +
         "`, and in 60 s its /init never said \"" + marker + "\" on COM1 (at most the kernel's first lines; the PVH test guest prints at once there)";
}

}  // namespace

const std::optional<std::string>& real_vmm_cannot_run_linux(const std::string& kernel,
                                                            const std::string& initramfs) {
  static const std::optional<std::string> reason = probe_linux(kernel, initramfs);
  return reason;
}

const std::optional<std::string>& real_vmm_cannot_save_vcpu_state() {
  static const std::optional<std::string> reason = probe();
  return reason;
}

std::optional<std::string> real_vmm_has_no_guest_agent() {
  if (!using_real_vmm()) return std::nullopt;
  const std::string agent =
      "a guest agent (qemu-ga on Cloud Hypervisor's hybrid vsock) runs inside a Linux guest; the "
      "PVH test guest has none";
  std::string why;
  const auto guest = find_linux_guest(&why);
  if (!guest) return agent + ", and the Linux test guest could not be tried: " + why;
  if (const auto& no = real_vmm_cannot_run_linux(guest->kernel.string(), guest->initramfs.string()))
    return agent + ", and " + *no;
  return agent + ", and the Linux test guest runs on this machine but these tests do not boot it "
                 "with an agent yet (a limit of ours)";
}

}  // namespace chl::test

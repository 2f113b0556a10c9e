// ch-launcher run on qemu-kvm, end to end through its CLI: real QEMU through a real libvirtd
// (started by the launcher when none answers), the project's PVH guest under TCG (KVM here is
// nested PVM: accel_probe.hpp). The same contract as the Cloud Hypervisor lifecycle tests
// (test_launcher_lifecycle.cpp): states and reasons, console, exit codes, nothing left behind.
// No timing assertions: libvirtd's first start probes QEMU (tens of seconds on a busy machine).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "tests/support/qemu_harness.hpp"

using chl::test::libvirt_runnable;
using chl::test::QemuRun;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

// The launcher's "domain event ..." log messages, in order.
std::vector<std::string> domain_event_lines(const std::string& log) {
  std::vector<std::string> out;
  for (auto at = log.find("domain event "); at != std::string::npos;
       at = log.find("domain event ", at + 1))
    out.push_back(log.substr(at, log.find('"', at) - at));
  return out;
}

}  // namespace

TEST_CASE(
    "qemu-kvm run: lifecycle through the CLI, console banner and echo, ends Shutoff with exit 0") {
  if (!libvirt_runnable()) return;
  QemuRun r;
  r.write_vmi("console=ttyS0");
  r.go();
  REQUIRE(r.running());
  json d = r.domain();
  CHECK(d["reason"] == "Booted");
  CHECK(d["hypervisor"] == "qemu-kvm");
  CHECK(d["vmm"]["accel"] == "tcg");
  long pid = r.qemu_pid();
  CHECK(pid > 0);
  // The launcher confined itself with its qemu-kvm policy (the common list plus the libvirt
  // additions), and the kernel agrees (Seccomp: 2, filter mode). Everything below runs under it.
  CHECK(d["seccomp"] == "enforce");
  auto sj = r.cli({"status", "--json"});
  CHECK(sj.exit_code == 0);
  CHECK_MESSAGE(json::parse(sj.output, nullptr, false).value("seccomp", "") == "enforce", sj.output);
  {
    auto text = chl::test::read_file("/proc/" + std::to_string(r.child.pid()) + "/status");
    auto at = text.find("Seccomp:");
    REQUIRE(at != std::string::npos);
    CHECK(text.substr(at + 8, text.find('\n', at) - at - 8).find('2') != std::string::npos);
  }
  CHECK(r.output().find("seccomp: launcher confined (enforce, libvirt policy") != std::string::npos);

  auto st = r.cli({"status"});
  CHECK(st.exit_code == 0);
  CHECK_MESSAGE(st.output.find("default/testvm on qemu-kvm: Running (Booted)") != std::string::npos,
                st.output);

  // The banner is in the scrollback (the guest's first lines were not lost before the bridge
  // attached), and typed input is echoed.
  CHECK(r.console("", "ready", 60s).find("ready") != std::string::npos);
  auto first = r.console("hello-qemu\r", "hello-qemu", 30s);
  CHECK_MESSAGE(first.find("ch-launcher PVH test guest: hello from COM1") != std::string::npos,
                first);
  CHECK_MESSAGE(first.find("cmdline: console=ttyS0") != std::string::npos, first);
  CHECK(first.find("hello-qemu") != std::string::npos);

  auto p = r.cli({"pause"});
  CHECK_MESSAGE(p.exit_code == 0, p.output);
  CHECK(r.wait_state("Paused", 60s));
  CHECK(r.domain()["reason"] == "User");
  auto again = r.cli({"pause"});
  CHECK(again.exit_code == 1);
  CHECK(again.output.find("cannot pause: the VM is Paused, not Running") != std::string::npos);

  CHECK(r.cli({"resume"}).exit_code == 0);
  CHECK(r.wait_state("Running", 60s));
  CHECK(r.domain()["reason"] == "Unpaused");

  // Reboot (a reset): the guest boots again on the same console.
  CHECK(r.cli({"reboot"}).exit_code == 0);
  CHECK(chl::test::wait_until(
      60s,
      [&] {
        auto log = chl::test::read_file(r.state_dir() / "virt-serial0-log");
        std::size_t n = 0;
        for (auto pos = log.find("hello from COM1"); pos != std::string::npos;
             pos = log.find("hello from COM1", pos + 1))
          ++n;
        return n >= 2;
      },
      100ms));
  CHECK(r.wait_state("Running", 60s));
  std::string after;
  CHECK(chl::test::wait_until(
      60s,
      [&] {
        after = r.console("hello-after\r", "hello-after", 1s);
        return after.find("hello-after") != std::string::npos;
      },
      100ms));

  // Unsupported operations say so, and change nothing.
  auto snap = r.cli({"snapshot", "--dir", (r.dir.path() / "snap").string()});
  CHECK(snap.exit_code != 0);
  CHECK_MESSAGE(snap.output.find("not supported by qemu-kvm") != std::string::npos, snap.output);
  CHECK(r.domain()["state"] == "Running");

  auto stop = r.cli({"stop", "--grace-period", "60"});
  CHECK_MESSAGE(stop.exit_code == 0, stop.output);
  auto exit = r.wait_exit(120s);
  REQUIRE(exit);
  CHECK_MESSAGE(exit->exited, r.output());
  CHECK_MESSAGE(exit->code == 0, r.output());
  CHECK(r.output().find("VM ended: state Shutoff reason Shutdown") != std::string::npos);
  r.check_clean_qemu(pid);
}

TEST_CASE("qemu-kvm run: the guest powering itself off ends the launcher with exit 0") {
  if (!libvirt_runnable()) return;
  QemuRun r;
  r.write_vmi("console=ttyS0 poweroff");
  r.go();
  auto exit = r.wait_exit(chl::test::kQemuStart);
  REQUIRE_MESSAGE(exit, r.output());
  CHECK_MESSAGE(exit->code == 0, r.output());
  CHECK(r.output().find("VM ended: state Shutoff reason Shutdown") != std::string::npos);
  // The domain events, in order: once libvirt says the guest is shutting down the domain is
  // ShuttingDown (as virt-launcher reports it), never Running again, then Shutoff.
  auto evs = domain_event_lines(r.output());
  auto shut = std::find_if(evs.begin(), evs.end(), [](const std::string& e) {
    return e.find("domain event Shutdown (libvirt/shutdown/") != std::string::npos;
  });
  REQUIRE_MESSAGE(shut != evs.end(), r.output());
  CHECK_MESSAGE(shut->find("-> state ShuttingDown reason Unknown") != std::string::npos, *shut);
  for (auto it = shut; it != evs.end(); ++it)
    CHECK_MESSAGE(it->find("-> state Running") == std::string::npos, *it);
  CHECK_MESSAGE(evs.back().find("domain event Stopped (libvirt/stopped/shutdown) -> state Shutoff "
                                "reason Shutdown") != std::string::npos,
                evs.back());
  r.check_clean_qemu(-1);
}

TEST_CASE(
    "qemu-kvm run: status reports vCPUs, memory, disks and libvirt's state, as on Cloud "
    "Hypervisor") {
  if (!libvirt_runnable()) return;
  QemuRun r;
  r.write_vmi("console=ttyS0");
  const auto disk = r.dir.path() / "disk" / "data.img";
  std::filesystem::create_directories(disk.parent_path());
  chl::test::write_file(disk, std::string(1 << 20, '\0'));
  {
    std::ofstream f(r.vmi_file(), std::ios::app);
    f << "      disks:\n      - name: datadisk\n        disk:\n          bus: virtio\n"
      << "  volumes:\n  - name: datadisk\n    containerDisk:\n      image: demo/data:latest\n";
  }
  r.go({"--volume", "datadisk=" + disk.string()});
  REQUIRE(r.running());
  const long pid = r.qemu_pid();

  auto st = r.cli({"status"});
  CHECK(st.exit_code == 0);
  CHECK_MESSAGE(st.output.find("vm:        1 vCPU, 64 MiB, 1 disk(s), VMM state Running") !=
                    std::string::npos,
                st.output);

  auto sj = r.cli({"status", "--json"});
  CHECK(sj.exit_code == 0);
  json j = json::parse(sj.output, nullptr, false);
  REQUIRE_MESSAGE(j.contains("info"), sj.output);
  const json& info = j["info"];
  CHECK(info["config"]["cpus"]["boot_vcpus"] == 1);
  CHECK(info["config"]["cpus"]["max_vcpus"] == 1);
  CHECK(info["config"]["memory"]["size"] == 64ULL << 20);
  CHECK(info["state"] == "Running");
  CHECK(info["reason"] == "Unpaused");  // libvirt's reason: our paused start was resumed
  REQUIRE(info["config"]["disks"].size() == 1);
  const json& d = info["config"]["disks"][0];
  CHECK(d["id"] == "datadisk");
  CHECK(d["target"] == "vda");
  // A container disk: the guest writes to its overlay in the state directory, never the image.
  CHECK(d["readonly"] == false);
  CHECK_MESSAGE(
      d["path"].get<std::string>().find((r.state_dir() / "container-disks").string()) == 0,
      sj.output);

  // Paused: libvirt's state, through the same field.
  CHECK(r.cli({"pause"}).exit_code == 0);
  CHECK(r.wait_state("Paused", 60s));
  auto ps = r.cli({"status"});
  CHECK_MESSAGE(ps.output.find("1 disk(s), VMM state Paused") != std::string::npos, ps.output);

  auto k = r.cli({"kill"});
  CHECK_MESSAGE(k.exit_code == 0, k.output);
  auto exit = r.wait_exit(120s);
  REQUIRE_MESSAGE(exit, r.output());
  CHECK_MESSAGE(exit->code == 4, r.output());
  r.check_clean_qemu(pid, {"container-disks"});
}

TEST_CASE("qemu-kvm run: a guest panic is reported Crashed (Panicked), exit 3") {
  if (!libvirt_runnable()) return;
  QemuRun r;
  r.write_vmi("console=ttyS0");
  r.go();
  REQUIRE(r.running());
  long pid = r.qemu_pid();
  CHECK(r.console("", "ready", 60s).find("ready") != std::string::npos);
  r.console("panic\r", "panic", 5s);
  auto exit = r.wait_exit(120s);
  REQUIRE_MESSAGE(exit, r.output());
  CHECK_MESSAGE(exit->code == 3, r.output());
  CHECK_MESSAGE(r.output().find("VM ended: state Crashed reason Panicked") != std::string::npos,
                r.output());
  r.check_clean_qemu(pid);
}

TEST_CASE("qemu-kvm run: QEMU killed from outside is Crashed, exit 3") {
  if (!libvirt_runnable()) return;
  QemuRun r;
  r.write_vmi("console=ttyS0");
  r.go();
  REQUIRE(r.running());
  long pid = r.qemu_pid();
  REQUIRE(pid > 0);
  REQUIRE(::kill(static_cast<pid_t>(pid), SIGKILL) == 0);
  auto exit = r.wait_exit(120s);
  REQUIRE_MESSAGE(exit, r.output());
  CHECK_MESSAGE(exit->code == 3, r.output());
  CHECK_MESSAGE(r.output().find("VM ended: state Crashed reason Unknown") != std::string::npos,
                r.output());
  r.check_clean_qemu(pid);
}

TEST_CASE("qemu-kvm run: SIGTERM presses the power button and a cooperative guest stops cleanly") {
  if (!libvirt_runnable()) return;
  QemuRun r;
  r.write_vmi("console=ttyS0");
  r.go();
  REQUIRE(r.running());
  long pid = r.qemu_pid();
  CHECK(r.console("", "ready", 60s).find("ready") != std::string::npos);
  REQUIRE(r.child.signal(SIGTERM));
  auto exit = r.wait_exit(120s);
  REQUIRE_MESSAGE(exit, r.output());
  CHECK_MESSAGE(exit->code == 0, r.output());
  CHECK(chl::test::read_file(r.state_dir() / "virt-serial0-log").find("ACPI power button") !=
        std::string::npos);
  r.check_clean_qemu(pid);
}

TEST_CASE(
    "qemu-kvm run: SIGTERM with a guest that ignores the power button forces it off after the "
    "grace period") {
  if (!libvirt_runnable()) return;
  QemuRun r;
  r.write_vmi("console=ttyS0 ignore-acpi", 3);
  r.go();
  REQUIRE(r.running());
  long pid = r.qemu_pid();
  CHECK(r.console("", "ready", 60s).find("ready") != std::string::npos);
  REQUIRE(r.child.signal(SIGTERM));
  auto exit = r.wait_exit(120s);
  REQUIRE_MESSAGE(exit, r.output());
  CHECK_MESSAGE(exit->code == 4, r.output());
  CHECK(r.output().find("the guest did not power off within the grace period") !=
        std::string::npos);
  CHECK(r.output().find("VM ended: state Shutoff reason Destroyed") != std::string::npos);
  CHECK(
      chl::test::read_file(r.state_dir() / "virt-serial0-log").find("ignoring the power button") !=
      std::string::npos);
  r.check_clean_qemu(pid);
}

TEST_CASE("qemu-kvm run: kill forces the VM off at once, exit 4") {
  if (!libvirt_runnable()) return;
  QemuRun r;
  r.write_vmi("console=ttyS0");
  r.go();
  REQUIRE(r.running());
  long pid = r.qemu_pid();
  auto k = r.cli({"kill"});
  CHECK_MESSAGE(k.exit_code == 0, k.output);
  auto exit = r.wait_exit(120s);
  REQUIRE_MESSAGE(exit, r.output());
  CHECK_MESSAGE(exit->code == 4, r.output());
  CHECK(r.output().find("VM ended: state Shutoff reason Destroyed") != std::string::npos);
  r.check_clean_qemu(pid);
}

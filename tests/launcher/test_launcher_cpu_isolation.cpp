// isolateEmulatorThread end to end: `ch-launcher run` with dedicatedCpuPlacement and
// isolateEmulatorThread, against the VMM double or a real cloud-hypervisor (CLOUD_HYPERVISOR_BIN,
// booting the PVH test guest). Every thread's CPUs are read from /proc/<pid>/task/*/status.
#include <sched.h>

#include <fstream>
#include <regex>

#include "common/thread_affinity.hpp"
#include "tests/support/launcher_harness.hpp"

using chl::test::LauncherRun;
using nlohmann::json;

namespace {

// The CPUs this test may use (its own affinity).
std::vector<std::uint32_t> allowed_cpus() {
  cpu_set_t set;
  std::vector<std::uint32_t> out;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (std::uint32_t c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

void write_isolated_vmi(LauncherRun& r, int cores = 1, bool isolate = true) {
  r.write_vmi("console=ttyS0");
  std::string text = chl::test::read_file(r.vmi_file());
  text = std::regex_replace(text, std::regex("    cpu:\n      cores: 1\n"),
                            "    cpu:\n      cores: " + std::to_string(cores) +
                                "\n      dedicatedCpuPlacement: true\n" +
                                (isolate ? "      isolateEmulatorThread: true\n" : ""));
  chl::test::write_file(r.vmi_file(), text);
}

}  // namespace

TEST_CASE("run: isolateEmulatorThread puts every VMM thread but the vCPU on the extra CPU") {
  const auto cpus = allowed_cpus();
  if (cpus.size() < 2) {
    chl::test::skip("isolateEmulatorThread needs two CPUs (one vCPU, one emulator); this process has " +
                    std::to_string(cpus.size()));
    return;
  }
  const std::uint32_t vcpu_cpu = cpus[0];
  const std::uint32_t emulator_cpu = cpus[1];
  LauncherRun r;
  write_isolated_vmi(r);
  r.start({"--cpu-set", std::to_string(vcpu_cpu) + "," + std::to_string(emulator_cpu)});
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  const json d = r.domain();
  REQUIRE(d.contains("vmm"));
  const auto pid = static_cast<pid_t>(d["vmm"].value("pid", -1L));
  REQUIRE(pid > 0);
  const json& iso = d["vmm"]["cpu_isolation"];
  CHECK_MESSAGE(iso.value("isolated", false), iso.dump(2));
  CHECK(iso["emulator_cpus"] == std::to_string(emulator_cpu));

  // Read it ourselves: the VMM's threads, then the launcher's.
  auto threads = chl::common::read_thread_affinities(pid);
  REQUIRE_MESSAGE(threads, threads.error().message());
  int vcpus = 0;
  int others = 0;
  for (const auto& t : *threads) {
    CAPTURE(t.name);
    CAPTURE(t.tid);
    if (t.name.rfind("vcpu", 0) == 0) {
      ++vcpus;
      CHECK(t.cpus == std::vector<std::uint32_t>{vcpu_cpu});
    } else {
      ++others;
      CHECK(t.cpus == std::vector<std::uint32_t>{emulator_cpu});
    }
  }
  CHECK(vcpus == 1);
  CHECK(others >= 1);
  MESSAGE("VMM threads: " << iso["threads"].dump());
  auto launcher = chl::common::read_thread_affinities(r.child.pid());
  REQUIRE(launcher);
  for (const auto& t : *launcher) {
    CAPTURE(t.name);
    CHECK(t.cpus == std::vector<std::uint32_t>{emulator_cpu});
  }
  auto st = r.cli({"status"});
  CHECK(st.output.find("every other VMM thread on " + std::to_string(emulator_cpu) + ": isolated") !=
        std::string::npos);
  CHECK(r.cli({"stop", "--grace-period", "1"}).exit_code == 0);
  r.wait_exit();
}

TEST_CASE("run: an emulator CPU the launcher may not use fails the start, nothing half-pinned") {
  const auto cpus = allowed_cpus();
  LauncherRun r;
  write_isolated_vmi(r);
  // CPU 1000 exists nowhere here: sched_setaffinity refuses a set of only CPUs not allowed.
  r.start({"--cpu-set", std::to_string(cpus.at(0)) + ",1000"});
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK(exit->exited);
  CHECK(exit->code == 1);
  CHECK_MESSAGE(r.output().find("setting its CPU affinity to 1000: Invalid argument") != std::string::npos,
                r.output());
}

TEST_CASE("run: a vCPU pinned to a CPU the VMM may not use fails the start with CH's own message") {
  const auto cpus = allowed_cpus();
  LauncherRun r;
  write_isolated_vmi(r, 2, false);
  // vCPU 1 on CPU 1000 (the pod's CPU set is sorted: vCPU 0 takes the first): CH takes the
  // config, then the vCPU thread cannot move there and ends before the vCPU barrier, on which
  // CH's vmm thread then waits for ever (vmm/src/cpu.rs): vm.boot never answers. The launcher
  // gives up after its API timeout and ends the VMM.
  r.start({"--cpu-set", std::to_string(cpus.at(0)) + ",1000", "--api-timeout", "3"});
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK(exit->code == 1);
  CHECK_MESSAGE(r.output().find("booting the VM") != std::string::npos, r.output());
  const std::string log = chl::test::read_file(r.state_dir() / "vmm.log");
  CHECK_MESSAGE(log.find("Failed scheduling the vCPU 1 on the expected CPU set: Invalid argument (os error 22)") !=
                    std::string::npos,
                log);
}

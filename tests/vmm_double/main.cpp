// vmm-double — a TEST DOUBLE of Cloud Hypervisor. It is NOT a hypervisor: it creates no KVM VM
// and runs no guest code. It answers Cloud Hypervisor's REST API (v52 behaviour, recorded in
// /work/shared/reference/cloud-hypervisor-v52-observed.md and read from CH's sources) with the
// same status codes, bodies and event-monitor stream, so the launcher's tests run anywhere.
// Every test that drives it can drive a real cloud-hypervisor instead: set CLOUD_HYPERVISOR_BIN
// (and CHL_TEST_GUEST_KERNEL for tests that boot); docs/vmm-double.md says what differs.
//
// Command line (the part of cloud-hypervisor's the launcher uses; see cli.hpp):
//   vmm-double --api-socket path=P|fd=N [--event-monitor path=P|fd=N] [--serial ...]
//              [--console ...] [--seccomp true|false|log] [--log-file P] [-v...] [--version]
//
// Behind the serial line (mode Pty: a PTY made at vm.create, its path in vm.info
// config.serial.file) sits a pretend guest: after boot it prints
//   "vmm-double pretend guest: booted (a test double: no guest code runs)\r\n"
//   "cmdline: <payload.cmdline>\r\n" "ready\r\n",
// echoes every byte typed (CR/LF echoed as "\r\n"), and acts on whole input lines:
//   poweroff -> guest power-off: vm/shutdown (CH's vm/deleted, vmm/shutdown lost: vmm.cpp), exit 0, socket removed
//   reboot   -> vm/rebooting, vm/rebooted, a NEW PTY (as CH recreates console devices), banner
//   panic    -> guest/panic {"event":"panic"} when config.pvpanic is true; the guest halts
// A cmdline word `poweroff` powers off right after the banner; vm.power-button (204, no event)
// powers the guest off unless its cmdline has the word `ignore-acpi` (both only for a kernel whose
// ELF note says it reaches CH's GED); vm.remove-device's device is ejected (vm/device-removed)
// for a kernel whose note says it ejects, unless the word `no-eject` was seen.
//
// Fault injection (environment variables; full list in faults.hpp and docs/vmm-double.md):
//   VMM_DOUBLE_CRASH_AT=<phase>  VMM_DOUBLE_EXIT_WITHOUT_EVENTS=<phase>
//   VMM_DOUBLE_HANG=<endpoint,...> VMM_DOUBLE_FAIL=<endpoint,...>  VMM_DOUBLE_GARBAGE_EVENTS=1
//   VMM_DOUBLE_BOOT_DELAY_MS=<n> VMM_DOUBLE_PHASE_DELAY_MS=<n>  VMM_DOUBLE_HEARTBEAT_MS=<n> phases:
//   start create boot running paused snapshot shutdown restore
//
// SIGTERM/SIGINT: as CH — vmm shutdown (vm/shutdown if running, vm/deleted if created,
// vmm/shutdown), exit 0, and the API socket file removed when it was created from path=.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "tests/vmm_double/cli.hpp"
#include "tests/vmm_double/faults.hpp"
#include "tests/vmm_double/vmm.hpp"

int main(int argc, char** argv) {
  using namespace chl::vmm_double;
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    CliError err;
    auto opts = parse_cli(args, err);
    if (!opts) {
      std::fputs(err.message.c_str(), stderr);
      return err.exit_code;
    }
    if (opts->help) {
      std::fputs(help_text().c_str(), stdout);
      return 0;
    }
    if (opts->version) {
      std::printf("%s\n", version_line().c_str());
      return 0;
    }
    if (opts->api_path.empty() && opts->api_fd < 0) {
      std::fputs(
          "vmm-double: nothing to do without --api-socket (the double has no command-line VM)\n",
          stderr);
      return 1;
    }
    Vmm vmm(*opts, Faults::from_env());
    return vmm.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vmm-double: fatal: %s\n", e.what());
    return 1;
  }
}

#pragma once
// Shared test helpers: unique temp dirs, wait_until, which VMM to drive, explicit skips.
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace chl::test {

// A fresh directory under /tmp with a short name (Unix socket paths must stay < 108 bytes),
// removed with everything in it on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "chl");
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Poll `pred` every `interval` until it is true or `timeout` passes. Returns the last value.
bool wait_until(std::chrono::milliseconds timeout, const std::function<bool()>& pred,
                std::chrono::milliseconds interval = std::chrono::milliseconds(5));

// The VMM the CH tests drive: $CLOUD_HYPERVISOR_BIN when set, else the project's VMM double.
std::string vmm_binary();
// True when vmm_binary() is a real cloud-hypervisor (not the double).
bool using_real_vmm();
// The project's PVH test guest, as built: <build>/guests/pvh-guest.elf.
std::filesystem::path project_pvh_guest();
// True when `kernel` holds the same bytes as project_pvh_guest(): a guest known to power off on
// the ACPI power button (Cloud Hypervisor's GED register, QEMU's PM1) and, under Cloud
// Hypervisor, to eject a hot-removed PCI device (docs/guests.md).
bool is_project_pvh_guest(const std::filesystem::path& kernel);
// A test that relies on the guest powering off when the ACPI power button is pressed (a
// cooperative guest) says so by calling this first with the guest it boots. True when `kernel`
// is the project's PVH guest (under the VMM double too: the double acts on the button only for a
// kernel whose ELF note says it reaches CH's GED register), and against a real VMM when
// CHL_TEST_GUEST_COOPERATIVE=1 vouches for it; otherwise it prints why the test skips and
// returns false.
bool needs_cooperative_guest(const std::filesystem::path& kernel);
// Path of the built ch-launcher executable, the source tree and the build tree.
// $CHL_LAUNCHER_WRAPPER, when set, is returned instead of the launcher: an executable that
// execs the real one under a tool (scripts/sanitize.sh valgrind writes one running it under
// valgrind memcheck). Meant for the tests that drive the launcher, not those that inspect its file.
std::string launcher_binary();
std::filesystem::path source_dir();
std::filesystem::path binary_dir();

// A program from PATH, or nullopt.
std::optional<std::string> tool(const std::string& name);

// Print "SKIPPED: <current test>: <reason>" on stderr (and as a doctest MESSAGE).
// Call it, then `return` from the test case.
void skip(const std::string& reason);
// Print "SKIPPED PART: <reason>": one part of a test cannot run, the rest of it does (the
// real-ch lane's summary counts such a test as run; a test calling skip() as skipped).
void skip_part(const std::string& reason);

// Run a command (argv, no shell), capture stdout+stderr; returns exit code (or -1).
struct CommandResult {
  int exit_code = -1;
  std::string output;
};
CommandResult run_command(const std::vector<std::string>& argv, const std::string& stdin_data = {});

// Connect to the Unix socket `path` (a console: virt-serial0) and read until `marker` arrives, the
// peer closes or `timeout` passes; what was read ("" when it cannot connect).
std::string read_socket_until(const std::filesystem::path& path, const std::string& marker,
                              std::chrono::milliseconds timeout);
// The same, until `done(what was read)`: e.g. a whole "heartbeat N\n" line, not its first bytes.
std::string read_socket_until(const std::filesystem::path& path,
                              const std::function<bool(const std::string&)>& done,
                              std::chrono::milliseconds timeout);

// Read/write a whole file.
std::string read_file(const std::filesystem::path& p);
void write_file(const std::filesystem::path& p, const std::string& data);

// What a SIGKILLed server leaves at `path`: a Unix socket bound, never listened on, closed
// (connecting to it is refused). REQUIREs success.
void leave_stale_socket(const std::filesystem::path& path);

}  // namespace chl::test

// The fault matrix (issue 9): every fault the VMM double can inject, at each phase, through the
// real launcher, and the node's faults that stop a launch before any VMM (a full disk, missing
// firmware). Each row checks the final state and reason, the exit code, that no process is
// left (the VMM is gone) and that nothing half-written is left (no temporary files, no partial
// snapshot, no sockets; no disk image and no VMM started when the launch was refused). The test writes the table it checked to <build>/reliability-matrix.md
// and requires docs/reliability.md to carry the same table; CHL_UPDATE_DOCS=1 rewrites it there.
#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <sstream>

#include "common/unix_socket.hpp"
#include "tests/support/launcher_harness.hpp"
#include "tests/disks/size_limited_dir.hpp"

using chl::test::LauncherRun;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// How a row sets its launcher up when the default (the kernel-boot VMI, the double with `env`)
// does not fit: it writes its own VMI and gives extra `run` arguments; `keep` holds what must
// live until the row is checked (a mount); `skip` says why the row cannot run here.
struct Setup {
  std::vector<std::string> args;
  std::shared_ptr<void> keep;
  std::string skip;
};

struct Row {
  std::string fault;                       // what goes wrong (the table's first column)
  std::map<std::string, std::string> env;  // the double's injection
  // What the test does once the launcher runs; returns a note for the table ("" for none).
  std::function<std::string(LauncherRun&)> act;
  std::string state;   // final state, or "—" when the VM never started
  std::string reason;  // final reason
  int exit_code;
  std::function<Setup(LauncherRun&)> setup = nullptr;
  std::vector<std::string> says = {};  // the launcher's output must contain each
};

std::string ended(const std::string& out, std::string* reason) {
  static const std::regex re("VM ended: state (\\w+) reason (\\w+)");
  std::smatch m;
  std::string last_state = "?";
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it) {
    last_state = (*it)[1];
    *reason = (*it)[2];
  }
  return last_state;
}

// Files a dead or finished launcher may leave in its state directory: the logs (kept for
// post-mortems), the lock, and the VM's prepared media. Anything else is a leftover.
std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> bad;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp") != std::string::npos || e.is_socket() || name == "vmm.pid" || name == "snap")
      bad.push_back(fs::relative(e.path(), dir).string());
  }
  return bad;
}

bool process_gone(long pid) {
  if (pid <= 0) return true;
  return chl::test::wait_until(std::chrono::seconds(10),
                               [&] { return !fs::exists("/proc/" + std::to_string(pid)); });
}

long vmm_pid_of(LauncherRun& r) {
  auto d = r.domain();
  return d.contains("vmm") && d["vmm"].contains("pid") ? d["vmm"]["pid"].get<long>() : -1;
}

// The kernel-boot VMI plus a containerDisk volume "rootdisk" (its image in <dir>/disk/).
void write_vmi_with_container_disk(LauncherRun& r) {
  r.write_vmi("console=ttyS0", 2);
  std::ofstream f(r.vmi_file(), std::ios::app);
  f << "      disks:\n      - name: rootdisk\n        disk:\n          bus: virtio\n"
    << "  volumes:\n  - name: rootdisk\n    containerDisk:\n      image: demo/rootdisk:latest\n";
}

// Disk full: the state directory (where the containerDisk is converted to raw) is a 4 MiB tmpfs
// in a private mount namespace; the qcow2 image holds 12 MiB of data.
Setup disk_full(LauncherRun& r) {
  Setup su;
  if (!chl::test::tool("qemu-img") || !chl::test::tool("qemu-io")) {
    su.skip = "qemu-img/qemu-io not installed (qemu-utils)";
    return su;
  }
  auto small = std::make_shared<chl::test::SizeLimitedDir>(r.state_dir(), 4u << 20);
  if (!small->ok()) {
    su.skip = "no size-limited directory: " + small->why();
    return su;
  }
  su.keep = small;
  const fs::path img = r.dir.path() / "disk" / "rootdisk.qcow2";
  fs::create_directories(img.parent_path());
  for (const auto& cmd : std::vector<std::vector<std::string>>{
           {"qemu-img", "create", "-q", "-f", "qcow2", img.string(), "16M"},
           {"qemu-io", "-f", "qcow2", "-c", "write -P 0x5a 0 12M", img.string()}}) {
    auto c = chl::test::run_command(cmd);
    REQUIRE_MESSAGE(c.exit_code == 0, c.output);
  }
  write_vmi_with_container_disk(r);
  su.args = {"--volume", "rootdisk=" + img.parent_path().string()};
  return su;
}

// Missing firmware: an EFI VMI (no kernel boot) and a firmware directory without CLOUDHV.fd.
Setup missing_firmware(LauncherRun& r) {
  Setup su;
  const fs::path fw = r.dir.path() / "firmware";
  const fs::path disk = r.dir.path() / "disk" / "root.img";
  fs::create_directories(fw);
  fs::create_directories(disk.parent_path());
  chl::test::write_file(disk, std::string(1 << 20, '\0'));
  chl::test::write_file(r.vmi_file(),
                        "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata:\n  name: testvm\n"
                        "  namespace: default\n  uid: 6a1f3c2e-0000-4000-8000-00000000abcd\n"
                        "spec:\n  hypervisor: cloud-hypervisor\n  domain:\n    cpu:\n      cores: 1\n"
                        "    memory:\n      guest: 64Mi\n    firmware:\n      bootloader:\n        efi:\n"
                        "          secureBoot: false\n    devices:\n      autoattachPodInterface: false\n"
                        "      disks:\n      - name: rootdisk\n        disk:\n          bus: virtio\n"
                        "  volumes:\n  - name: rootdisk\n    containerDisk:\n      image: demo/rootdisk:latest\n");
  su.args = {"--firmware-dir", fw.string(), "--volume", "rootdisk=" + disk.string()};
  return su;
}

std::string wait_running(LauncherRun& r) {
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  return "";
}

const std::vector<Row>& rows() {
  static const std::vector<Row> kRows = {
      {"VMM killed right after start", {{"VMM_DOUBLE_CRASH_AT", "start"}}, nullptr, "Crashed", "Unknown", 1},
      {"VMM killed on vm.create (no answer)", {{"VMM_DOUBLE_CRASH_AT", "create"}}, nullptr, "Crashed", "Unknown", 1},
      {"VMM killed on vm.boot (no answer)", {{"VMM_DOUBLE_CRASH_AT", "boot"}}, nullptr, "Crashed", "Unknown", 1},
      {"VMM killed while running",
       {{"VMM_DOUBLE_CRASH_AT", "running"}, {"VMM_DOUBLE_PHASE_DELAY_MS", "300"}},
       nullptr, "Crashed", "Unknown", 3},
      {"VMM killed while paused",
       {{"VMM_DOUBLE_CRASH_AT", "paused"}, {"VMM_DOUBLE_PHASE_DELAY_MS", "200"}},
       [](LauncherRun& r) {
         wait_running(r);
         CHECK(r.cli({"pause"}).exit_code == 0);
         return std::string("paused by `pause`");
       },
       "Crashed", "Unknown", 3},
      {"VMM killed during a snapshot (half-written)",
       {{"VMM_DOUBLE_CRASH_AT", "snapshot"}},
       [](LauncherRun& r) {
         wait_running(r);
         auto s = r.cli({"snapshot", "--dir", (r.state_dir() / "snap").string()});
         CHECK(s.exit_code == 1);
         return std::string("`snapshot` fails, partial snapshot removed");
       },
       "Crashed", "Unknown", 3},
      // The VMM dying inside an API call of a running VM (real CH v52 does so on
      // vm.send-migration with no VM, a call the launcher never makes): Crashed, like any death.
      {"VMM killed on vm.add-disk (no answer)",
       {{"VMM_DOUBLE_CRASH_AT", "vm.add-disk"}},
       [](LauncherRun& r) {
         wait_running(r);
         const auto img = r.dir.path() / "hot.img";
         CHECK(chl::test::run_command({chl::test::launcher_binary(), "disk", "create-empty", img.string(), "1Mi"})
                   .exit_code == 0);
         auto add = chl::control::command_request(r.socket(), "PUT", "/v1/add-disk",
                                               json{{"path", img.string()}, {"id", "hot"}}.dump());
         CHECK((!add || add->status != 200));
         return std::string("`PUT /v1/add-disk` fails");
       },
       "Crashed", "Unknown", 3},
      {"VMM killed on vm.power-button (no answer)",
       {{"VMM_DOUBLE_CRASH_AT", "vm.power-button"}},
       [](LauncherRun& r) {
         wait_running(r);
         (void)r.cli({"stop", "--grace-period", "5"});
         return std::string("`stop`");
       },
       "Crashed", "Unknown", 3},
      // Exit 0 is Cloud Hypervisor's vmm_shutdown whose event tail was lost (cloud-hypervisor/src/
      // main.rs does not join its event-monitor thread): a clean shutdown, not a crash.
      {"VMM exits 0 with no event while running (CH's lost event tail)",
       {{"VMM_DOUBLE_EXIT_WITHOUT_EVENTS", "running"}, {"VMM_DOUBLE_PHASE_DELAY_MS", "300"}},
       nullptr, "Shutoff", "Shutdown", 0},
      // The event monitor closing under a live VMM: the launcher cannot follow the VM, so it ends
      // the VMM and reports Shutoff (Failed), as libvirt on QEMU monitor EOF.
      {"event monitor closed while running (VMM lives on)",
       {{"VMM_DOUBLE_CLOSE_EVENTS_AT", "running"}, {"VMM_DOUBLE_PHASE_DELAY_MS", "300"}},
       nullptr, "Shutoff", "Failed", 3},
      {"event monitor closed while paused (VMM lives on)",
       {{"VMM_DOUBLE_CLOSE_EVENTS_AT", "paused"}, {"VMM_DOUBLE_PHASE_DELAY_MS", "200"}},
       [](LauncherRun& r) {
         wait_running(r);
         CHECK(r.cli({"pause"}).exit_code == 0);
         return std::string("paused by `pause`; the launcher ends the VMM 2 s after the stream closed");
       },
       "Shutoff", "Failed", 3},
      {"event monitor closed during a slow vm.boot",
       {{"VMM_DOUBLE_CLOSE_EVENTS_AT", "boot"}, {"VMM_DOUBLE_BOOT_DELAY_MS", "6000"}},
       nullptr, "Shutoff", "Failed", 1},
      {"event monitor closed on vm.shutdown (forced stop under way)",
       {{"VMM_DOUBLE_CLOSE_EVENTS_AT", "shutdown"}},
       [](LauncherRun& r) {
         wait_running(r);
         (void)r.cli({"kill"});
         return std::string("`kill`: the stop goes on; the closed stream changes nothing");
       },
       "Shutoff", "Destroyed", 4},
      {"500 on vm.create", {{"VMM_DOUBLE_FAIL", "vm.create"}}, nullptr, "Shutoff", "Destroyed", 1},
      {"500 on vm.boot", {{"VMM_DOUBLE_FAIL", "vm.boot"}}, nullptr, "Shutoff", "Destroyed", 1},
      {"500 on vm.pause",
       {{"VMM_DOUBLE_FAIL", "vm.pause"}},
       [](LauncherRun& r) {
         wait_running(r);
         auto p = r.cli({"pause"});
         CHECK(p.exit_code == 1);
         CHECK_MESSAGE(p.output.find("The VM could not be paused") != std::string::npos, p.output);
         CHECK(r.domain()["state"] == "Running");
         CHECK(r.cli({"stop"}).exit_code == 0);
         return std::string("`pause` exits 1 with CH's message, VM still Running; then `stop`");
       },
       "Shutoff", "Shutdown", 0},
      {"500 on vm.snapshot",
       {{"VMM_DOUBLE_FAIL", "vm.snapshot"}},
       [](LauncherRun& r) {
         wait_running(r);
         auto s = r.cli({"snapshot", "--dir", (r.state_dir() / "snap").string()});
         CHECK(s.exit_code == 1);
         CHECK_FALSE(fs::exists(r.state_dir() / "snap"));
         CHECK(r.wait_state("Running"));  // resumed after the failed snapshot
         CHECK(r.cli({"stop"}).exit_code == 0);
         return std::string("`snapshot` exits 1, no directory left, VM resumed; then `stop`");
       },
       "Shutoff", "Shutdown", 0},
      {"500 on vm.power-button",
       {{"VMM_DOUBLE_FAIL", "vm.power-button"}},
       [](LauncherRun& r) {
         wait_running(r);
         (void)r.cli({"stop", "--grace-period", "1"});
         return std::string("`stop`: no power button, forced off after the grace period");
       },
       "Shutoff", "Destroyed", 4},
      {"500 on vm.shutdown",
       {{"VMM_DOUBLE_FAIL", "vm.shutdown"}},
       [](LauncherRun& r) {
         wait_running(r);
         (void)r.cli({"kill"});
         return std::string("`kill`: vm.shutdown refused, the VMM is SIGKILLed");
       },
       "Shutoff", "Destroyed", 4},
      {"vm.create never answers", {{"VMM_DOUBLE_HANG", "vm.create"}}, nullptr, "Shutoff", "Destroyed", 1},
      {"vm.pause never answers (API blocked)",
       {{"VMM_DOUBLE_HANG", "vm.pause"}},
       [](LauncherRun& r) {
         wait_running(r);
         auto p = r.cli({"pause"});
         CHECK(p.exit_code == 1);
         (void)r.cli({"kill"});
         return std::string("`pause` times out (exit 1); `kill` ends the hung VMM with SIGKILL");
       },
       "Shutoff", "Destroyed", 4},
      {"garbage between events",
       {{"VMM_DOUBLE_GARBAGE_EVENTS", "1"}},
       [](LauncherRun& r) {
         wait_running(r);
         CHECK(r.cli({"pause"}).exit_code == 0);
         CHECK(r.wait_state("Paused"));
         CHECK(r.cli({"resume"}).exit_code == 0);
         CHECK(r.wait_state("Running"));
         CHECK(r.cli({"stop"}).exit_code == 0);
         return std::string("pause, resume, stop: every state right");
       },
       "Shutoff", "Shutdown", 0},
      {"console client vanishes mid-write",
       {{"VMM_DOUBLE_HEARTBEAT_MS", "1"}},
       [](LauncherRun& r) {
         wait_running(r);
         for (int i = 0; i < 5; ++i) {
           // Connect, send, and drop the connection without reading the flood of output.
           if (auto fd = chl::common::connect_unix(r.state_dir() / "virt-serial0")) {
             linger l{1, 0};  // RST: gone mid-write from the bridge's point of view
             ::setsockopt(fd->get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
           }
         }
         CHECK(r.console("", "heartbeat").find("heartbeat") != std::string::npos);
         CHECK(r.domain()["state"] == "Running");
         CHECK(r.cli({"stop"}).exit_code == 0);
         return std::string("5 clients reset mid-output; the next client is served; then `stop`");
       },
       "Shutoff", "Shutdown", 0},
      // Before any VMM: the launch is refused with a clear error and nothing is started.
      {"disk full during the containerDisk conversion (4 MiB tmpfs state dir, 12 MiB of data)",
       {},
       [](LauncherRun&) {
         return std::string("error names the disk and ENOSPC; no raw file, no temporary file, no VMM started");
       },
       "—", "—", 1, disk_full,
       {"containerDisk 'rootdisk'", "containerdisk-rootdisk.raw", "No space left on device"}},
      {"missing firmware (EFI VMI, no CLOUDHV.fd in --firmware-dir)",
       {},
       [](LauncherRun&) { return std::string("error names the firmware and where it looked; no VMM started"); },
       "—", "—", 1, missing_firmware,
       {"CLOUDHV.fd", "not found", "--firmware-dir"}},
      {"launcher SIGKILLed",
       {},
       [](LauncherRun& r) {
         wait_running(r);
         REQUIRE(r.child.signal(SIGKILL));
         return std::string("the VMM dies with it (PDEATHSIG); a new launcher recovers the directory "
                            "(test_launcher_faults)");
       },
       "—", "—", 128 + SIGKILL},
  };
  return kRows;
}

std::string table_of(const std::vector<std::string>& lines) {
  std::string t = "| fault | what the test does | final state (reason) | exit | processes left | files left |\n"
                  "|---|---|---|---|---|---|\n";
  for (const auto& l : lines) t += l + "\n";
  return t;
}

}  // namespace

TEST_CASE("fault matrix: every injected fault ends in the expected state and exit code, nothing left") {
  // Lane double: the matrix is of the VMM double's injected faults (its knobs), never run against
  // a real cloud-hypervisor (scripts/test.sh's real-ch lane leaves label double out); the faults a
  // real CH can be given are caused for real in test_launcher_faults.cpp.
  if (chl::test::using_real_vmm()) {
    chl::test::skip("the fault matrix injects its faults with the VMM double's knobs (lane double)");
    return;
  }
  std::vector<std::string> lines;
  std::vector<std::string> skipped;
  // CHL_FAULT_ROW=<text>: only the rows whose fault holds it (to chase one row under load).
  const char* only = std::getenv("CHL_FAULT_ROW");
  for (const Row& row : rows()) {
    if (only && row.fault.find(only) == std::string::npos) continue;
    CAPTURE(row.fault);
    LauncherRun r;
    Setup su;
    if (row.setup) {
      su = row.setup(r);
      if (!su.skip.empty()) {
        skipped.push_back(row.fault + ": " + su.skip);
        continue;
      }
    } else {
      r.write_vmi("console=ttyS0", 2);
    }
    r.start(su.args, row.env.empty() ? chl::test::vmm_binary() : r.vmm_with_env(row.env));
    long pid = -1;
    std::string note = "—";
    if (row.act) {
      note = row.act(r);
    }
    if (row.state != "—") pid = vmm_pid_of(r);
    auto exit = r.wait_exit(std::chrono::seconds(90));
    REQUIRE_MESSAGE(exit, r.output());
    const int code = exit->exited ? exit->code : 128 + exit->signal;
    CHECK_MESSAGE(code == row.exit_code, r.output());
    std::string reason = "—";
    std::string state = row.state == "—" ? "—" : ended(r.output(), &reason);
    CHECK_MESSAGE(state == row.state, r.output());
    CHECK_MESSAGE(reason == row.reason, r.output());
    for (const auto& text : row.says) CHECK_MESSAGE(r.output().find(text) != std::string::npos, text << " in:\n" << r.output());
    if (row.state == "—" && row.exit_code != 128 + SIGKILL) {
      // Never started: no VMM was run, and no disk image or temporary file was left.
      CHECK_MESSAGE(!fs::exists(r.state_dir() / "vmm.log"), r.output());
      CHECK(r.output().find("launching ") == std::string::npos);
      std::error_code ec;
      for (const auto& e : fs::recursive_directory_iterator(r.state_dir(), ec)) {
        const std::string ext = e.path().extension().string();
        CHECK_MESSAGE((ext != ".raw" && ext != ".img"), "left behind: " << e.path());
      }
    }
    const bool gone = process_gone(pid);
    CHECK(gone);
    auto left = leftovers(r.state_dir());
    if (row.exit_code != 128 + SIGKILL) {
      std::string names;
      for (const auto& f : left) names += f + " ";
      CHECK_MESSAGE(left.empty(), "left behind: " << names);
    }
    std::string files = left.empty() ? "none" : "vmm.pid (recovered by the next launcher)";
    lines.push_back("| " + row.fault + " | " + note + " | " + state + (state == "—" ? "" : " (" + reason + ")") + " | " +
                    std::to_string(code) + " | " + (gone ? "none" : "**VMM left**") + " | " + files + " |");
  }
  if (!skipped.empty()) {
    // A partial table cannot be compared with the page: say what could not run here.
    std::string why;
    for (const auto& w : skipped) why += "\n  " + w;
    chl::test::skip("fault matrix: rows skipped, docs/reliability.md not compared:" + why);
    return;
  }
  if (only) {
    MESSAGE("fault matrix: only the rows holding '" << only << "' (CHL_FAULT_ROW); docs/reliability.md not compared");
    return;
  }
  const std::string table = table_of(lines);
  chl::test::write_file(chl::test::binary_dir() / "reliability-matrix.md", table);
  const fs::path doc = chl::test::source_dir() / "docs" / "reliability.md";
  const std::string begin = "<!-- fault-matrix: generated by tests/launcher/test_launcher_fault_matrix.cpp -->\n";
  const std::string end = "<!-- end fault-matrix -->\n";
  std::string text = fs::exists(doc) ? chl::test::read_file(doc) : std::string();
  auto b = text.find(begin);
  auto e = text.find(end);
  if (const char* u = std::getenv("CHL_UPDATE_DOCS"); u && std::string(u) == "1") {
    if (b == std::string::npos || e == std::string::npos) {
      text += "\n" + begin + table + end;
    } else {
      text = text.substr(0, b + begin.size()) + table + text.substr(e);
    }
    chl::test::write_file(doc, text);
    MESSAGE("docs/reliability.md updated");
  } else {
    REQUIRE_MESSAGE(b != std::string::npos, "docs/reliability.md has no fault-matrix block (run with CHL_UPDATE_DOCS=1)");
    REQUIRE(e != std::string::npos);
    CHECK_MESSAGE(text.substr(b + begin.size(), e - b - begin.size()) == table,
                  "docs/reliability.md's fault matrix differs from what the test saw; rerun with CHL_UPDATE_DOCS=1:\n"
                      << table);
  }
}

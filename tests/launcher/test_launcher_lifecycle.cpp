// ch-launcher run, end to end through its CLI, against the VMM double (or a real cloud-hypervisor
// with CLOUD_HYPERVISOR_BIN): lifecycle, states and reasons, exit codes, and that nothing is left
// behind. Also the faults the double injects.
#include <signal.h>

#include <atomic>

#include "tests/support/launcher_harness.hpp"
#include "tests/support/real_vmm_limits.hpp"

using chl::test::LauncherRun;
using nlohmann::json;

namespace {
long vmm_pid(const json& d) { return d.contains("vmm") && d["vmm"].contains("pid") ? d["vmm"]["pid"].get<long>() : -1; }

// A real CH that cannot save vCPU state here (tests/support/real_vmm_limits.hpp): the launcher's
// `snapshot` fails with exit 1 and CH's own chain (GetNestedState), removes the directory it
// made, and the VM it paused for the snapshot runs on.
void check_snapshot_refused(LauncherRun& r, const std::filesystem::path& snap_dir) {
  auto s = r.cli({"snapshot", "--dir", snap_dir.string()});
  CHECK(s.exit_code == 1);
  CHECK_MESSAGE(s.output.find("GetNestedState") != std::string::npos, s.output);
  CHECK_FALSE(std::filesystem::exists(snap_dir));
  CHECK_MESSAGE(r.wait_state("Running"), r.output());
  CHECK(r.domain()["state"] == "Running");
}
}  // namespace

TEST_CASE("run: full lifecycle through the CLI ends Shutoff with exit 0 and nothing left") {
  if (!chl::test::needs_cooperative_guest()) return;  // ends with a graceful stop
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  r.start();
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  json d = r.domain();
  CHECK(d["reason"] == "Booted");
  CHECK(d["name"] == "testvm");
  long pid = vmm_pid(d);
  CHECK(pid > 0);

  auto st = r.cli({"status"});
  CHECK(st.exit_code == 0);
  CHECK(st.output.find("default/testvm on cloud-hypervisor: Running (Booted)") != std::string::npos);

  auto p = r.cli({"pause"});
  CHECK_MESSAGE(p.exit_code == 0, p.output);
  CHECK(r.wait_state("Paused"));
  CHECK(r.domain()["reason"] == "User");

  // Wrong state: a clear message and exit 1, never a hang.
  auto again = r.cli({"pause"});
  CHECK(again.exit_code == 1);
  CHECK(again.output.find("cannot pause: the VM is Paused, not Running") != std::string::npos);

  CHECK(r.cli({"resume"}).exit_code == 0);
  CHECK(r.wait_state("Running"));
  CHECK(r.domain()["reason"] == "Unpaused");

  CHECK(r.cli({"reboot"}).exit_code == 0);
  CHECK(r.wait_state("Running"));

  auto stop = r.cli({"stop", "--grace-period", "10"});
  CHECK_MESSAGE(stop.exit_code == 0, stop.output);
  CHECK(stop.output.find("Shutoff (Shutdown)") != std::string::npos);
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK_MESSAGE(exit->exited, r.output());
  CHECK_MESSAGE(exit->code == 0, r.output());
  r.check_clean(pid);
}

TEST_CASE("run: the launcher confines itself with seccomp once its VMM runs") {
  if (!chl::test::needs_cooperative_guest()) return;  // ends with a graceful stop
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  r.start();
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  CHECK(r.domain()["seccomp"] == "enforce");
  // The kernel agrees: the launcher runs under a seccomp filter (mode 2), and its VMM, started
  // before, is not under the launcher's filter.
  auto proc_seccomp = [](long pid) {
    auto text = chl::test::read_file("/proc/" + std::to_string(pid) + "/status");
    auto at = text.find("Seccomp:");
    return at == std::string::npos ? std::string("?") : text.substr(at + 8, text.find('\n', at) - at - 8);
  };
  CHECK(proc_seccomp(r.child.pid()).find('2') != std::string::npos);
  if (!chl::test::using_real_vmm()) CHECK(proc_seccomp(vmm_pid(r.domain())).find('0') != std::string::npos);
  // Everything still works under the filter: console, pause/resume, reboot (a new PTY), stop.
  CHECK(r.console("", "ready").find("ready") != std::string::npos);
  CHECK(r.cli({"pause"}).exit_code == 0);
  CHECK(r.cli({"resume"}).exit_code == 0);
  CHECK(r.cli({"reboot"}).exit_code == 0);
  CHECK(r.wait_state("Running"));
  auto stop = r.cli({"stop"});
  CHECK_MESSAGE(stop.output.find("Shutoff (Shutdown)") != std::string::npos, stop.output);
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK_MESSAGE(exit->code == 0, r.output());
  CHECK(r.output().find("seccomp: launcher confined (enforce") != std::string::npos);
  CHECK(r.output().find("\"level\":\"error\"") == std::string::npos);
}

TEST_CASE("run: the guest powering itself off ends the launcher with exit 0") {
  LauncherRun r;
  r.write_vmi("console=ttyS0 poweroff");
  r.start();
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK_MESSAGE(exit->code == 0, r.output());
  CHECK(r.output().find("VM ended: state Shutoff reason Shutdown") != std::string::npos);
  r.check_clean(-1);
}

TEST_CASE("run: SIGTERM presses the power button and a cooperative guest stops cleanly") {
  if (!chl::test::needs_cooperative_guest()) return;  // ends with a graceful stop
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  r.start();
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  long pid = vmm_pid(r.domain());
  REQUIRE(r.child.signal(SIGTERM));
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK_MESSAGE(exit->code == 0, r.output());
  r.check_clean(pid);
}

TEST_CASE("run: SIGTERM with a guest that ignores the power button forces it off after the grace period") {
  LauncherRun r;
  r.write_vmi("console=ttyS0 ignore-acpi", 1);
  r.start();
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  long pid = vmm_pid(r.domain());
  REQUIRE(r.child.signal(SIGTERM));
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK_MESSAGE(exit->code == 4, r.output());
  CHECK(r.output().find("did not power off within the grace period") != std::string::npos);
  CHECK(r.output().find("VM ended: state Shutoff reason Destroyed") != std::string::npos);
  r.check_clean(pid);
}

TEST_CASE("run: kill forces the VM off at once") {
  LauncherRun r;
  r.write_vmi("console=ttyS0 ignore-acpi");
  r.start();
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  long pid = vmm_pid(r.domain());
  auto k = r.cli({"kill"});
  CHECK_MESSAGE(k.exit_code == 0, k.output);
  CHECK(k.output.find("Shutoff (Destroyed)") != std::string::npos);
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK(exit->code == 4);
  r.check_clean(pid);
}

TEST_CASE("run: a guest panic is reported Crashed (Panicked), exit 3") {
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  r.start();
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  // Typed on the console once the guest is ready, as a person would: it panics through pvpanic.
  CHECK(r.console("", "ready").find("ready") != std::string::npos);
  r.console("panic\r", "panic", std::chrono::seconds(3));
  // The launcher ends the dead guest's VMM itself (on_crash=destroy) and says how it ended.
  auto exit = r.wait_exit(std::chrono::seconds(20));
  REQUIRE(exit);
  CHECK_MESSAGE(exit->code == 3, r.output());
  CHECK(r.output().find("VM ended: state Crashed reason Panicked") != std::string::npos);
  r.check_clean(-1);
}

TEST_CASE("run: the console echoes typed input, and still does after a reboot (a new PTY)") {
  if (!chl::test::needs_cooperative_guest()) return;  // ends with a graceful stop
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  r.start();
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  // The guest reads input once it says it is ready (input typed earlier may be lost).
  CHECK(r.console("", "ready").find("ready") != std::string::npos);
  auto first = r.console("hello-before\r", "hello-before");
  CHECK_MESSAGE(first.find("cmdline: console=ttyS0") != std::string::npos, first);  // the boot banner, from scrollback
  CHECK(first.find("hello-before") != std::string::npos);
  CHECK(r.cli({"reboot"}).exit_code == 0);
  // The VMM gives the rebooted VM a new PTY (maybe under the same /dev/pts number); the
  // launcher follows it, so typing reaches the guest again.
  std::string after;
  CHECK(chl::test::wait_until(std::chrono::seconds(15), [&] {
    after = r.console("hello-after\r", "hello-after", std::chrono::milliseconds(500));
    return after.find("hello-after") != std::string::npos;
  }, std::chrono::milliseconds(100)));
  CHECK(r.cli({"stop"}).exit_code == 0);
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK(exit->code == 0);
  // The console log kept the guest's output across both PTYs.
  auto log = chl::test::read_file(r.state_dir() / "virt-serial0-log");
  CHECK(log.find("hello-before") != std::string::npos);
  CHECK(log.find("hello-after") != std::string::npos);
}

TEST_CASE("run: events stream starts with the current state and follows pause and resume") {
  if (!chl::test::needs_cooperative_guest()) return;  // ends with a graceful stop
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  r.start();
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  std::vector<json> seen;  // written by the reader thread; read here after join
  std::atomic<bool> subscribed{false};
  std::thread reader([&] {
    (void)chl::control::command_stream(r.socket(), "/v1/events", [&](const std::string& line) {
      seen.push_back(json::parse(line));
      subscribed = true;
      return seen.size() < 5;
    });
  });
  // Give the stream a moment to subscribe before acting (the first line proves it).
  CHECK(chl::test::wait_until(std::chrono::seconds(5), [&] { return subscribed.load(); }));
  CHECK(r.cli({"pause"}).exit_code == 0);
  CHECK(r.wait_state("Paused"));
  CHECK(r.cli({"resume"}).exit_code == 0);
  CHECK(r.wait_state("Running"));
  CHECK(r.cli({"stop"}).exit_code == 0);
  reader.join();
  REQUIRE(seen.size() >= 4);
  CHECK(seen[0]["type"] == "Current");
  CHECK(seen[0]["state"] == "Running");
  CHECK(seen[1]["type"] == "Suspended");
  CHECK(seen[1]["state"] == "Paused");
  CHECK(seen[2]["type"] == "Resumed");
  CHECK(seen[2]["state"] == "Running");
  CHECK(seen.back()["state"] == "Shutoff");
  r.wait_exit();
}

TEST_CASE("run: a second launcher for the same VMI refuses to start") {
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  r.start();
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  auto second = chl::test::run_command({chl::test::launcher_binary(), "run", "--vmi", r.vmi_file().string(),
                                        "--state-dir", r.state_dir().string(), "--vmm-binary",
                                        chl::test::vmm_binary(), "--volume",
                                        "kernel-boot=" + (r.dir.path() / "kernel").string()});
  CHECK(second.exit_code == 1);
  CHECK(second.output.find("another launcher is already running for this VMI") != std::string::npos);
  // The first one is untouched.
  CHECK(r.domain()["state"] == "Running");
  CHECK(r.cli({"stop"}).exit_code == 0);
  r.wait_exit();
}

TEST_CASE("run: an invalid VMI is refused with exit 2 and nothing started") {
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  {
    std::ofstream f(r.vmi_file(), std::ios::app);
    f << "      disks:\n      - name: cd\n        cdrom: {bus: sata}\n";
  }
  auto out = chl::test::run_command({chl::test::launcher_binary(), "run", "--vmi", r.vmi_file().string(),
                                     "--state-dir", r.state_dir().string(), "--vmm-binary",
                                     chl::test::vmm_binary()});
  CHECK(out.exit_code == 2);
  CHECK_FALSE(std::filesystem::exists(r.socket()));
}

TEST_CASE("run: snapshot into a new directory pauses around it, and never overwrites one") {
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  r.start();
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  auto snap_dir = r.dir.path() / "snap";
  if (const auto& why = chl::test::real_vmm_cannot_save_vcpu_state()) {
    // The launcher with CH's real refusal: exit 1 with CH's chain, no directory left half
    // written, the VM resumed and running on; the snapshot itself cannot be taken here.
    check_snapshot_refused(r, snap_dir);
    chl::test::skip_part("the snapshot itself: " + *why);
    CHECK(r.cli({"kill"}).exit_code == 0);
    r.wait_exit();
    return;
  }
  auto s = r.cli({"snapshot", "--dir", snap_dir.string()});
  CHECK_MESSAGE(s.exit_code == 0, s.output);
  CHECK(std::filesystem::exists(snap_dir));
  CHECK_FALSE(std::filesystem::is_empty(snap_dir));
  CHECK(r.domain()["state"] == "Running");  // resumed after the snapshot
  // A second snapshot into the same (now non-empty) directory is refused, nothing touched.
  auto again = r.cli({"snapshot", "--dir", snap_dir.string()});
  CHECK(again.exit_code == 1);
  CHECK(again.output.find("exists and is not empty") != std::string::npos);
  // Restore inside a running launcher is refused with the reason.
  auto restore = r.cli({"restore", "--dir", snap_dir.string()});
  CHECK(restore.exit_code == 1);
  CHECK(restore.output.find("not supported") != std::string::npos);
  CHECK(r.cli({"stop"}).exit_code == 0);
  r.wait_exit();
}

TEST_CASE("run --restore: a new launcher starts the VM from a snapshot, Running, console attached") {
  LauncherRun first;
  first.write_vmi("console=ttyS0");
  first.start();
  REQUIRE_MESSAGE(first.wait_state("Running"), first.output());
  auto snap_dir = first.dir.path() / "snap";
  if (const auto& why = chl::test::real_vmm_cannot_save_vcpu_state()) {
    check_snapshot_refused(first, snap_dir);
    chl::test::skip_part("taking the snapshot and restoring it: " + *why);
    CHECK(first.cli({"kill"}).exit_code == 0);
    first.wait_exit();
    return;
  }
  REQUIRE(first.cli({"snapshot", "--dir", snap_dir.string()}).exit_code == 0);
  CHECK(first.cli({"kill"}).exit_code == 0);
  first.wait_exit();

  // A second launcher (new state directory) restores it instead of creating a VM.
  LauncherRun second;
  second.write_vmi("console=ttyS0");
  second.start({"--restore", snap_dir.string()});
  REQUIRE_MESSAGE(second.wait_state("Running"), second.output());
  CHECK(second.output().find("restor") != std::string::npos);
  // The console follows the restored VM's PTY: typed input reaches the guest, which echoes it.
  std::string echoed;
  CHECK(chl::test::wait_until(std::chrono::seconds(10), [&] {
    echoed = second.console("after-restore\r", "after-restore", std::chrono::milliseconds(500));
    return echoed.find("after-restore") != std::string::npos;
  }, std::chrono::milliseconds(100)));
  CHECK(second.cli({"stop"}).exit_code == 0);
  auto exit = second.wait_exit();
  REQUIRE(exit);
  CHECK_MESSAGE(exit->code == 0, second.output());

  // A missing snapshot: the VMM's own reason, exit 1, nothing left.
  LauncherRun third;
  third.write_vmi("console=ttyS0");
  third.start({"--restore", (third.dir.path() / "nowhere").string()});
  auto bad = third.wait_exit();
  REQUIRE(bad);
  CHECK(bad->code == 1);
  CHECK_MESSAGE(third.output().find("restoring the VM from") != std::string::npos, third.output());
  // CH v52 checks the source is a directory first (vmm/src/migration.rs url_to_path; issue 33).
  CHECK_MESSAGE(third.output().find("Destination is not a directory") != std::string::npos,
                third.output());
  third.check_clean(-1);
}

TEST_CASE("run: a disk hot-added through the command socket appears in the VM, and can be removed") {
  if (!chl::test::needs_cooperative_guest()) return;  // ends with a graceful stop
  LauncherRun r;
  r.write_vmi("console=ttyS0");
  r.start();
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  auto img = r.dir.path() / "extra.img";
  REQUIRE(chl::test::run_command({chl::test::launcher_binary(), "disk", "create-empty", img.string(), "8Mi"}).exit_code == 0);
  nlohmann::json body = {{"path", img.string()}, {"id", "extra"}};
  auto add = chl::control::command_request(r.socket(), "PUT", "/v1/add-disk", body.dump());
  REQUIRE(add);
  CHECK_MESSAGE(add->status == 200, add->body);
  CHECK(nlohmann::json::parse(add->body).value("id", "") == "extra");
  auto d = r.domain();
  bool found = false;
  for (const auto& disk : d["info"]["config"].value("disks", nlohmann::json::array()))
    found = found || disk.value("id", "") == "extra";
  CHECK(found);
  // The event stream carries CH's vm/device-removed once the guest has ejected the disk.
  json removed_event;  // written by the reader thread; read here after join
  std::atomic<bool> subscribed{false};
  std::thread reader([&] {
    (void)chl::control::command_stream(r.socket(), "/v1/events", [&](const std::string& line) {
      subscribed = true;
      const auto e = json::parse(line, nullptr, false);
      if (e.is_object() && e.value("type", "") == "DeviceRemoved") removed_event = e;
      return removed_event.is_null();
    });
  });
  CHECK(chl::test::wait_until(std::chrono::seconds(5), [&] { return subscribed.load(); }));
  auto rm = chl::control::command_request(r.socket(), "PUT", "/v1/remove-device", R"({"id":"extra"})");
  REQUIRE(rm);
  CHECK(rm->status == 200);
  CHECK(nlohmann::json::parse(rm->body).value("removed", "") == "extra");
  bool still_there = false;
  for (const auto& disk : r.domain()["info"]["config"].value("disks", nlohmann::json::array()))
    still_there = still_there || disk.value("id", "") == "extra";
  CHECK_FALSE(still_there);
  // CH only asked the guest to eject it (vmm/src/vm.rs Vm::remove_device); the project's PVH
  // guest does (tests/guests/pvh_guest.S), and then CH forgets the id
  // (DeviceManager::eject_device): removing it again is CH's refusal, passed on. (Until the
  // guest ejects -- a guest that never does -- CH answers success again, and so does the
  // launcher: the double's test of a non-ejecting guest, test_vmm_double.cpp.)
  if (chl::test::is_project_pvh_guest(chl::test::guest_kernel())) {
    const auto in_tree = [&r] {
      const auto d = r.domain();
      return !d.is_object() || !d.contains("info") || !d["info"].is_object() ||
             !d["info"].contains("device_tree") || d["info"]["device_tree"].contains("extra");
    };
    CHECK_MESSAGE(chl::test::wait_until(std::chrono::seconds(30), [&] { return !in_tree(); }), r.domain().dump());
    auto rm2 = chl::control::command_request(r.socket(), "PUT", "/v1/remove-device", R"({"id":"extra"})");
    REQUIRE(rm2);
    CHECK(rm2->status == 500);
    CHECK_MESSAGE(rm2->body.find("Failed to find device corresponding to the given identifier") != std::string::npos,
                  rm2->body);
  }
  // An id the VM never had: the VMM's own refusal comes back.
  auto rm3 = chl::control::command_request(r.socket(), "PUT", "/v1/remove-device", R"({"id":"never-added"})");
  REQUIRE(rm3);
  CHECK(rm3->status == 500);
  CHECK(rm3->body.find("Failed to find device corresponding to the given identifier") != std::string::npos);
  CHECK(r.cli({"stop"}).exit_code == 0);
  reader.join();
  if (chl::test::is_project_pvh_guest(chl::test::guest_kernel())) {
    CHECK_MESSAGE(removed_event.is_object(), "no DeviceRemoved on /v1/events");
    if (removed_event.is_object()) CHECK(removed_event["properties"].value("id", "") == "extra");
  }
  r.wait_exit();
}

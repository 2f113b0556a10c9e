// virt-launcher mode against its peers, on the same VMI and VMM:
//   - SyncVirtualMachine -> success (the domain runs), and Sync -> the MODIFIED Running
//     notification at a notify server of ours, median of N;
//   - `ch-launcher run` -> Running (status on the command socket says Running), median of N;
//   - the real virt-launcher's Sync (869-899 ms on our machines, ../shared/reference/
//     kubevirt-observed-launcher/README.md): the peer of the first row, target a tenth of it;
//   - the launcher's RSS with the VM running in this mode (gRPC included) and its idle
//     context switches over 10 s, all threads;
//   - the VM's end as virt-handler drives it (kubevirt-domain-contract.md §2.3-2.4), rounds
//     alternating: Shutdown -> the guest powers off (MODIFIED Shutoff/Shutdown received), or
//     Kill -> MODIFIED Shutoff/Destroyed received; then DeleteDomain -> the final NoState
//     notification received and the launcher exited (0). No peer figure: the real
//     virt-launcher's recorded events carry no arrival times, only whole-second timestamps
//     (kubevirt-observed-launcher/events-masquerade: GracePeriod.DeletionTimestamp 18:58:51, the
//     final deletionTimestamp 18:58:52: Shutdown -> poweroff -> DeleteDomain -> NoState within
//     ~1-2 s there).
// Usage: bench_virt_launcher LAUNCHER VMM GUEST_ELF [N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#define DOCTEST_CONFIG_IMPLEMENT  // test_notify_server.cpp asserts with doctest
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include <nlohmann/json.hpp>

#include "bench/kubevirt/vl_bench_support.hpp"
#include "common/child_process.hpp"
#include "control/command_client.hpp"
#include "kubevirt/cmd_server.hpp"
#include "kubevirt/proto/cmd.grpc.pb.h"

namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using namespace chl::bench;

constexpr double kRealVirtLauncherSyncMs = 875;  // median of 869, 875, 899 ms (reference)

}  // namespace

int main(int argc, char** argv) {
  doctest::Context doctest_context;  // the notify server's asserts, outside any test case
  doctest_context.setAsDefaultForAssertsOutOfTestCases();
  if (argc < 4) {
    std::fprintf(stderr, "usage: bench_virt_launcher LAUNCHER VMM GUEST_ELF [N]\n");
    return 2;
  }
  const std::string launcher = argv[1], vmm = argv[2];
  const fs::path guest = argv[3];
  const int n = argc > 4 ? std::max(1, std::atoi(argv[4])) : 10;
  char tmpl[] = "/tmp/chl-bench-vl-XXXXXX";
  const fs::path w = ::mkdtemp(tmpl);
  fs::create_directories(w / "cdisks" / "kernel-boot");
  fs::copy_file(guest, w / "cdisks" / "kernel-boot" / "guest.elf");
  fs::create_directories(w / "kernel" / "boot");
  fs::copy_file(guest, w / "kernel" / "boot" / "guest.elf");
  std::ofstream(w / "vmi.json") << vl_vmi_json();

  std::vector<double> sync_ms, running_ms, run_ms, poweroff_ms, kill_ms, delete_exit_ms;
  int bad_exits = 0;
  long rss = -1, switches = -1, threads = 0;
  for (int i = 0; i < n; ++i) {
    // virt-launcher mode.
    const fs::path pod = w / ("pod" + std::to_string(i));
    fs::create_directories(pod / "share");
    auto vl = start_vl_pod(pod, launcher, vmm, w / "cdisks");
    auto& notify = *vl.notify;
    auto& child = vl.child;
    auto& cmd = vl.cmd;
    ::kubevirt::cmd::v1::VMIRequest req;
    req.mutable_vmi()->set_vmijson(vl_vmi_json());
    ::kubevirt::cmd::v1::Response r;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 60s);
    const auto t0 = Clock::now();
    auto st = cmd->SyncVirtualMachine(&ctx, req, &r);
    const auto t1 = Clock::now();
    if (!st.ok() || !r.success()) {
      std::fprintf(stderr, "Sync failed: %s %s\n", st.error_message().c_str(), r.message().c_str());
      return 1;
    }
    sync_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    while (!has_domain_status(notify, "Running")) std::this_thread::sleep_for(100us);
    running_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (i == n - 1) {
      std::this_thread::sleep_for(2s);
      rss = rss_kib(child.pid());
      const long c0 = ctxt_switches(child.pid());
      std::this_thread::sleep_for(10s);
      switches = ctxt_switches(child.pid()) - c0;
      threads =
          std::distance(fs::directory_iterator("/proc/" + std::to_string(child.pid()) + "/task"),
                        fs::directory_iterator());
    }
    // The end: Shutdown (the double's guest powers off) or Kill, then DeleteDomain.
    const auto has = [&](const std::string& status, const std::string& reason) {
      return has_domain_status(notify, status, reason);
    };
    const bool graceful = i % 2 == 0;
    const auto e0 = Clock::now();
    {
      grpc::ClientContext ectx;
      ectx.set_deadline(std::chrono::system_clock::now() + 30s);
      ::kubevirt::cmd::v1::Response er;
      (void)(graceful ? cmd->ShutdownVirtualMachine(&ectx, req, &er)
                      : cmd->KillVirtualMachine(&ectx, req, &er));
    }
    while (!has("Shutoff", graceful ? "Shutdown" : "Destroyed") && Clock::now() - e0 < 30s)
      std::this_thread::sleep_for(100us);
    (graceful ? poweroff_ms : kill_ms)
        .push_back(std::chrono::duration<double, std::milli>(Clock::now() - e0).count());
    const auto d0 = Clock::now();
    {
      grpc::ClientContext dctx;
      dctx.set_deadline(std::chrono::system_clock::now() + 30s);
      ::kubevirt::cmd::v1::Response dr;
      (void)cmd->DeleteVirtualMachine(&dctx, req, &dr);
    }
    // processVmDelete's deferred CloseLauncherClient (pkg/virt-handler/vm.go:1708): the notify
    // pipe's listener closed, its file gone; the final NoState goes over the open connection.
    notify.close_pipe();
    auto ended = child.wait_for(60s);
    const bool gone = has("NoState", "NonExistent");
    delete_exit_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - d0).count());
    if (!ended || !*ended || !(*ended)->exited || (*ended)->code != 0 || !gone) ++bad_exits;

    // `run` on the same VMI and VMM.
    const fs::path state = w / ("state" + std::to_string(i));
    const auto r0 = Clock::now();
    auto run = spawn_logged(
        {launcher, "run", "--vmi", (w / "vmi.json").string(), "--state-dir", state.string(),
         "--vmm-binary", vmm, "--volume", "kernel-boot=" + (w / "kernel").string()},
        w / "run.out");
    for (;;) {
      auto s = chl::control::command_request(state / "launcher.sock", "GET", "/v1/domain", {}, 1s);
      if (s && s->body.find("\"state\":\"Running\"") != std::string::npos) break;
      std::this_thread::sleep_for(200us);
    }
    run_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - r0).count());
    (void)chl::control::command_request(state / "launcher.sock", "PUT", "/v1/kill", {}, 5s);
    (void)run.wait_for(30s);
  }
  std::error_code ec;
  fs::remove_all(w, ec);

  const double s = median(sync_ms), rn = median(running_ms), ru = median(run_ms);
  std::printf(
      "Sync -> success (domain Running), median of %d: %.1f ms (real virt-launcher: %.0f ms)\n", n,
      s, kRealVirtLauncherSyncMs);
  std::printf("Sync -> MODIFIED Running notification received, median of %d: %.1f ms\n", n, rn);
  std::printf("ch-launcher run -> Running (status poll), median of %d: %.1f ms\n", n, ru);
  std::printf(
      "launcher RSS in virt-launcher mode with a running VM: %.1f MiB (%ld threads); context "
      "switches in 10 s idle: %ld\n",
      rss / 1024.0, threads, switches);
  std::printf(
      "RESULT\tvl_sync\tvirt-launcher mode: Sync -> Running (median)\t%.1f\treal "
      "virt-launcher\t%.0f\tms\tfaster_ge\t10\n",
      s, kRealVirtLauncherSyncMs);
  std::printf(
      "RESULT\tvl_sync_vs_run\tvirt-launcher mode: Sync -> Running notification vs run -> Running "
      "(median)\t%.1f\tch-launcher run\t%.1f\tms\tdiff_le\t5\n",
      rn, ru);
  std::printf(
      "RESULT\tvl_rss\tvirt-launcher mode: launcher RSS, VM running (KubeVirt transport "
      "included)\t%.1f\treal virt-launcher pod processes\t141\tMiB\tabs_le\t12\n",
      rss / 1024.0);
  std::printf(
      "VM end, median: Shutdown -> Shutoff/Shutdown %.1f ms (%zu), Kill -> Shutoff/Destroyed %.1f "
      "ms (%zu), "
      "DeleteDomain -> final NoState and exit 0 %.1f ms (%zu); launchers not ending with NoState "
      "and exit 0: %d\n",
      median(poweroff_ms), poweroff_ms.size(), median(kill_ms), kill_ms.size(),
      median(delete_exit_ms), delete_exit_ms.size(), bad_exits);
  std::printf(
      "RESULT\tvl_poweroff\tvirt-launcher mode: Shutdown -> guest poweroff seen (MODIFIED "
      "Shutoff/Shutdown, median)\t%.1f\t\t\tms\tabs_le\t1000\n",
      median(poweroff_ms));
  std::printf(
      "RESULT\tvl_kill\tvirt-launcher mode: Kill -> MODIFIED Shutoff/Destroyed "
      "(median)\t%.1f\t\t\tms\tabs_le\t1000\n",
      median(kill_ms));
  std::printf(
      "RESULT\tvl_delete_exit\tvirt-launcher mode: DeleteDomain -> final NoState event and exit 0 "
      "(median)\t%.1f\t\t\tms\tabs_le\t1000\n",
      median(delete_exit_ms));
  // Idle is not 0 since the guest agent client: CH's hybrid vsock has no connect event, so
  // the launcher tries to reach an agent every <= 10 s for the first five minutes (the
  // guest is booting), ~2 switches each (guest_agent/backoff.hpp); this row measures that
  // window. Later (one attempt a minute): bench_mass_start --steady-after.
  std::printf(
      "RESULT\tvl_idle\tvirt-launcher mode: context switches per second, idle, first minute "
      "(all threads; the guest agent looked for every <= 10 s)\t%.1f\t\t\t/s\tabs_le\t0.5\n",
      switches / 10.0);
  return bad_exits == 0 ? 0 : 1;
}

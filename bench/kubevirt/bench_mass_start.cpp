// Mass start (issue 29's figures): N launchers in virt-launcher mode on one node, each in its own
// pod directory with a notify server of ours standing in for virt-handler's, on the Cloud
// Hypervisor path against the VMM double ($CLOUD_HYPERVISOR_BIN instead when set: the rows' keys
// then start with "ch_"), all Synced at once. For each N (1, 5, 20 by default):
//   - the time from the first SyncVirtualMachine sent to the last pod's MODIFIED Running event
//     received;
//   - the sum of the launchers' PSS (/proc/<pid>/smaps_rollup) with every VM running, the
//     launchers only; the doubles' PSS is printed apart (the double is a stand-in for CH, not CH:
//     a real CH's memory is the guest's and CH's own, not measured here);
//   - over 10 s once all are Running (2 s after the last): the CPU all N launchers use (utime +
//     stime from /proc/<pid>/stat, as % of one CPU; a tick is 10 ms, so 0.1 % per 10 s) and their
//     voluntary context switches per second (all threads).
// The peer is the real virt-launcher observed in ../shared/reference/kubevirt-observed-launcher/
// (README.md): one pod's Sync -> Running took 869-899 ms; its pod's launcher-side processes
// (virt-launcher-monitor, virt-launcher, the libvirt daemon, virtlogd) had 141 MiB RSS. Its mass
// start was not measured: the time peer is one pod's 875 ms, unscaled (N real launchers started
// at once take at least that; the most favourable figure for the peer), and the memory peer is
// 141 MiB × N (per pod; RSS, where ours is PSS: shared pages counted once per node).
// Usage: bench_mass_start [--idle-seconds S] [--steady-after S] LAUNCHER VMM GUEST_ELF [N...]
// (--steady-after 380: for the largest N, the idle again once the guest agent is no longer
// expected; guest_agent/backoff.hpp)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <latch>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#define DOCTEST_CONFIG_IMPLEMENT  // test_notify_server.cpp asserts with doctest
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include "bench/kubevirt/vl_bench_support.hpp"

namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using namespace chl::bench;

constexpr double kRealSyncMs = 875;     // one pod, median of 869, 875, 899 ms
constexpr double kRealPodRssMiB = 141;  // one pod's launcher-side processes, before the VMM

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Idle {
  double seconds = 0;
  double launchers_cpu_pct = 0;    // utime + stime
  double launchers_sched_pct = 0;  // schedstat's run time (ns): the same, finer than a tick
  double launchers_vcs_per_s = 0, doubles_cpu_pct = 0;
};

struct Round {
  int n = 0;
  double first_to_last_running_ms = 0, median_sync_to_running_ms = 0;
  long launchers_pss_kib = 0, launchers_rss_kib = 0, doubles_pss_kib = 0, doubles_rss_kib = 0;
  Idle idle;                   // 2 s after the last Running
  std::optional<Idle> steady;  // after --steady-after (the guest agent no longer expected)
  int doubles = 0, failed = 0;
};

// CPU and voluntary context switches of the launchers (and the doubles' CPU) over `window`.
Idle measure_idle(const std::vector<VlPod>& pods, const std::vector<pid_t>& doubles,
                  std::chrono::seconds window) {
  struct Sample {
    long lcpu = 0, lvcs = 0, dcpu = 0, lns = 0;
  };
  const auto sample = [&] {
    Sample x;
    for (const auto& p : pods) {
      x.lcpu += cpu_ticks(p.child.pid());
      x.lvcs += voluntary_ctxt_switches(p.child.pid());
      x.lns += run_time_ns(p.child.pid());
    }
    for (pid_t d : doubles) x.dcpu += cpu_ticks(d);
    return x;
  };
  const auto t0 = Clock::now();
  const Sample a = sample();
  std::this_thread::sleep_for(window);
  const Sample b = sample();
  Idle i;
  i.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  i.launchers_cpu_pct = 100.0 * static_cast<double>(b.lcpu - a.lcpu) / tick / i.seconds;
  i.launchers_sched_pct = 100.0 * static_cast<double>(b.lns - a.lns) / 1e9 / i.seconds;
  i.doubles_cpu_pct = 100.0 * static_cast<double>(b.dcpu - a.dcpu) / tick / i.seconds;
  i.launchers_vcs_per_s = static_cast<double>(b.lvcs - a.lvcs) / i.seconds;
  return i;
}

Round mass_start(int n, const fs::path& w, const std::string& launcher, const std::string& vmm,
                 std::chrono::seconds idle_window, std::chrono::seconds steady_after) {
  Round r;
  r.n = n;
  std::vector<VlPod> pods;
  pods.reserve(n);
  for (int i = 0; i < n; ++i)
    pods.push_back(start_vl_pod(w / ("n" + std::to_string(n) + "-pod" + std::to_string(i)),
                                launcher, vmm, w / "cdisks", "benchvm" + std::to_string(i)));
  std::vector<std::string> vmis;
  for (int i = 0; i < n; ++i) {
    char uid[64];
    std::snprintf(uid, sizeof uid, "5b1e0c2a-0000-4000-8000-%012d", i);
    vmis.push_back(vl_vmi_json("benchvm" + std::to_string(i), uid));
  }

  // Every pod's Sync on its own thread, released together; every pod's Running seen by its own
  // waiter (event-driven: the notify server wakes it).
  std::latch go(1);
  std::vector<Clock::time_point> sent(n), running(n);
  std::vector<int> ok(n, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      ::kubevirt::cmd::v1::VMIRequest req;
      req.mutable_vmi()->set_vmijson(vmis[i]);
      ::kubevirt::cmd::v1::Response resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 120s);
      go.wait();
      sent[i] = Clock::now();
      auto st = pods[i].cmd->SyncVirtualMachine(&ctx, req, &resp);
      if (!st.ok() || !resp.success())
        std::fprintf(stderr, "pod %d: Sync failed: %s %s\n", i, st.error_message().c_str(),
                     resp.message().c_str());
    });
    threads.emplace_back([&, i] {
      go.wait();
      ok[i] = wait_domain_status(*pods[i].notify, "Running", 60s) ? 1 : 0;
      running[i] = Clock::now();
    });
  }
  std::this_thread::sleep_for(100ms);  // every thread waiting at the latch
  go.count_down();
  for (auto& t : threads) t.join();
  const auto first = *std::min_element(sent.begin(), sent.end());
  const auto last = *std::max_element(running.begin(), running.end());
  r.first_to_last_running_ms = ms(last - first);
  std::vector<double> per_pod;
  for (int i = 0; i < n; ++i) per_pod.push_back(ms(running[i] - sent[i]));
  r.median_sync_to_running_ms = median(per_pod);
  for (int i = 0; i < n; ++i) r.failed += ok[i] ? 0 : 1;

  // Memory with every VM running, then 10 s idle.
  std::this_thread::sleep_for(2s);
  std::vector<pid_t> doubles;
  for (auto& p : pods) {
    r.launchers_pss_kib += pss_kib(p.child.pid());
    r.launchers_rss_kib += rss_kib(p.child.pid());
    for (pid_t c : children_of(p.child.pid())) {
      doubles.push_back(c);
      r.doubles_pss_kib += pss_kib(c);
      r.doubles_rss_kib += rss_kib(c);
    }
  }
  r.doubles = static_cast<int>(doubles.size());
  r.idle = measure_idle(pods, doubles, idle_window);
  if (steady_after.count() > 0) {
    // The guest agent's reconnect schedule slows down once it has not answered for five minutes
    // (guest_agent/backoff.hpp): the launchers' idle from then on.
    std::this_thread::sleep_for(steady_after - idle_window - 2s);
    r.steady = measure_idle(pods, doubles, std::max(idle_window, std::chrono::seconds(120)));
  }

  // The end as virt-handler drives it: Kill, Shutoff/Destroyed, DeleteDomain, the launcher exits.
  threads.clear();
  std::vector<int> clean(n, 0);
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      ::kubevirt::cmd::v1::VMIRequest req;
      req.mutable_vmi()->set_vmijson(vmis[i]);
      ::kubevirt::cmd::v1::Response resp;
      {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + 30s);
        (void)pods[i].cmd->KillVirtualMachine(&ctx, req, &resp);
      }
      (void)wait_domain_status(*pods[i].notify, "Shutoff", 30s);
      {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + 30s);
        (void)pods[i].cmd->DeleteVirtualMachine(&ctx, req, &resp);
      }
      auto ended = pods[i].child.wait_for(60s);
      clean[i] = ended && *ended && (*ended)->exited && (*ended)->code == 0;
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i)
    if (!clean[i])
      std::fprintf(stderr, "pod %d: did not end with exit 0 (log: %s)\n", i,
                   (pods[i].dir / "out").c_str());
  return r;
}

void print_idle(int n, const char* when, const Idle& i) {
  std::printf(
      "N=%d: idle %s, %.0f s: launchers %.2f %% of one CPU (utime+stime; %.3f %% by schedstat), "
      "%.2f voluntary context switches/s (%.3f each); VMMs %.2f %% of one CPU\n",
      n, when, i.seconds, i.launchers_cpu_pct, i.launchers_sched_pct, i.launchers_vcs_per_s,
      i.launchers_vcs_per_s / n, i.doubles_cpu_pct);
}

const char* plural(int n) { return n == 1 ? "" : "s"; }

}  // namespace

int main(int argc, char** argv) {
  doctest::Context doctest_context;  // the notify server's asserts, outside any test case
  doctest_context.setAsDefaultForAssertsOutOfTestCases();
  std::vector<std::string> pos;
  std::chrono::seconds idle_window(10), steady_after(0);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--idle-seconds" && i + 1 < argc)
      idle_window = std::chrono::seconds(std::max(1, std::atoi(argv[++i])));
    else if (a == "--steady-after" && i + 1 < argc)
      steady_after = std::chrono::seconds(std::max(0, std::atoi(argv[++i])));
    else
      pos.push_back(a);
  }
  if (pos.size() < 3) {
    std::fprintf(stderr,
                 "usage: bench_mass_start [--idle-seconds S] [--steady-after S] LAUNCHER VMM "
                 "GUEST_ELF [N...]\n"
                 "  --steady-after S: for the largest N, measure the idle again (120 s) S seconds "
                 "after the last Running (380: past the guest agent's five minutes, "
                 "guest_agent/backoff.hpp)\n");
    return 2;
  }
  const std::string launcher = pos[0];
  std::string vmm = pos[1];
  // As the other CH benches: $CLOUD_HYPERVISOR_BIN, when set, is the VMM instead of the double;
  // the rows then carry "ch_" keys and say so.
  const char* real_ch = std::getenv("CLOUD_HYPERVISOR_BIN");
  const bool real = real_ch && *real_ch;
  if (real) vmm = real_ch;
  const char* k = real ? "ch_" : "";
  const char* on = real ? "real Cloud Hypervisor" : "VMM double";
  std::printf("VMM: %s (%s)\n", on, vmm.c_str());
  std::vector<int> ns;
  for (std::size_t i = 3; i < pos.size(); ++i) ns.push_back(std::max(1, std::atoi(pos[i].c_str())));
  if (ns.empty()) ns = {1, 5, 20};
  if (steady_after.count() > 0 && steady_after < idle_window + 3s) steady_after = idle_window + 3s;
  char tmpl[] = "/tmp/chl-bench-mass-XXXXXX";
  const fs::path w = ::mkdtemp(tmpl);
  fs::create_directories(w / "cdisks" / "kernel-boot");
  fs::copy_file(pos[2], w / "cdisks" / "kernel-boot" / "guest.elf");

  std::vector<Round> rounds;
  int failed = 0;
  for (std::size_t k = 0; k < ns.size(); ++k) {
    const int n = ns[k];
    rounds.push_back(mass_start(n, w, launcher, vmm, idle_window,
                                k + 1 == ns.size() ? steady_after : std::chrono::seconds(0)));
    const Round& r = rounds.back();
    failed += r.failed;
    std::printf(
        "N=%d: first Sync sent -> last Running received %.1f ms (median per pod Sync -> Running "
        "%.1f ms)%s\n",
        n, r.first_to_last_running_ms, r.median_sync_to_running_ms,
        r.failed ? " SOME NEVER RAN" : "");
    std::printf(
        "N=%d: launchers PSS %.1f MiB (RSS %.1f MiB), %.2f MiB PSS each; VMMs (%d) "
        "PSS %.1f MiB (RSS %.1f MiB)\n",
        n, r.launchers_pss_kib / 1024.0, r.launchers_rss_kib / 1024.0,
        r.launchers_pss_kib / 1024.0 / n, r.doubles, r.doubles_pss_kib / 1024.0,
        r.doubles_rss_kib / 1024.0);
    print_idle(n, "2 s after the last Running", r.idle);
    if (r.steady) print_idle(n, "after --steady-after", *r.steady);
    std::fflush(stdout);
  }
  std::error_code ec;
  if (failed == 0) fs::remove_all(w, ec);

  // Targets: Sync -> Running ≥ 10× faster than the real launcher's one pod (as vl_sync), and for
  // 20 pods on one node ≥ 5× (20 launchers' start work shares the node's cores); the launchers'
  // memory ≥ 10× smaller than the real pods'; idle, per launcher, ≤ 0.1 % of one CPU and, while
  // the guest agent is looked for (the first five minutes: an attempt every ≤ 10 s, ~2 switches
  // each), ≤ 0.5 switches/s; once it is no longer expected (one attempt a minute) ≤ 0.05/s.
  for (const Round& r : rounds) {
    std::printf(
        "RESULT\t%smass_running_%d\tmass start, %d pod%s Synced at once (%s): first Sync -> "
        "last Running\t%.1f\treal virt-launcher, one pod's Sync (not "
        "×N)\t%.0f\tms\tfaster_ge\t%d\n",
        k, r.n, r.n, plural(r.n), on, r.first_to_last_running_ms, kRealSyncMs, r.n >= 20 ? 5 : 10);
    std::printf(
        "RESULT\t%smass_pss_%d\tmass start, %d pod%s (%s): launchers' PSS summed, VMs running (the "
        "VMMs apart)\t%.1f\treal virt-launcher pod processes' RSS "
        "×%d\t%.0f\tMiB\tfaster_ge\t10\n",
        k, r.n, r.n, plural(r.n), on, r.launchers_pss_kib / 1024.0, r.n, kRealPodRssMiB * r.n);
    std::printf(
        "RESULT\t%smass_idle_cpu_%d\tmass start, %d pod%s (%s): idle CPU of all launchers (%% of one "
        "CPU)\t%.2f\t\t\t%%\tabs_le\t%.1f\n",
        k, r.n, r.n, plural(r.n), on, r.idle.launchers_cpu_pct, 0.1 * r.n);
    std::printf(
        "RESULT\t%smass_idle_cs_%d\tmass start, %d pod%s (%s): voluntary context switches/s of all "
        "launchers, idle (first minutes: the guest agent is looked "
        "for)\t%.2f\t\t\t/s\tabs_le\t%.1f\n",
        k, r.n, r.n, plural(r.n), on, r.idle.launchers_vcs_per_s, 0.5 * r.n);
    if (r.steady)
      std::printf(
          "RESULT\t%smass_steady_cs_%d\tmass start, %d pod%s (%s): voluntary context switches/s of all "
          "launchers, idle after %lld s (no agent: one attempt a "
          "minute)\t%.2f\t\t\t/s\tabs_le\t%.2f\n",
          k, r.n, r.n, plural(r.n), on, static_cast<long long>(steady_after.count()),
          r.steady->launchers_vcs_per_s, 0.05 * r.n);
  }
  const Round& big = rounds.back();
  std::printf(
      "RESULT\t%smass_vmm_pss_%d\tmass start, %d pod%s: the VMMs' PSS summed (%s; not in the "
      "launchers' row)\t%.1f\t\t\tMiB\tinfo\t\n",
      k, big.n, big.n, plural(big.n),
      real ? "real Cloud Hypervisor, guest memory included" : "VMM doubles: a stand-in, not CH",
      big.doubles_pss_kib / 1024.0);
  return failed == 0 ? 0 : 1;
}

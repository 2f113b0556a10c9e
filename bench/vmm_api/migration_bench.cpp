// migration_bench: Cloud Hypervisor's live migration between two VMM processes on one machine,
// vm.send-migration to a vm.receive-migration over a unix socket (the double by default: its
// figures are the protocol's overhead only, its guest memory is zeros; $CLOUD_HYPERVISOR_BIN or
// --vmm with --kernel for a real one). Per guest size, the median of N runs:
//   total:    the vm.send-migration call, from the request to its answer;
//   downtime: from the source's vm/pausing event to the target's vm/resumed event, both read as
//             they arrive on the two event monitors (the guest runs on neither in between).
//
//   migration_bench [--vmm PATH] [--kernel PATH] [--n N]
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.hpp"
#include "common/unique_fd.hpp"
#include "kubevirt/migration_relay.hpp"
#include "vmm_api/client.hpp"

namespace {

using chl::common::UniqueFd;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// A VMM with its event monitor on a pipe; the bench notes when a given event arrives.
struct Vmm {
  chl::common::ChildProcess proc;
  UniqueFd events;
  std::string text;
  std::unique_ptr<chl::vmm_api::Client> api;

  static std::optional<Vmm> start(const std::string& bin, const fs::path& sock) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return std::nullopt;
    chl::common::SpawnOptions so;
    so.argv = {bin, "--api-socket", "path=" + sock.string(), "--event-monitor", "fd=3"};
    so.env = {"PATH=/usr/bin:/bin"};
    so.pass_fds = {{p[1], 3}};
    const int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    so.stdout_fd = devnull;
    so.stderr_fd = devnull;
    auto c = chl::common::ChildProcess::spawn(so);
    ::close(p[1]);
    ::close(devnull);
    if (!c) return std::nullopt;
    Vmm v;
    v.proc = std::move(*c);
    v.events.reset(p[0]);
    (void)::fcntl(p[0], F_SETFL, O_NONBLOCK);
    chl::vmm_api::ClientOptions co;
    co.migration_timeout = std::chrono::minutes(10);
    v.api = std::make_unique<chl::vmm_api::Client>(sock.string(), co);
    for (int i = 0; i < 500 && !v.api->vmm_ping(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return v;
  }
};

// Watch both event pipes; record the arrival of `src_event` on a and `dst_event` on b.
struct Watch {
  std::atomic<bool> stop{false};
  std::optional<Clock::time_point> paused, resumed;
  void run(int a, int b) {
    std::string ta, tb;
    while (!stop) {
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (::poll(p, 2, 20) <= 0) continue;
      char buf[65536];
      for (int i = 0; i < 2; ++i) {
        if (!p[i].revents) continue;
        const ssize_t n = ::read(i == 0 ? a : b, buf, sizeof buf);
        if (n <= 0) continue;
        std::string& t = i == 0 ? ta : tb;
        t.append(buf, static_cast<std::size_t>(n));
        if (i == 0 && !paused && t.find("\"pausing\"") != std::string::npos) paused = Clock::now();
        if (i == 1 && !resumed && t.find("\"resumed\"") != std::string::npos)
          resumed = Clock::now();
      }
    }
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One way of carrying the migration: straight from VMM to VMM, or through the launcher's relay
// (kubevirt/migration_relay.hpp, paced to `bandwidth` when set), with a tap NIC in each VMM's
// own network namespace (`nic`: the VMMs run under `ip netns exec`).
struct Mode {
  bool relay = false;
  std::uint64_t bandwidth = 0;
  bool nic = false;
};

struct Figures {
  double total = 0, down = 0;
};

std::string sh(const std::string& cmd) {
  std::string out;
  if (std::FILE* p = ::popen((cmd + " 2>&1").c_str(), "r")) {
    char b[256];
    while (std::fgets(b, sizeof b, p)) out += b;
    if (::pclose(p) != 0) return out.empty() ? "failed" : out;
    return {};
  }
  return "popen failed";
}

// Two namespaces with a tap "tap0" each (owned by us, up), as virt-handler leaves a pod; "" when
// ready, else why not.
std::string make_pod_taps(const std::string& tag) {
  if (::geteuid() != 0) return "needs root (network namespaces)";
  for (const char* side : {"s", "d"}) {
    const std::string ns = "chlmb" + tag + side;
    for (const std::string& c :
         {"ip netns add " + ns, "ip -n " + ns + " tuntap add dev tap0 mode tap vnet_hdr user 0",
          "ip -n " + ns + " link set tap0 up"})
      if (auto e = sh(c); !e.empty()) return c + ": " + e;
  }
  return {};
}

void remove_pod_taps(const std::string& tag) {
  for (const char* side : {"s", "d"}) (void)sh("ip netns del chlmb" + tag + side);
}

std::optional<Figures> run_once(const std::string& vmm, const std::string& kernel,
                                const fs::path& dir, std::uint64_t mib, const Mode& mode,
                                const std::string& tag) {
  auto start = [&](const char* side, const fs::path& sock) {
    if (!mode.nic) return Vmm::start(vmm, sock);
    // `ip netns exec NS VMM ...`: the VMM in the pod's namespace.
    const fs::path wrapper = dir / (std::string("in-") + side + ".sh");
    if (std::FILE* f = std::fopen(wrapper.c_str(), "w")) {
      std::fprintf(f, "#!/bin/sh\nexec ip netns exec chlmb%s%s '%s' \"$@\"\n", tag.c_str(), side,
                   vmm.c_str());
      std::fclose(f);
    }
    fs::permissions(wrapper, fs::perms::owner_all);
    return Vmm::start(wrapper.string(), sock);
  };
  auto src = start("s", dir / "src.sock");
  auto dst = start("d", dir / "dst.sock");
  if (!src || !dst) return std::nullopt;
  chl::vmm_api::VmConfig c;
  c.payload.kernel = kernel;
  c.payload.cmdline = "console=ttyS0";
  c.cpus = chl::vmm_api::CpusConfig{};
  c.cpus->boot_vcpus = 1;
  c.cpus->max_vcpus = 1;
  c.memory = chl::vmm_api::MemoryConfig{};
  c.memory->size = mib << 20;
  if (mode.nic) {
    chl::vmm_api::NetConfig n;
    n.id = "net-default";
    n.tap = "tap0";
    n.mac = "02:00:00:aa:bb:cc";
    n.num_queues = 2;
    c.net = std::vector<chl::vmm_api::NetConfig>{n};
  }
  if (!src->api->vm_create(c) || !src->api->vm_boot()) return std::nullopt;
  const fs::path mig = dir / "mig.sock";
  fs::remove(mig);
  Watch w;
  std::thread watcher([&] { w.run(src->events.get(), dst->events.get()); });
  chl::common::Status received;
  std::thread rx([&] {
    chl::vmm_api::ReceiveMigrationData d;
    d.receiver_url = "unix:" + mig.string();
    received = dst->api->vm_receive_migration(d);
  });
  while (!fs::exists(mig)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::unique_ptr<chl::kubevirt::MigrationRelay> relay;
  chl::vmm_api::SendMigrationData d;
  d.destination_url = "unix:" + mig.string();
  if (mode.relay) {
    chl::kubevirt::MigrationRelay::Options o;
    o.bandwidth = mode.bandwidth;
    auto r = chl::kubevirt::MigrationRelay::start(dir / "relay.sock", mig, o);
    if (!r) return std::nullopt;
    relay = std::move(*r);
    d.destination_url = "unix:" + relay->path().string();
  }
  const auto t0 = Clock::now();
  const auto sent = src->api->vm_send_migration(d);
  const auto t1 = Clock::now();
  rx.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  w.stop = true;
  watcher.join();
  relay.reset();
  if (!sent || !received || !w.paused || !w.resumed) {
    std::fprintf(stderr, "migration_bench: run failed: %s %s\n",
                 sent ? "" : sent.error().message().c_str(),
                 received ? "" : received.error().message().c_str());
    return std::nullopt;
  }
  (void)dst->proc.kill_and_reap();
  (void)src->proc.wait_for(std::chrono::seconds(5));
  return Figures{std::chrono::duration<double, std::milli>(t1 - t0).count(),
                 std::chrono::duration<double, std::milli>(*w.resumed - *w.paused).count()};
}

std::optional<Figures> median_of(int n, const std::function<std::optional<Figures>()>& once) {
  std::vector<double> total, down;
  for (int r = 0; r < n; ++r) {
    auto f = once();
    if (!f) return std::nullopt;
    total.push_back(f->total);
    down.push_back(f->down);
  }
  return Figures{median(total), median(down)};
}

}  // namespace

int main(int argc, char** argv) {
  std::string vmm = CHL_VMM_DOUBLE_PATH, kernel;
  int n = 5;
  if (const char* e = std::getenv("CLOUD_HYPERVISOR_BIN"); e && *e) vmm = e;
  if (const char* k = std::getenv("CHL_TEST_GUEST_KERNEL"); k && *k) kernel = k;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--vmm")
      vmm = argv[i + 1];
    else if (a == "--kernel")
      kernel = argv[i + 1];
    else if (a == "--n")
      n = std::max(1, std::atoi(argv[i + 1]));
  }
  const bool is_double = vmm == CHL_VMM_DOUBLE_PATH;
  char tmpl[] = "/tmp/chl-migbench-XXXXXX";
  if (!::mkdtemp(tmpl)) return 1;
  const fs::path dir = tmpl;
  if (kernel.empty()) {
    if (!is_double) {
      std::fprintf(stderr, "migration_bench: a real VMM needs --kernel (CHL_TEST_GUEST_KERNEL)\n");
      return 2;
    }
    kernel = (dir / "kernel").string();
    std::FILE* f = std::fopen(kernel.c_str(), "w");
    if (f) std::fclose(f);
  }
  const char* who = is_double ? " (VMM double: protocol only)" : "";
  std::optional<Figures> direct64;
  for (const std::uint64_t mib : {64ULL, 1024ULL}) {
    auto f = median_of(n, [&] { return run_once(vmm, kernel, dir, mib, Mode{}, ""); });
    if (!f) return 1;
    if (mib == 64) direct64 = f;
    std::printf("%llu MiB guest: total %.1f ms, downtime %.1f ms (median of %d)\n",
                static_cast<unsigned long long>(mib), f->total, f->down, n);
    std::printf(
        "RESULT\tmigration_total_%llu\tCH live migration, %llu MiB guest: "
        "total%s\t%.1f\t\t\tms\tinfo\t\n",
        static_cast<unsigned long long>(mib), static_cast<unsigned long long>(mib), who, f->total);
    std::printf(
        "RESULT\tmigration_downtime_%llu\tCH live migration, %llu MiB guest: "
        "downtime%s\t%.1f\t\t\tms\tinfo\t\n",
        static_cast<unsigned long long>(mib), static_cast<unsigned long long>(mib), who, f->down);
  }
  // The launcher's relay in between (what virt-launcher mode adds over CH's own send/receive).
  Mode relayed;
  relayed.relay = true;
  auto r = median_of(n, [&] { return run_once(vmm, kernel, dir, 64, relayed, ""); });
  if (!r) return 1;
  std::printf("64 MiB guest through the launcher's relay: total %.1f ms, downtime %.1f ms\n",
              r->total, r->down);
  std::printf(
      "RESULT\tmigration_relay_total_64\tCH live migration through the launcher's relay, 64 MiB "
      "guest: total%s\t%.1f\tVMM to VMM\t%.1f\tms\tinfo\t\n",
      who, r->total, direct64->total);
  // Bandwidth honoured: 64 MiB at a 32 MiB/s cap takes >= 2 s.
  Mode capped = relayed;
  capped.bandwidth = 32ull << 20;
  auto cf = run_once(vmm, kernel, dir, 64, capped, "");
  if (!cf) return 1;
  const double rate = 64.0 / (cf->total / 1000.0);
  std::printf("64 MiB guest, relay capped at 32 MiB/s: total %.1f ms = %.1f MiB/s\n", cf->total,
              rate);
  std::printf(
      "RESULT\tmigration_bandwidth_cap\tCH live migration, 64 MiB guest, Bandwidth 32Mi: effective "
      "rate%s\t%.1f\tuncapped relay\t%.1f\tMiB/s\tabs_le\t32\n",
      who, rate, 64.0 / (r->total / 1000.0));
  // A tap NIC in each VMM's own namespace (CH opens it by name on both sides).
  const std::string tag = std::to_string(::getpid() % 100000);
  if (auto why = make_pod_taps(tag); !why.empty()) {
    std::printf("SKIPPED: migration with a NIC: %s\n", why.c_str());
  } else {
    Mode nic = relayed;
    nic.nic = true;
    auto f = median_of(n, [&] { return run_once(vmm, kernel, dir, 64, nic, tag); });
    remove_pod_taps(tag);
    if (!f) return 1;
    std::printf("64 MiB guest with a tap NIC, through the relay: total %.1f ms, downtime %.1f ms\n",
                f->total, f->down);
    std::printf(
        "RESULT\tmigration_nic_total_64\tCH live migration with a tap NIC, 64 MiB guest: "
        "total%s\t%.1f\twithout NIC\t%.1f\tms\tinfo\t\n",
        who, f->total, r->total);
    std::printf(
        "RESULT\tmigration_nic_downtime_64\tCH live migration with a tap NIC, 64 MiB guest: "
        "downtime%s\t%.1f\twithout NIC\t%.1f\tms\tinfo\t\n",
        who, f->down, r->down);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return 0;
}

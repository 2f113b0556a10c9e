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
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.hpp"
#include "common/unique_fd.hpp"
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
  for (const std::uint64_t mib : {64ULL, 1024ULL}) {
    std::vector<double> total, down;
    for (int r = 0; r < n; ++r) {
      auto src = Vmm::start(vmm, dir / "src.sock");
      auto dst = Vmm::start(vmm, dir / "dst.sock");
      if (!src || !dst) return 1;
      chl::vmm_api::VmConfig c;
      c.payload.kernel = kernel;
      c.payload.cmdline = "console=ttyS0";
      c.cpus = chl::vmm_api::CpusConfig{};
      c.cpus->boot_vcpus = 1;
      c.cpus->max_vcpus = 1;
      c.memory = chl::vmm_api::MemoryConfig{};
      c.memory->size = mib << 20;
      if (!src->api->vm_create(c) || !src->api->vm_boot()) return 1;
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
      chl::vmm_api::SendMigrationData d;
      d.destination_url = "unix:" + mig.string();
      const auto t0 = Clock::now();
      const auto sent = src->api->vm_send_migration(d);
      const auto t1 = Clock::now();
      rx.join();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      w.stop = true;
      watcher.join();
      if (!sent || !received || !w.paused || !w.resumed) {
        std::fprintf(stderr, "migration_bench: run failed: %s %s\n",
                     sent ? "" : sent.error().message().c_str(),
                     received ? "" : received.error().message().c_str());
        return 1;
      }
      total.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      down.push_back(std::chrono::duration<double, std::milli>(*w.resumed - *w.paused).count());
      (void)dst->proc.kill_and_reap();
      (void)src->proc.wait_for(std::chrono::seconds(5));
    }
    const char* who = is_double ? " (VMM double: protocol only)" : "";
    std::printf("%llu MiB guest: total %.1f ms, downtime %.1f ms (median of %d)\n",
                static_cast<unsigned long long>(mib), median(total), median(down), n);
    std::printf(
        "RESULT\tmigration_total_%llu\tCH live migration, %llu MiB guest: "
        "total%s\t%.1f\t\t\tms\tinfo\t\n",
        static_cast<unsigned long long>(mib), static_cast<unsigned long long>(mib), who,
        median(total));
    std::printf(
        "RESULT\tmigration_downtime_%llu\tCH live migration, %llu MiB guest: "
        "downtime%s\t%.1f\t\t\tms\tinfo\t\n",
        static_cast<unsigned long long>(mib), static_cast<unsigned long long>(mib), who,
        median(down));
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return 0;
}

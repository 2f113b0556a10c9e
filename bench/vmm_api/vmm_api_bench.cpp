// vmm_api_bench: latency of vmm_api::Client round trips against a VMM (the double by default,
// $CLOUD_HYPERVISOR_BIN or --vmm PATH otherwise). Each call opens a connection, sends one
// request, reads one answer and closes, as the client always does.
//
//   vmm_api_bench [--vmm PATH] [--n N] [--kernel PATH]
//
// Prints one line per measured call: name, count, median, p99, max (microseconds).
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/child_process.hpp"
#include "common/unique_fd.hpp"
#include "vmm_api/client.hpp"

namespace {

using chl::common::UniqueFd;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string vmm;
  std::string kernel;
  int n = 2000;
};

bool parse_args(int argc, char** argv, Args& a) {
  if (const char* e = std::getenv("CLOUD_HYPERVISOR_BIN"); e && *e) {
    a.vmm = e;
  }
  if (a.vmm.empty()) {
    a.vmm = CHL_VMM_DOUBLE_PATH;
  }
  if (const char* k = std::getenv("CHL_TEST_GUEST_KERNEL"); k && *k) {
    a.kernel = k;
  }
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (i + 1 >= argc) {
      return false;
    }
    if (s == "--vmm") {
      a.vmm = argv[++i];
    } else if (s == "--n") {
      a.n = std::atoi(argv[++i]);
      if (a.n <= 0) {
        return false;
      }
    } else if (s == "--kernel") {
      a.kernel = argv[++i];
    } else {
      return false;
    }
  }
  return true;
}

// Run `call` n times; print the distribution. False if any call failed.
bool measure(const char* name, int n, const std::function<bool()>& call) {
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    if (!call()) {
      std::fprintf(stderr, "%s: call %d failed\n", name, i);
      return false;
    }
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  auto pct = [&](double p) {
    return us[std::min(us.size() - 1,
                       static_cast<std::size_t>(p * static_cast<double>(us.size())))];
  };
  std::printf("%-22s n=%-6d median=%8.1f us  p99=%8.1f us  max=%8.1f us\n", name, n, pct(0.5),
              pct(0.99), us.back());
  if (std::string_view(name) == "vm.info (Running)" || std::string_view(name) == "vmm.ping")
    std::printf("RESULT\tapi_%s\tVMM API %s round trip (median)\t%.1f\t\t\tus\tinfo\t\n",
                std::string_view(name) == "vmm.ping" ? "ping" : "info", name, pct(0.5));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse_args(argc, argv, args)) {
    std::fprintf(stderr, "usage: vmm_api_bench [--vmm PATH] [--n N] [--kernel PATH]\n");
    return 2;
  }
  char tmpl[] = "/tmp/chl-apibench-XXXXXX";
  if (!::mkdtemp(tmpl)) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::filesystem::path dir = tmpl;
  const std::string api_path = (dir / "api.sock").string();
  const bool is_double = args.vmm == CHL_VMM_DOUBLE_PATH;
  if (args.kernel.empty() && is_double) {
    args.kernel = (dir / "guest.elf").string();
    UniqueFd k(::open(args.kernel.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  }

  // Bind the API socket ourselves and pass it as fd=3, as the launcher does.
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, api_path.c_str(), sizeof(addr.sun_path) - 1);
  if (!listener || ::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listener.get(), 16) != 0) {
    std::perror("bind/listen");
    return 1;
  }
  chl::common::SpawnOptions opts;
  opts.argv = {args.vmm, "--api-socket", "fd=3"};
  opts.pass_fds = {{listener.get(), 3}};
  auto child = chl::common::ChildProcess::spawn(opts);
  if (!child) {
    std::fprintf(stderr, "starting %s: %s\n", args.vmm.c_str(), child.error().message().c_str());
    return 1;
  }
  listener.reset();

  chl::vmm_api::Client api(api_path);
  std::printf("vmm: %s\n", args.vmm.c_str());
  bool ok = measure("vmm.ping", args.n, [&] { return api.vmm_ping().has_value(); });

  chl::vmm_api::VmConfig cfg;
  cfg.payload.kernel = args.kernel.empty() ? std::nullopt : std::optional<std::string>(args.kernel);
  cfg.payload.cmdline = "chl-bench ignore-acpi";
  cfg.cpus = chl::vmm_api::CpusConfig{};
  cfg.memory = chl::vmm_api::MemoryConfig{};
  cfg.memory->size = 64ull << 20;
  const auto t0 = Clock::now();
  if (auto r = api.vm_create(cfg); !r) {
    std::fprintf(stderr, "%s\n", r.error().message().c_str());
    return 1;
  }
  const auto t1 = Clock::now();
  ok = ok && measure("vm.info (Created)", args.n, [&] { return api.vm_info().has_value(); });
  if (!args.kernel.empty()) {
    const auto t2 = Clock::now();
    if (auto r = api.vm_boot(); !r) {
      std::fprintf(stderr, "%s\n", r.error().message().c_str());
      return 1;
    }
    const auto t3 = Clock::now();
    std::printf("%-22s %.1f ms (create %.1f ms + boot %.1f ms)\n", "vm.create + vm.boot",
                std::chrono::duration<double, std::milli>((t1 - t0) + (t3 - t2)).count(),
                std::chrono::duration<double, std::milli>(t1 - t0).count(),
                std::chrono::duration<double, std::milli>(t3 - t2).count());
    ok = ok && measure("vm.info (Running)", args.n, [&] { return api.vm_info().has_value(); });
    ok = ok && measure("vm.counters", args.n, [&] { return api.vm_counters().has_value(); });
    // The client-side share of a vm.info call: parsing the typed VmInfo from the same text.
    if (auto info = api.vm_info()) {
      const std::string text = chl::vmm_api::to_json_text(*info);
      ok = ok && measure("parse VmInfo only", args.n,
                         [&] { return chl::vmm_api::parse_vm_info(text).has_value(); });
    }
    ok = ok && measure("vm.pause + vm.resume", args.n / 10 + 1,
                       [&] { return api.vm_pause().has_value() && api.vm_resume().has_value(); });
  } else {
    std::printf(
        "no guest kernel (--kernel or CHL_TEST_GUEST_KERNEL): boot-dependent calls skipped\n");
  }
  (void)api.vmm_shutdown();
  (void)child->wait_for(std::chrono::seconds(5));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return ok ? 0 : 1;
}

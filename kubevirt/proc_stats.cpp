#include "kubevirt/proc_stats.hpp"

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include "common/proc_stat.hpp"

namespace chl::kubevirt {

namespace fs = std::filesystem;

namespace {

struct CpuTicks {
  std::uint64_t user = 0, system = 0;
};

// utime and stime (fields 14 and 15) of a /proc/<pid>/stat or /proc/<pid>/task/<tid>/stat.
std::optional<CpuTicks> ticks(const common::ProcStat& st) {
  auto user = st.number(14), system = st.number(15);
  if (!user || !system) return std::nullopt;
  return CpuTicks{*user, *system};
}

std::uint64_t ns_per_tick() { return 1000000000ULL / static_cast<std::uint64_t>(::sysconf(_SC_CLK_TCK)); }

// The vCPU a thread runs: Cloud Hypervisor's "vcpu12" -> 12; QEMU's "CPU 12/KVM" or
// "CPU 12/TCG" (libvirt starts QEMU with debug-threads=on) -> 12.
std::optional<std::size_t> vcpu_index(const std::string& comm) {
  // The number at `from`, and what follows it; nullopt without digits.
  auto number = [&comm](std::size_t from) -> std::optional<std::pair<std::size_t, std::string>> {
    std::size_t i = from, n = 0;
    for (; i < comm.size() && comm[i] >= '0' && comm[i] <= '9'; ++i) n = n * 10 + static_cast<std::size_t>(comm[i] - '0');
    if (i == from) return std::nullopt;
    return std::make_pair(n, comm.substr(i));
  };
  if (comm.rfind("vcpu", 0) == 0) {
    if (auto r = number(4); r && r->second.empty()) return r->first;
  } else if (comm.rfind("CPU ", 0) == 0) {
    if (auto r = number(4); r && (r->second == "/KVM" || r->second == "/TCG")) return r->first;
  }
  return std::nullopt;
}

}  // namespace

void add_process_stats(const fs::path& proc_pid, DomainStatsDocument& d) {
  if (auto st = common::ProcStat::read(proc_pid / "stat"); auto t = st ? ticks(*st) : std::nullopt) {
    d.cpu.user_ns = t->user * ns_per_tick();
    d.cpu.system_ns = t->system * ns_per_tick();
    d.cpu.time_ns = (t->user + t->system) * ns_per_tick();
  }
  {
    std::ifstream status(proc_pid / "status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmRSS:", 0) == 0) {
        try {
          d.memory.rss_kib = std::stoull(line.substr(6));
        } catch (const std::exception&) {
        }
      }
  }
  std::error_code ec;
  for (const auto& task : fs::directory_iterator(proc_pid / "task", ec)) {
    // One read of the thread's stat: its name (comm) says which vCPU it runs, its ticks the time.
    const auto st = common::ProcStat::read(task.path() / "stat");
    if (!st) continue;
    const auto index = vcpu_index(st->comm());
    if (!index || *index > 4096) continue;
    if (d.vcpus.size() <= *index) d.vcpus.resize(*index + 1);
    if (auto t = ticks(*st)) d.vcpus[*index].time_ns = (t->user + t->system) * ns_per_tick();
    // schedstat: time on the CPU, time waiting on a run queue (ns), timeslices: libvirt's
    // vcpu.N.delay is the second.
    std::ifstream sched(task.path() / "schedstat");
    std::uint64_t on_cpu = 0, waiting = 0;
    if (sched >> on_cpu >> waiting) d.vcpus[*index].delay_ns = waiting;
  }
}

}  // namespace chl::kubevirt

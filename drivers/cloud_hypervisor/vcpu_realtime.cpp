#include "drivers/cloud_hypervisor/vcpu_realtime.hpp"

#include <sched.h>

#include <cerrno>
#include <map>
#include <string>

#include "common/thread_affinity.hpp"
#include "drivers/cloud_hypervisor/thread_isolation.hpp"

namespace chl::cloud_hypervisor {
using nlohmann::json;

namespace {

common::Result<std::map<std::uint32_t, pid_t>> vcpu_tids(pid_t pid,
                                                         const std::filesystem::path& proc) {
  CHL_TRY(auto threads, common::read_thread_affinities(pid, proc));
  std::map<std::uint32_t, pid_t> out;
  for (const auto& t : threads)
    if (auto i = vcpu_index(t.name)) out.emplace(*i, t.tid);
  return out;
}

const char* policy_name(int policy) {
  switch (policy) {
    case SCHED_OTHER:
      return "other";
    case SCHED_FIFO:
      return "fifo";
    case SCHED_RR:
      return "rr";
    case SCHED_BATCH:
      return "batch";
    case SCHED_IDLE:
      return "idle";
    default:
      return "unknown";
  }
}

}  // namespace

common::Status make_vcpus_realtime(pid_t pid, std::span<const std::uint32_t> vcpus, int priority,
                                   const std::filesystem::path& proc) {
  CHL_TRY(auto tids, common::wrap(vcpu_tids(pid, proc), "realtime: reading the VMM's threads"));
  for (auto v : vcpus) {
    if (!tids.count(v))
      return common::fail(std::errc::no_such_process,
                          "realtime: vCPU " + std::to_string(v) + " has no thread \"vcpu" +
                              std::to_string(v) + "\" in the VMM (pid " + std::to_string(pid) +
                              ")");
  }
  std::vector<pid_t> done;
  for (auto v : vcpus) {
    const pid_t tid = tids.at(v);
    const sched_param sp{.sched_priority = priority};
    if (::sched_setscheduler(tid, SCHED_FIFO, &sp) != 0) {
      const int err = errno;
      // Never half-applied: the threads already changed go back to SCHED_OTHER.
      const sched_param other{.sched_priority = 0};
      for (pid_t d : done) (void)::sched_setscheduler(d, SCHED_OTHER, &other);
      return common::fail(
          std::error_code(err, std::generic_category()),
          "realtime: making vCPU " + std::to_string(v) + " (thread " + std::to_string(tid) +
              ") SCHED_FIFO priority " + std::to_string(priority) +
              (err == EPERM ? " (the launcher needs CAP_SYS_NICE, and the cgroup realtime "
                              "runtime if the kernel has RT group scheduling)"
                            : ""));
    }
    done.push_back(tid);
  }
  return {};
}

json realtime_report(pid_t pid, std::span<const std::uint32_t> vcpus, int priority,
                     const std::filesystem::path& proc) {
  json list = json::array();
  json problems = json::array();
  auto tids = vcpu_tids(pid, proc);
  if (!tids) {
    problems.push_back(tids.error().message());
  } else {
    for (auto v : vcpus) {
      auto it = tids->find(v);
      if (it == tids->end()) {
        problems.push_back("vCPU " + std::to_string(v) + " has no thread");
        continue;
      }
      const int policy = ::sched_getscheduler(it->second);
      sched_param sp{};
      if (policy < 0 || ::sched_getparam(it->second, &sp) != 0) {
        problems.push_back("vCPU " + std::to_string(v) + " (thread " + std::to_string(it->second) +
                           "): " + std::error_code(errno, std::generic_category()).message());
        continue;
      }
      list.push_back({{"vcpu", v},
                      {"tid", it->second},
                      {"policy", policy_name(policy)},
                      {"priority", sp.sched_priority}});
      if (policy != SCHED_FIFO || sp.sched_priority != priority)
        problems.push_back("vCPU " + std::to_string(v) + " (thread " + std::to_string(it->second) +
                           ") is " + policy_name(policy) + " priority " +
                           std::to_string(sp.sched_priority) + ", not fifo priority " +
                           std::to_string(priority));
    }
  }
  return {{"priority", priority},
          {"realtime", problems.empty()},
          {"vcpus", std::move(list)},
          {"problems", std::move(problems)}};
}

}  // namespace chl::cloud_hypervisor

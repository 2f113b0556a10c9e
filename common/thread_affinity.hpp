#pragma once
// Threads of a process and the CPUs each may run on, read from /proc/<pid>/task/<tid>/status
// (`Name:` and `Cpus_allowed_list:`, proc(5)), and sched_setaffinity(2) on one thread. Used to
// keep a VMM's non-vCPU threads (and the launcher's own) on the CPU set KubeVirt's
// isolateEmulatorThread reserves, and to show where every thread may run.
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace chl::common {

// "0-3,8,10-11" -> {0,1,2,3,8,10,11} (sorted, unique); nullopt on a malformed list. An empty
// string is an empty list.
std::optional<std::vector<std::uint32_t>> parse_cpu_list(std::string_view text);
// {0,1,2,3,8} -> "0-3,8".
std::string format_cpu_list(std::span<const std::uint32_t> cpus);

struct ThreadAffinity {
  pid_t tid = 0;
  std::string name;                 // comm (`Name:`), at most 15 bytes
  std::vector<std::uint32_t> cpus;  // `Cpus_allowed_list:`
};

// Every thread of `pid`, in tid order; a thread that ends while it is read is left out.
// `proc` is the procfs root (a synthetic tree in tests).
Result<std::vector<ThreadAffinity>> read_thread_affinities(
    pid_t pid, const std::filesystem::path& proc = "/proc");

// sched_setaffinity(tid, cpus). ESRCH (the thread ended) is an error the caller may ignore.
Status set_thread_affinity(pid_t tid, std::span<const std::uint32_t> cpus);

}  // namespace chl::common

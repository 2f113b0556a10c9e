#pragma once
// /proc/<pid>/stat (or /proc/<pid>/task/<tid>/stat) read once and split into fields, numbered as
// proc(5) numbers them: 1 pid, 2 comm, 3 state, 9 flags, 14 utime, 15 stime, 22 starttime.
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace chl::common {

class ProcStat {
 public:
  // nullopt when the file is gone (the process was reaped) or does not parse.
  static std::optional<ProcStat> read(const std::filesystem::path& file);
  static std::optional<ProcStat> read(pid_t pid);

  [[nodiscard]] const std::string& comm() const { return comm_; }
  [[nodiscard]] char state() const;                                  // field 3: R, S, Z, X…
  [[nodiscard]] std::optional<std::uint64_t> number(int field) const;  // field >= 3

 private:
  std::string comm_;
  std::vector<std::string> rest_;  // fields 3.. in order
};

// Kernel task flag PF_EXITING (include/linux/sched.h): set as do_exit() begins, before the
// process's files are closed. A process whose sockets just broke because it is dying has it set
// even though waitid() does not yet see it exited.
inline constexpr std::uint64_t kPfExiting = 0x4;

// True when the process is dead, a zombie, or on its way out (PF_EXITING); false while it lives.
bool process_exiting(pid_t pid);

}  // namespace chl::common

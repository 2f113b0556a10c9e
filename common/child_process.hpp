#pragma once
// A child process owned by RAII: spawned with a clean environment, only the fds it is given,
// its own session and PR_SET_PDEATHSIG; killed (SIGKILL) and reaped in the destructor unless
// it was already reaped. Exit is observable without SIGCHLD through a pidfd.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace chl::common {

struct ExitStatus {
  bool exited = false;  // true: normal exit with `code`; false: killed by `signal`
  int code = 0;
  int signal = 0;
  [[nodiscard]] bool success() const { return exited && code == 0; }
  [[nodiscard]] std::string describe() const;  // "exit 0", "killed by SIGKILL"
  static ExitStatus from_wait_status(int status);
};

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is the program path (no PATH lookup)
  std::vector<std::string> env;   // the whole environment of the child; empty = empty
  // Parent fd -> fd number in the child. Everything else but stdio is closed.
  std::vector<std::pair<int, int>> pass_fds;
  int stdin_fd = -1;   // -1: /dev/null
  int stdout_fd = -1;  // -1: /dev/null
  int stderr_fd = -1;  // -1: /dev/null
  bool new_session = true;
  bool die_with_parent = true;  // PR_SET_PDEATHSIG(SIGKILL)
  // The CPUs the child (and every thread it starts, which inherit it) may run on, set before
  // exec; empty = the parent's.
  std::vector<std::uint32_t> cpu_affinity;
};

class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ChildProcess(ChildProcess&& o) noexcept;
  ChildProcess& operator=(ChildProcess&& o) noexcept;
  ~ChildProcess();

  // fork + execve. Fails (with the child's exec errno) if the program could not be executed.
  static Result<ChildProcess> spawn(const SpawnOptions& opts);

  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] bool running() const { return pid_ > 0 && !status_; }
  // Readable once the child has exited (pidfd); -1 if none.
  [[nodiscard]] int pidfd() const { return pidfd_.get(); }
  [[nodiscard]] const std::optional<ExitStatus>& exit_status() const { return status_; }

  // Reap if exited; never blocks.
  Result<std::optional<ExitStatus>> try_wait();
  // Block until the child exits (or the timeout passes: nullopt).
  Result<std::optional<ExitStatus>> wait_for(std::chrono::milliseconds timeout);
  Result<ExitStatus> wait();
  // Send a signal; a no-op once reaped (never signals a recycled pid).
  Status signal(int sig);
  // SIGKILL and reap.
  Result<ExitStatus> kill_and_reap();

 private:
  pid_t pid_ = -1;
  UniqueFd pidfd_;
  std::optional<ExitStatus> status_;
};

// Look a program up in PATH (or take it as a path when it contains '/').
std::optional<std::string> find_program(const std::string& name);

}  // namespace chl::common

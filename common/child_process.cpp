#include "common/child_process.hpp"

#include <fcntl.h>
#include <sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "common/syscall.hpp"

namespace chl::common {
namespace {

int sys_pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// Close every fd >= from except those in keep (sorted).
void close_all_but(const std::vector<int>& keep, int from) {
  int next = from;
  for (int k : keep) {
    if (k < next) continue;
    if (k > next) ::syscall(SYS_close_range, next, k - 1, 0);
    next = k + 1;
  }
  ::syscall(SYS_close_range, next, ~0U, 0);
}

// Marks the errno the child reports when sched_setaffinity, not execve, failed.
constexpr int kAffinityFailed = 1 << 24;

[[noreturn]] void child_fail(int report_fd, int err) {
  (void)!::write(report_fd, &err, sizeof err);
  ::_exit(127);
}

}  // namespace

std::string ExitStatus::describe() const {
  if (exited) return "exit " + std::to_string(code);
  const char* name = ::sigabbrev_np(signal);
  return std::string("killed by SIG") + (name ? name : std::to_string(signal).c_str());
}

ExitStatus ExitStatus::from_wait_status(int status) {
  ExitStatus s;
  if (WIFEXITED(status)) {
    s.exited = true;
    s.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    s.signal = WTERMSIG(status);
  }
  return s;
}

ChildProcess::ChildProcess(ChildProcess&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)), pidfd_(std::move(o.pidfd_)), status_(std::move(o.status_)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    if (running()) (void)kill_and_reap();
    pid_ = std::exchange(o.pid_, -1);
    pidfd_ = std::move(o.pidfd_);
    status_ = std::move(o.status_);
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (running()) (void)kill_and_reap();
}

Result<ChildProcess> ChildProcess::spawn(const SpawnOptions& opts) {
  if (opts.argv.empty()) return fail(std::errc::invalid_argument, "spawn: empty argv");

  // Everything the child needs is prepared before fork: after fork only async-signal-safe calls.
  std::vector<char*> argv;
  for (const auto& a : opts.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : opts.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  UniqueFd devnull(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!devnull) return fail_errno("spawn: opening /dev/null");
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return fail_errno("spawn: pipe");
  UniqueFd report_r(report[0]), report_w(report[1]);

  // Sources in fixed arrays: stdio first, then the passed fds. Targets likewise.
  const std::size_t n = 3 + opts.pass_fds.size();
  std::vector<int> src(n), dst(n);
  src[0] = opts.stdin_fd < 0 ? devnull.get() : opts.stdin_fd;
  src[1] = opts.stdout_fd < 0 ? devnull.get() : opts.stdout_fd;
  src[2] = opts.stderr_fd < 0 ? devnull.get() : opts.stderr_fd;
  for (int i = 0; i < 3; ++i) dst[i] = i;
  for (std::size_t i = 0; i < opts.pass_fds.size(); ++i) {
    src[3 + i] = opts.pass_fds[i].first;
    dst[3 + i] = opts.pass_fds[i].second;
  }
  // Park every source above every fd involved so that no dup2 can clobber a source.
  int hi = std::max(report[1], devnull.get());
  for (std::size_t i = 0; i < n; ++i) hi = std::max({hi, src[i], dst[i]});
  const int park = hi + 1;
  const int report_fd = park + static_cast<int>(n);
  std::vector<int> keep(dst);  // fds that stay open across exec (the report fd is CLOEXEC)
  keep.push_back(report_fd);
  std::sort(keep.begin(), keep.end());
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());

  cpu_set_t affinity;
  CPU_ZERO(&affinity);
  for (std::uint32_t c : opts.cpu_affinity) {
    if (c >= CPU_SETSIZE)
      return fail(std::errc::invalid_argument, "spawn: CPU " + std::to_string(c) + " is beyond CPU_SETSIZE");
    CPU_SET(c, &affinity);
  }
  const bool set_affinity = !opts.cpu_affinity.empty();

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return fail_errno("spawn: fork");
  if (pid == 0) {
    // Child: only async-signal-safe calls from here on, no allocation.
    if (::dup3(report[1], report_fd, O_CLOEXEC) < 0) ::_exit(127);
    if (opts.die_with_parent) {
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(report_fd, errno);
      if (::getppid() != parent) ::_exit(127);
    }
    if (opts.new_session && ::setsid() < 0) child_fail(report_fd, errno);
    if (set_affinity && ::sched_setaffinity(0, sizeof affinity, &affinity) != 0)
      child_fail(report_fd, errno | kAffinityFailed);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
    for (std::size_t i = 0; i < n; ++i)
      if (::dup2(src[i], park + static_cast<int>(i)) < 0) child_fail(report_fd, errno);
    for (std::size_t i = 0; i < n; ++i)
      if (::dup2(park + static_cast<int>(i), dst[i]) < 0) child_fail(report_fd, errno);
    close_all_but(keep, 3);
    ::execve(argv[0], argv.data(), envp.data());
    child_fail(report_fd, errno);
  }

  report_w.reset();
  int child_errno = 0;
  ssize_t got = retry_eintr([&] { return ::read(report_r.get(), &child_errno, sizeof child_errno); });
  ChildProcess child;
  child.pid_ = pid;
  if (got > 0) {
    int st = 0;
    retry_eintr([&] { return ::waitpid(pid, &st, 0); });
    child.pid_ = -1;
    if (child_errno & kAffinityFailed) {
      std::string cpus;
      for (std::uint32_t c : opts.cpu_affinity) cpus += (cpus.empty() ? "" : ",") + std::to_string(c);
      return fail_errno(child_errno & ~kAffinityFailed,
                        "spawn: " + opts.argv[0] + ": setting its CPU affinity to " + cpus);
    }
    return fail_errno(child_errno, "spawn: executing " + opts.argv[0]);
  }
  child.pidfd_.reset(sys_pidfd_open(pid));
  if (!child.pidfd_) return fail_errno("spawn: pidfd_open");
  return child;
}

Result<std::optional<ExitStatus>> ChildProcess::try_wait() {
  if (status_) return status_;
  if (pid_ <= 0) return fail(std::errc::no_child_process, "no child");
  int st = 0;
  pid_t r = retry_eintr([&] { return ::waitpid(pid_, &st, WNOHANG); });
  if (r < 0) return fail_errno("waitpid " + std::to_string(pid_));
  if (r == 0) return std::optional<ExitStatus>{};
  status_ = ExitStatus::from_wait_status(st);
  pidfd_.reset();
  return status_;
}

Result<std::optional<ExitStatus>> ChildProcess::wait_for(std::chrono::milliseconds timeout) {
  if (status_) return status_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    CHL_TRY(auto st, try_wait());
    if (st) return st;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::optional<ExitStatus>{};
    pollfd p{pidfd_.get(), POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (r < 0 && errno != EINTR) return fail_errno("poll pidfd");
  }
}

Result<ExitStatus> ChildProcess::wait() {
  for (;;) {
    CHL_TRY(auto st, wait_for(std::chrono::hours(24)));
    if (st) return *st;
  }
}

Status ChildProcess::signal(int sig) {
  if (!running()) return {};
  // pidfd_send_signal never hits a recycled pid.
  if (::syscall(SYS_pidfd_send_signal, pidfd_.get(), sig, nullptr, 0) != 0 && errno != ESRCH)
    return fail_errno("signalling pid " + std::to_string(pid_));
  return {};
}

Result<ExitStatus> ChildProcess::kill_and_reap() {
  if (status_) return *status_;
  CHL_TRY_VOID(signal(SIGKILL));
  return wait();
}

std::optional<std::string> find_program(const std::string& name) {
  namespace fs = std::filesystem;
  auto executable = [](const fs::path& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (executable(name)) return name;
    return std::nullopt;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    std::size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    fs::path cand = fs::path(dirs.substr(start, end - start)) / name;
    if (executable(cand)) return cand.string();
    start = end + 1;
  }
  return std::nullopt;
}

}  // namespace chl::common

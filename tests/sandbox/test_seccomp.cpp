// The launcher's seccomp filter, loaded in a forked child so the test process stays free: what
// the launcher needs still works, what it never needs is refused (EPERM) or kills it (SIGSYS).
#include <doctest/doctest.h>

#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <thread>

#include "sandbox/seccomp_filter.hpp"
#include "sandbox/seccomp_policy.hpp"

using chl::sandbox::SeccompMode;

namespace {

// Run `body` in a child under the launcher's filter. The child's exit code is body's result;
// a signal ends it as 128 + signal.
int confined(SeccompMode mode, const std::function<int()>& body) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    auto f = chl::sandbox::build_launcher_filter(mode);
    if (!f) ::_exit(100);
    if (!f->load()) ::_exit(101);
    ::_exit(body());
  }
  int st = 0;
  REQUIRE(::waitpid(pid, &st, 0) == pid);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return WEXITSTATUS(st);
}

}  // namespace

TEST_CASE("seccomp: the policy table names real syscalls once each and says why") {
  std::set<std::string_view> seen;
  for (const auto& r : chl::sandbox::launcher_allow_list()) {
    CAPTURE(r.name);
    CHECK(seen.insert(r.name).second);
    CHECK_FALSE(r.why.empty());
  }
  for (std::string_view k : chl::sandbox::kill_list()) {
    CAPTURE(k);
    CHECK(seen.count(k) == 0);  // never both allowed and killed
  }
  auto f = chl::sandbox::build_launcher_filter(SeccompMode::Enforce);
  REQUIRE_MESSAGE(f.has_value(), (f ? "" : f.error().message()));
  CHECK(f->rules() > seen.size());  // one rule per ioctl request, plus the kill list
  CHECK_FALSE(chl::sandbox::build_launcher_filter(SeccompMode::Off).has_value());
  CHECK(chl::sandbox::parse_seccomp_mode("enforce").value() == SeccompMode::Enforce);
  CHECK(chl::sandbox::parse_seccomp_mode("off").value() == SeccompMode::Off);
  auto bad = chl::sandbox::parse_seccomp_mode("strict");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message().find("'strict'") != std::string::npos);
}

TEST_CASE("seccomp: what the launcher needs still works under the filter") {
  int rc = confined(SeccompMode::Enforce, [] {
    // A Unix socket pair of our own, a write and a read.
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return 1;
    if (::write(fds[0], "x", 1) != 1) return 2;
    char c = 0;
    if (::read(fds[1], &c, 1) != 1 || c != 'x') return 3;
    int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return 4;
    ::close(s);
    // A thread (clone3 answers ENOSYS, glibc falls back to clone with CLONE_THREAD).
    std::atomic<int> v{0};
    std::thread t([&] { v = 42; });
    t.join();
    if (v != 42) return 5;
    // Memory.
    std::string big(8 << 20, 'a');
    if (big.back() != 'a') return 6;
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("seccomp: what the launcher never needs is refused, or kills it") {
  // A network socket: EPERM (the launcher only speaks Unix sockets).
  CHECK(confined(SeccompMode::Enforce, [] {
          int s = ::socket(AF_INET, SOCK_STREAM, 0);
          return (s < 0 && errno == EPERM) ? 0 : 1;
        }) == 0);
  // A syscall outside the list: EPERM.
  CHECK(confined(SeccompMode::Enforce, [] {
          errno = 0;
          long r = ::syscall(SYS_getppid);
          return (r == -1 && errno == EPERM) ? 0 : 1;
        }) == 0);
  // A new process: clone without CLONE_THREAD is refused.
  CHECK(confined(SeccompMode::Enforce, [] {
          pid_t p = ::fork();
          if (p == 0) ::_exit(0);
          return (p < 0 && errno == EPERM) ? 0 : 1;
        }) == 0);
  // Starting a program kills the launcher outright (SIGSYS).
  CHECK(confined(SeccompMode::Enforce, [] {
          char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
          ::execv("/bin/true", argv);
          return 7;  // not reached
        }) == 128 + SIGSYS);
  // In log mode the same calls go through (the kernel logs them).
  CHECK(confined(SeccompMode::Log, [] {
          int s = ::socket(AF_INET, SOCK_STREAM, 0);
          if (s < 0) return 1;
          ::close(s);
          return 0;
        }) == 0);
}

// The launcher's seccomp filter, loaded in a forked child so the test process stays free: what
// the launcher needs still works, what it never needs is refused (EPERM) or kills it (SIGSYS).
#include <doctest/doctest.h>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <set>
#include <string>
#include <thread>

#include "sandbox/seccomp_filter.hpp"
#include "sandbox/seccomp_policy.hpp"

#include <seccomp.h>
#include <sys/ioctl.h>

using chl::sandbox::DriverKind;
using chl::sandbox::SeccompMode;

namespace {

// Run `body` in a child under the launcher's filter. The child's exit code is body's result;
// a signal ends it as 128 + signal.
int confined(SeccompMode mode, DriverKind kind, const std::function<int()>& body) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    auto f = chl::sandbox::build_launcher_filter(mode, kind);
    if (!f) ::_exit(100);
    if (!f->load()) ::_exit(101);
    ::_exit(body());
  }
  int st = 0;
  REQUIRE(::waitpid(pid, &st, 0) == pid);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return WEXITSTATUS(st);
}

constexpr DriverKind kKinds[] = {DriverKind::CloudHypervisor, DriverKind::Libvirt};

// A classic-BPF interpreter, enough for what libseccomp emits: runs an exported filter on one
// syscall (x86_64) and returns the seccomp action (SECCOMP_RET_*, with its data).
std::uint32_t run_bpf(const std::vector<std::uint64_t>& prog, int nr, std::initializer_list<std::uint64_t> args = {}) {
  seccomp_data d{};
  d.nr = nr;
  d.arch = AUDIT_ARCH_X86_64;
  std::size_t i = 0;
  for (auto a : args) d.args[i++] = a;
  unsigned char data[sizeof d];
  std::memcpy(data, &d, sizeof d);
  std::uint32_t A = 0, X = 0, M[BPF_MEMWORDS] = {};
  for (std::size_t pc = 0; pc < prog.size(); ++pc) {
    sock_filter f;
    std::memcpy(&f, &prog[pc], sizeof f);
    const std::uint32_t k = f.k;
    switch (BPF_CLASS(f.code)) {
      case BPF_LD:
        if (BPF_MODE(f.code) == BPF_ABS) {
          REQUIRE(k + 4 <= sizeof data);
          std::memcpy(&A, data + k, 4);
        } else if (BPF_MODE(f.code) == BPF_IMM) {
          A = k;
        } else if (BPF_MODE(f.code) == BPF_MEM) {
          A = M[k];
        } else {
          FAIL("unexpected BPF load mode " << f.code);
        }
        break;
      case BPF_LDX: X = BPF_MODE(f.code) == BPF_MEM ? M[k] : k; break;
      case BPF_ST: M[k] = A; break;
      case BPF_STX: M[k] = X; break;
      case BPF_ALU: {
        const std::uint32_t v = BPF_SRC(f.code) == BPF_X ? X : k;
        switch (BPF_OP(f.code)) {
          case BPF_AND: A &= v; break;
          case BPF_OR: A |= v; break;
          case BPF_ADD: A += v; break;
          case BPF_SUB: A -= v; break;
          case BPF_RSH: A >>= v; break;
          case BPF_LSH: A <<= v; break;
          default: FAIL("unexpected BPF ALU op " << f.code);
        }
        break;
      }
      case BPF_JMP: {
        const std::uint32_t v = BPF_SRC(f.code) == BPF_X ? X : k;
        bool take = false;
        switch (BPF_OP(f.code)) {
          case BPF_JA: pc += k; continue;
          case BPF_JEQ: take = A == v; break;
          case BPF_JGT: take = A > v; break;
          case BPF_JGE: take = A >= v; break;
          case BPF_JSET: take = (A & v) != 0; break;
          default: FAIL("unexpected BPF jump " << f.code);
        }
        pc += take ? f.jt : f.jf;
        break;
      }
      case BPF_RET: return BPF_RVAL(f.code) == BPF_A ? A : k;
      case BPF_MISC: if (BPF_MISCOP(f.code) == BPF_TAX) X = A; else A = X; break;
      default: FAIL("unexpected BPF class " << f.code);
    }
  }
  FAIL("the filter fell off its end");
  return 0;
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
  auto f = chl::sandbox::build_launcher_filter(SeccompMode::Enforce, DriverKind::CloudHypervisor);
  REQUIRE_MESSAGE(f.has_value(), (f ? "" : f.error().message()));
  CHECK(f->rules() > seen.size());  // one rule per ioctl request, plus the kill list
  CHECK(chl::sandbox::allow_list_for(DriverKind::CloudHypervisor).size() == seen.size());
  CHECK_FALSE(chl::sandbox::build_launcher_filter(SeccompMode::Off, DriverKind::CloudHypervisor).has_value());
  CHECK_FALSE(chl::sandbox::build_launcher_filter(SeccompMode::Off, DriverKind::Libvirt).has_value());
  CHECK(chl::sandbox::parse_seccomp_mode("enforce").value() == SeccompMode::Enforce);
  CHECK(chl::sandbox::parse_seccomp_mode("off").value() == SeccompMode::Off);
  auto bad = chl::sandbox::parse_seccomp_mode("strict");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message().find("'strict'") != std::string::npos);
}

TEST_CASE("seccomp: the libvirt additions are apart from the common list, each with a reason") {
  std::set<std::string_view> common;
  for (const auto& r : chl::sandbox::launcher_allow_list()) common.insert(r.name);
  std::set<std::string_view> extra;
  for (const auto& r : chl::sandbox::libvirt_additions()) {
    CAPTURE(r.name);
    CHECK(extra.insert(r.name).second);
    CHECK(common.count(r.name) == 0);  // the common list already has it: not an addition
    CHECK_FALSE(r.why.empty());
  }
  for (std::string_view k : chl::sandbox::kill_list()) CHECK(extra.count(k) == 0);
  // The libvirt list is the common one plus the additions; the Cloud Hypervisor list has none.
  auto lv = chl::sandbox::allow_list_for(DriverKind::Libvirt);
  CHECK(lv.size() == common.size() + extra.size());
  for (const auto& r : chl::sandbox::allow_list_for(DriverKind::CloudHypervisor)) CHECK(extra.count(r.name) == 0);
  auto f = chl::sandbox::build_launcher_filter(SeccompMode::Enforce, DriverKind::Libvirt);
  REQUIRE_MESSAGE(f.has_value(), (f ? "" : f.error().message()));
  auto ch = chl::sandbox::build_launcher_filter(SeccompMode::Enforce, DriverKind::CloudHypervisor);
  REQUIRE(ch.has_value());
  CHECK(f->rules() == ch->rules() + extra.size());
  CHECK(chl::sandbox::to_string(DriverKind::Libvirt) == "libvirt");
}

TEST_CASE("seccomp: the exported libvirt filter allows its list and refuses or kills the rest") {
  for (DriverKind kind : kKinds) {
    CAPTURE(chl::sandbox::to_string(kind));
    auto f = chl::sandbox::build_launcher_filter(SeccompMode::Enforce, kind);
    REQUIRE(f.has_value());
    auto prog = f->export_bpf();
    REQUIRE_MESSAGE(prog.has_value(), (prog ? "" : prog.error().message()));
    REQUIRE_FALSE(prog->empty());
    const std::uint32_t allow = SECCOMP_RET_ALLOW, eperm = SECCOMP_RET_ERRNO | EPERM;
    // Every listed syscall is allowed (with arguments its check accepts).
    for (const auto& r : chl::sandbox::allow_list_for(kind)) {
      CAPTURE(r.name);
      const int nr = ::seccomp_syscall_resolve_name(std::string(r.name).c_str());
      REQUIRE(nr >= 0);
      using chl::sandbox::ArgCheck;
      switch (r.check) {
        case ArgCheck::None: CHECK(run_bpf(*prog, nr) == allow); break;
        case ArgCheck::UnixSocketOnly:
          CHECK(run_bpf(*prog, nr, {AF_UNIX, SOCK_STREAM}) == allow);
          CHECK(run_bpf(*prog, nr, {AF_INET, SOCK_STREAM}) == eperm);
          CHECK(run_bpf(*prog, nr, {AF_NETLINK, SOCK_RAW}) == eperm);
          break;
        case ArgCheck::IoctlList:
          CHECK(run_bpf(*prog, nr, {3, FIONBIO}) == allow);
          CHECK(run_bpf(*prog, nr, {3, TIOCSTI}) == eperm);  // faking terminal input: never
          break;
        case ArgCheck::ThreadsOnly:
          CHECK(run_bpf(*prog, nr, {CLONE_VM | CLONE_THREAD | CLONE_SIGHAND}) == allow);
          CHECK(run_bpf(*prog, nr, {SIGCHLD}) == eperm);  // fork
          break;
        case ArgCheck::AnswerEnosys: CHECK(run_bpf(*prog, nr) == (SECCOMP_RET_ERRNO | ENOSYS)); break;
      }
    }
    // Unlisted: EPERM. The kill list: the process dies.
    for (const char* name : {"getppid", "ptrace", "setuid", "open_by_handle_at", "memfd_create"}) {
      CAPTURE(name);
      const int nr = ::seccomp_syscall_resolve_name(name);
      REQUIRE(nr >= 0);
      if (std::string_view(name) == "ptrace") {
        CHECK(run_bpf(*prog, nr) == SECCOMP_RET_KILL_PROCESS);
      } else {
        CHECK(run_bpf(*prog, nr) == eperm);
      }
    }
    for (std::string_view k : chl::sandbox::kill_list())
      CHECK(run_bpf(*prog, ::seccomp_syscall_resolve_name(std::string(k).c_str())) == SECCOMP_RET_KILL_PROCESS);
  }
}

TEST_CASE("seccomp: what the launcher needs still works under the filter") {
  for (DriverKind kind : kKinds) {
  CAPTURE(chl::sandbox::to_string(kind));
  int rc = confined(SeccompMode::Enforce, kind, [] {
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
}

TEST_CASE("seccomp: what the launcher never needs is refused, or kills it, on either driver's policy") {
  for (DriverKind kind : kKinds) {
  CAPTURE(chl::sandbox::to_string(kind));
  // A network socket: EPERM (the launcher only speaks Unix sockets).
  CHECK(confined(SeccompMode::Enforce, kind, [] {
          int s = ::socket(AF_INET, SOCK_STREAM, 0);
          return (s < 0 && errno == EPERM) ? 0 : 1;
        }) == 0);
  // A syscall outside the list: EPERM.
  CHECK(confined(SeccompMode::Enforce, kind, [] {
          errno = 0;
          long r = ::syscall(SYS_getppid);
          return (r == -1 && errno == EPERM) ? 0 : 1;
        }) == 0);
  // A new process: clone without CLONE_THREAD is refused.
  CHECK(confined(SeccompMode::Enforce, kind, [] {
          pid_t p = ::fork();
          if (p == 0) ::_exit(0);
          return (p < 0 && errno == EPERM) ? 0 : 1;
        }) == 0);
  // Starting a program kills the launcher outright (SIGSYS).
  CHECK(confined(SeccompMode::Enforce, kind, [] {
          char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
          ::execv("/bin/true", argv);
          return 7;  // not reached
        }) == 128 + SIGSYS);
  // In log mode the same calls go through (the kernel logs them).
  CHECK(confined(SeccompMode::Log, kind, [] {
          int s = ::socket(AF_INET, SOCK_STREAM, 0);
          if (s < 0) return 1;
          ::close(s);
          return 0;
        }) == 0);
}
}

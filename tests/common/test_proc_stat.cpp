// Tests for common/proc_stat: fields numbered as proc(5), comm with spaces and parentheses, and
// process_exiting() through a child's life (alive, zombie, reaped).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <fstream>

#include "common/proc_stat.hpp"
#include "tests/support/test_support.hpp"

using namespace chl::common;

TEST_CASE("ProcStat numbers the fields as proc(5) does, past a comm holding ') ('") {
  chl::test::TempDir dir;
  const auto file = dir.path() / "stat";
  std::ofstream(file) << "4242 (CPU 0/KVM) (x) S 1 4242 4242 0 -1 4194368 10 0 0 0 1234 567 0 0 20 0 3 0 98765\n";
  auto st = ProcStat::read(file);
  REQUIRE(st);
  CHECK(st->comm() == "CPU 0/KVM) (x");
  CHECK(st->state() == 'S');
  CHECK(st->number(4) == 1);           // ppid
  CHECK(st->number(9) == 4194368u);    // flags
  CHECK(st->number(14) == 1234u);      // utime
  CHECK(st->number(15) == 567u);       // stime
  CHECK(st->number(22) == 98765u);     // starttime
  CHECK_FALSE(st->number(23));         // past the end
  CHECK_FALSE(st->number(8));          // -1 is not an unsigned number
  CHECK_FALSE(st->number(2));          // comm is not a number field

  std::ofstream(dir.path() / "bad") << "4242 no parentheses S 1\n";
  CHECK_FALSE(ProcStat::read(dir.path() / "bad"));
  CHECK_FALSE(ProcStat::read(dir.path() / "absent"));
}

TEST_CASE("process_exiting: false while a child lives, true once it is a zombie and once reaped") {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::pause();
    ::_exit(0);
  }
  CHECK_FALSE(process_exiting(pid));
  auto self = ProcStat::read(::getpid());
  REQUIRE(self);
  CHECK(self->state() == 'R');  // the reader itself is running
  CHECK((self->number(9).value_or(kPfExiting) & kPfExiting) == 0);

  REQUIRE(::kill(pid, SIGKILL) == 0);
  siginfo_t si{};
  REQUIRE(::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOWAIT) == 0);  // a zombie, not reaped
  CHECK(process_exiting(pid));
  CHECK(ProcStat::read(pid)->state() == 'Z');
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(process_exiting(pid));  // gone
  CHECK(process_exiting(0));
}

// Tests for common/: Error wrapping, UniqueFd, ChildProcess (fds, env, reaping), JSON logs.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "common/child_process.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/unique_fd.hpp"
#include "tests/support/test_support.hpp"

using namespace chl::common;

namespace {
Result<int> inner() { return fail(std::errc::no_such_file_or_directory, "qcow2: L2 table offset past end of file"); }
Result<int> outer() { return wrap(inner(), "disk 'root'"); }
}  // namespace

TEST_CASE("errors wrap outer: inner and keep the code") {
  auto r = wrap(outer(), "creating VM");
  REQUIRE_FALSE(r);
  CHECK(r.error().message() == "creating VM: disk 'root': qcow2: L2 table offset past end of file");
  CHECK(r.error().code == std::errc::no_such_file_or_directory);
  auto e = fail_errno(EACCES, "open /x");
  CHECK(e.value().message() == "open /x: Permission denied");
}

TEST_CASE("UniqueFd closes exactly once and moves") {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  {
    UniqueFd a(p[0]);
    UniqueFd b(std::move(a));
    CHECK_FALSE(a.valid());
    CHECK(b.get() == p[0]);
  }
  CHECK(::fcntl(p[0], F_GETFD) == -1);
  ::close(p[1]);
}

TEST_CASE("ChildProcess passes only the given fds, a clean env, and reports exit") {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  UniqueFd r(p[0]), w(p[1]);
  int leak = ::open("/dev/null", O_RDONLY);  // not CLOEXEC: must still be closed in the child
  REQUIRE(leak >= 0);
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "echo \"env=$FOO:$HOME\" >&7; ls /proc/self/fd | sort -n | tr '\\n' ' ' >&7; exit 3"};
  o.env = {"FOO=bar"};
  o.pass_fds = {{w.get(), 7}};
  auto child = ChildProcess::spawn(o);
  REQUIRE(child);
  w.reset();
  ::close(leak);
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = ::read(r.get(), buf, sizeof buf)) > 0) out.append(buf, n);
  auto st = child->wait();
  REQUIRE(st);
  CHECK(st->exited);
  CHECK(st->code == 3);
  CHECK(out.find("env=bar:\n") == 0);
  // fds: 0 1 2, 7, and the one ls opens for /proc/self/fd (3): nothing inherited.
  CHECK(out.substr(out.find('\n') + 1) == "0 1 2 3 7 ");
}

TEST_CASE("ChildProcess destructor kills and reaps, exec failure is an error") {
  pid_t pid;
  {
    SpawnOptions o;
    o.argv = {"/bin/sleep", "30"};
    auto child = ChildProcess::spawn(o);
    REQUIRE(child);
    pid = child->pid();
    CHECK(child->running());
  }
  // Reaped: not even a zombie remains.
  CHECK(::kill(pid, 0) == -1);
  CHECK(errno == ESRCH);

  SpawnOptions bad;
  bad.argv = {"/nonexistent/program"};
  auto r = ChildProcess::spawn(bad);
  REQUIRE_FALSE(r);
  CHECK(r.error().message().find("No such file or directory") != std::string::npos);
}

TEST_CASE("ChildProcess wait_for times out, then observes a signal death") {
  SpawnOptions o;
  o.argv = {"/bin/sleep", "30"};
  auto child = ChildProcess::spawn(o);
  REQUIRE(child);
  auto st = child->wait_for(std::chrono::milliseconds(50));
  REQUIRE(st);
  CHECK_FALSE(st->has_value());
  REQUIRE(child->signal(SIGTERM));
  auto st2 = child->wait();
  REQUIRE(st2);
  CHECK_FALSE(st2->exited);
  CHECK(st2->signal == SIGTERM);
  CHECK(st2->describe() == "killed by SIGTERM");
  CHECK(child->signal(SIGKILL));  // no-op after reaping
}

TEST_CASE("JSON log lines carry component, level, msg, timestamp, pos and the VMI") {
  chl::test::TempDir dir;
  auto path = (dir / "log.json").string();
  log::init("ch-launcher", spdlog::level::debug, path);
  log::set_vmi({"default", "vm1", "1234"});
  CHL_LOG_INFO("hello \"world\"\n{}", 42);
  CHL_LOG_DEBUG("dbg");
  log::logger()->flush();
  std::string text = chl::test::read_file(path);
  auto nl = text.find('\n');
  REQUIRE(nl != std::string::npos);
  auto j = nlohmann::json::parse(text.substr(0, nl));
  CHECK(j["component"] == "ch-launcher");
  CHECK(j["level"] == "info");
  CHECK(j["msg"] == "hello \"world\"\n42");
  CHECK(j["namespace"] == "default");
  CHECK(j["name"] == "vm1");
  CHECK(j["uid"] == "1234");
  CHECK(j["pos"].get<std::string>().rfind("test_common.cpp:", 0) == 0);
  std::string ts = j["timestamp"];
  CHECK(ts.size() == 27);
  CHECK(ts.back() == 'Z');
  auto second = nlohmann::json::parse(text.substr(nl + 1));
  CHECK(second["level"] == "debug");
  log::init("ch-launcher", spdlog::level::info);
}

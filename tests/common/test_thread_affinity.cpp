// common/thread_affinity: CPU lists, each thread's CPUs from /proc, and pinning one thread.
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "common/thread_affinity.hpp"
#include "tests/support/test_support.hpp"

using chl::common::format_cpu_list;
using chl::common::parse_cpu_list;
using chl::common::read_thread_affinities;
using chl::common::set_thread_affinity;

TEST_CASE("CPU lists parse as the kernel writes them and format back") {
  CHECK(parse_cpu_list("0-3,8,10-11\n") == std::vector<std::uint32_t>{0, 1, 2, 3, 8, 10, 11});
  CHECK(parse_cpu_list("") == std::vector<std::uint32_t>{});
  CHECK(parse_cpu_list("5") == std::vector<std::uint32_t>{5});
  CHECK_FALSE(parse_cpu_list("3-1"));
  CHECK_FALSE(parse_cpu_list("1,"));
  CHECK_FALSE(parse_cpu_list("a"));
  CHECK_FALSE(parse_cpu_list("0-4294967295"));  // not a list anyone means: refused, not allocated
  const std::vector<std::uint32_t> cpus{0, 1, 2, 3, 8, 10, 11};
  CHECK(format_cpu_list(cpus) == "0-3,8,10-11");
  CHECK(format_cpu_list(std::vector<std::uint32_t>{}) == "");
}

TEST_CASE("each thread's name and CPUs are read from a /proc tree") {
  chl::test::TempDir proc("chl-proc");
  auto task = [&](const char* tid, const std::string& status) {
    std::filesystem::create_directories(proc.path() / "77/task" / tid);
    chl::test::write_file(proc.path() / "77/task" / tid / "status", status);
  };
  task("77", "Name:\tcloud-hyperviso\nState:\tS (sleeping)\nCpus_allowed:\t4\nCpus_allowed_list:\t2\n");
  task("80", "Name:\tvcpu0\nCpus_allowed_list:\t0\n");
  task("79", "Name:\thttp-server\nCpus_allowed_list:\t0-3\n");
  std::filesystem::create_directories(proc.path() / "77/task/81");  // ended while read: no status
  auto t = read_thread_affinities(77, proc.path());
  REQUIRE_MESSAGE(t, t.error().message());
  REQUIRE(t->size() == 3);
  CHECK((*t)[0].tid == 77);
  CHECK((*t)[0].name == "cloud-hyperviso");
  CHECK((*t)[0].cpus == std::vector<std::uint32_t>{2});
  CHECK((*t)[1].name == "http-server");
  CHECK((*t)[1].cpus == std::vector<std::uint32_t>{0, 1, 2, 3});
  CHECK((*t)[2].name == "vcpu0");
  task("82", "Name:\tbroken\nCpus_allowed_list:\tzz\n");
  auto bad = read_thread_affinities(77, proc.path());
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message().find("Cpus_allowed_list is not a CPU list") != std::string::npos);
  auto none = read_thread_affinities(78, proc.path());
  REQUIRE_FALSE(none);
  CHECK(none.error().message().find("listing the threads of process 78") != std::string::npos);
}

TEST_CASE("a thread of this process is pinned and read back from the real /proc") {
  cpu_set_t mine;
  REQUIRE(::sched_getaffinity(0, sizeof mine, &mine) == 0);
  std::uint32_t first = 0;
  while (first < CPU_SETSIZE && !CPU_ISSET(first, &mine)) ++first;
  REQUIRE(first < CPU_SETSIZE);
  std::atomic<pid_t> tid{0};
  std::atomic<bool> done{false};
  std::thread worker([&] {
    ::pthread_setname_np(::pthread_self(), "chl-pin-me");
    tid = static_cast<pid_t>(::syscall(SYS_gettid));
    while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  REQUIRE(chl::test::wait_until(std::chrono::seconds(5), [&] { return tid.load() != 0; }));
  const std::vector<std::uint32_t> one{first};
  auto st = set_thread_affinity(tid, one);
  CHECK_MESSAGE(st, (st ? "" : st.error().message()));
  bool seen = false;
  REQUIRE(chl::test::wait_until(std::chrono::seconds(5), [&] {
    auto t = read_thread_affinities(::getpid());
    if (!t) return false;
    for (const auto& x : *t)
      if (x.tid == tid && x.name == "chl-pin-me") seen = x.cpus == one;
    return seen;
  }));
  CHECK(seen);
  auto bad = set_thread_affinity(tid, std::vector<std::uint32_t>{});
  CHECK_FALSE(bad);
  done = true;
  worker.join();
}

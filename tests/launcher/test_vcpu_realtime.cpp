// drivers/cloud_hypervisor/vcpu_realtime: realtime's SCHED_FIFO on the VMM's "vcpu<N>" threads,
// all or none, and the report `status` shows; on this process's own threads named as CH names its
// vCPU threads (they block, never spin: a SCHED_FIFO spinner would hold its CPU).
#include <doctest/doctest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "drivers/cloud_hypervisor/vcpu_realtime.hpp"
#include "tests/support/test_support.hpp"

using chl::cloud_hypervisor::make_vcpus_realtime;
using chl::cloud_hypervisor::realtime_report;

namespace {

// A blocked thread named `name`; its tid, until destroyed.
class NamedThread {
 public:
  explicit NamedThread(const std::string& name) {
    std::promise<pid_t> tid;
    auto got = tid.get_future();
    thread_ = std::thread([this, name, p = std::move(tid)]() mutable {
      ::pthread_setname_np(::pthread_self(), name.c_str());
      p.set_value(static_cast<pid_t>(::syscall(SYS_gettid)));
      stop_.get_future().wait();
    });
    tid_ = got.get();
  }
  ~NamedThread() {
    stop_.set_value();
    thread_.join();
  }
  NamedThread(const NamedThread&) = delete;
  NamedThread& operator=(const NamedThread&) = delete;
  [[nodiscard]] pid_t tid() const { return tid_; }

 private:
  std::promise<void> stop_;
  std::thread thread_;
  pid_t tid_ = 0;
};

int policy_of(pid_t tid) { return ::sched_getscheduler(tid); }

}  // namespace

TEST_CASE("realtime: every vCPU of the list SCHED_FIFO priority 1, the others left alone") {
  if (::geteuid() != 0) {
    chl::test::skip("SCHED_FIFO needs CAP_SYS_NICE (root here)");
    return;
  }
  NamedThread v0("vcpu0"), v1("vcpu1"), v2("vcpu2"), other("vmm");
  const std::vector<std::uint32_t> mask{0, 2};  // realtime.mask "0-2,^1"
  auto st = make_vcpus_realtime(::getpid(), mask, 1);
  REQUIRE_MESSAGE(st, (st ? "" : st.error().message()));
  CHECK(policy_of(v0.tid()) == SCHED_FIFO);
  CHECK(policy_of(v1.tid()) == SCHED_OTHER);
  CHECK(policy_of(v2.tid()) == SCHED_FIFO);
  CHECK(policy_of(other.tid()) == SCHED_OTHER);
  sched_param sp{};
  REQUIRE(::sched_getparam(v2.tid(), &sp) == 0);
  CHECK(sp.sched_priority == 1);
  auto report = realtime_report(::getpid(), mask, 1);
  CHECK_MESSAGE(report["realtime"] == true, report.dump(2));
  CHECK(report["vcpus"][1]["policy"] == "fifo");
  // A vCPU of the list that is not realtime is a problem the report names.
  auto wider = realtime_report(::getpid(), std::vector<std::uint32_t>{0, 1}, 1);
  CHECK(wider["realtime"] == false);
  CHECK(wider["problems"][0].get<std::string>().find("is other priority 0, not fifo priority 1") !=
        std::string::npos);
}

TEST_CASE("realtime: a vCPU without its thread fails before any thread is changed") {
  NamedThread v0("vcpu0");
  auto st = make_vcpus_realtime(::getpid(), std::vector<std::uint32_t>{0, 5}, 1);
  REQUIRE_FALSE(st);
  CHECK(st.error().message().find("realtime: vCPU 5 has no thread \"vcpu5\"") != std::string::npos);
  CHECK(policy_of(v0.tid()) == SCHED_OTHER);
}

TEST_CASE("realtime: a refused priority fails naming the vCPU, and nothing stays changed") {
  NamedThread v0("vcpu0"), v1("vcpu1");
  // Priority 100 is beyond SCHED_FIFO's 1-99: EINVAL for the first thread.
  auto st = make_vcpus_realtime(::getpid(), std::vector<std::uint32_t>{0, 1}, 100);
  REQUIRE_FALSE(st);
  CHECK(st.error().message().find("making vCPU 0 (thread " + std::to_string(v0.tid()) +
                                  ") SCHED_FIFO priority 100") != std::string::npos);
  CHECK(policy_of(v0.tid()) == SCHED_OTHER);
  CHECK(policy_of(v1.tid()) == SCHED_OTHER);
}

// drivers/cloud_hypervisor/thread_isolation: which Cloud Hypervisor threads are vCPUs, the
// report `status` shows, and putting every other thread on the emulator CPUs.
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "common/thread_affinity.hpp"
#include "drivers/cloud_hypervisor/thread_isolation.hpp"
#include "tests/support/test_support.hpp"

using chl::cloud_hypervisor::isolation_report;
using chl::cloud_hypervisor::pin_non_vcpu_threads;
using chl::cloud_hypervisor::vcpu_index;
using chl::common::ThreadAffinity;

TEST_CASE("Cloud Hypervisor's vCPU threads are vcpu<N>, nothing else is") {
  // CH v52 vmm/src/cpu.rs: thread::Builder::new().name(format!("vcpu{vcpu_id}")).
  CHECK(vcpu_index("vcpu0") == 0u);
  CHECK(vcpu_index("vcpu17") == 17u);
  CHECK_FALSE(vcpu_index("vcpu"));
  CHECK_FALSE(vcpu_index("vcpu1x"));
  CHECK_FALSE(vcpu_index("CPU 0/KVM"));  // QEMU's name, which virt-handler looks for
  CHECK_FALSE(vcpu_index("vmm"));
  CHECK_FALSE(vcpu_index("virtio-blk-0"));
}

TEST_CASE("the isolation report is true only when every thread is where it should be") {
  const std::vector<std::uint32_t> pinning{2, 3};
  const std::vector<std::uint32_t> emulator{4};
  std::vector<ThreadAffinity> t{{100, "cloud-hyperviso", {4}}, {101, "vmm", {4}},
                                {102, "vcpu0", {2}},           {103, "vcpu1", {3}},
                                {104, "http-server", {4}}};
  auto ok = isolation_report(t, pinning, emulator);
  CHECK_MESSAGE(ok["isolated"] == true, ok.dump(2));
  CHECK(ok["emulator_cpus"] == "4");
  CHECK(ok["threads"].size() == 5);
  CHECK(ok["threads"][2]["role"] == "vcpu");
  CHECK(ok["threads"][1]["role"] == "other");
  CHECK(ok["problems"].empty());

  t.push_back({105, "virtio-net-0", {2, 3, 4}});  // a worker that escaped onto the vCPUs' CPUs
  t[3].cpus = {2};                               // vCPU 1 on vCPU 0's CPU
  t.push_back({106, "vcpu2", {4}});              // hot-plugged: no dedicated CPU
  auto bad = isolation_report(t, pinning, emulator);
  CHECK(bad["isolated"] == false);
  const std::string all = bad["problems"].dump();
  CHECK_MESSAGE(all.find("thread 105 (virtio-net-0) runs on CPUs 2-4, not on the emulator CPUs 4") !=
                    std::string::npos,
                all);
  CHECK(all.find("thread 103 (vcpu1) runs on CPUs 2, not on its dedicated CPU 3") != std::string::npos);
  CHECK(all.find("thread 106 (vcpu2) is a vCPU without a dedicated CPU") != std::string::npos);
  CHECK(isolation_report({}, pinning, emulator)["isolated"] == false);  // nothing read: not claimed
}

TEST_CASE("every thread but the vCPUs goes onto the emulator CPUs, the vCPUs stay put") {
  cpu_set_t mine;
  REQUIRE(::sched_getaffinity(0, sizeof mine, &mine) == 0);
  std::vector<std::uint32_t> allowed;
  for (std::uint32_t c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mine)) allowed.push_back(c);
  REQUIRE(!allowed.empty());
  const std::vector<std::uint32_t> emulator{allowed.back()};
  std::atomic<pid_t> vcpu_tid{0}, worker_tid{0};
  std::atomic<bool> done{false};
  auto body = [&](const char* name, std::atomic<pid_t>& tid) {
    return std::thread([&, name] {
      ::pthread_setname_np(::pthread_self(), name);
      tid = static_cast<pid_t>(::syscall(SYS_gettid));
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
  };
  std::thread vcpu = body("vcpu0", vcpu_tid);
  std::thread worker = body("virtio-blk0", worker_tid);
  REQUIRE(chl::test::wait_until(std::chrono::seconds(5), [&] { return vcpu_tid && worker_tid; }));
  auto moved = pin_non_vcpu_threads(::getpid(), emulator);
  REQUIRE_MESSAGE(moved, moved.error().message());
  auto threads = chl::common::read_thread_affinities(::getpid());
  REQUIRE(threads);
  for (const auto& t : *threads) {
    CAPTURE(t.name);
    if (t.tid == vcpu_tid) CHECK(t.cpus == allowed);  // untouched: CH's vCPU pins itself
    else CHECK(t.cpus == emulator);
  }
  // A second pass moves nothing: every non-vCPU thread is already there.
  auto again = pin_non_vcpu_threads(::getpid(), emulator);
  REQUIRE(again);
  CHECK(*again == 0);
  done = true;
  vcpu.join();
  worker.join();
  // Give this process its CPUs back for the tests that follow.
  auto now = chl::common::read_thread_affinities(::getpid());
  REQUIRE(now);
  for (const auto& t : *now) (void)chl::common::set_thread_affinity(t.tid, allowed);
}

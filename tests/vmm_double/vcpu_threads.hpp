#pragma once
// The double's stand-ins for Cloud Hypervisor's vCPU threads: one thread per boot vCPU, named
// "vcpu<N>" as CH names them, which first moves itself onto its host CPUs from cpus.affinity —
// what CH v52 does (vmm/src/cpu.rs start_vcpu: thread::Builder::name(format!("vcpu{vcpu_id}")),
// then sched_setaffinity(0, ...) of the vCPU's set). CH checks nothing about affinity when the
// VM is created (vmm/src/config.rs parses it, validate() has no rule for it): a CPU the VMM may
// not use fails only in the thread, which logs "Failed scheduling the vCPU N on the expected CPU
// set: <os error>" and returns before the vCPU barrier, on which the vmm thread then waits
// forever (cpu.rs start_vcpus: vcpu_thread_barrier.wait()): vm.boot never answers. The double
// does the same (vmm.cpp vm_boot holds the request). The threads run no guest code: they wait
// until the VM stops.
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

namespace chl::vmm_double {

class VcpuThreads {
 public:
  VcpuThreads() = default;
  VcpuThreads(const VcpuThreads&) = delete;
  VcpuThreads& operator=(const VcpuThreads&) = delete;
  ~VcpuThreads() { stop(); }

  // `cpus` is the VM config's "cpus" object (boot_vcpus, affinity). Returns once every thread
  // has tried its affinity: false when one could not take it (and has ended).
  bool start(const nlohmann::json& cpus);
  void stop();
  [[nodiscard]] bool running() const { return !threads_.empty(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::size_t settled_ = 0;  // threads that tried their affinity
  bool failed_ = false;      // one of them could not take it
  std::vector<std::thread> threads_;
};

}  // namespace chl::vmm_double

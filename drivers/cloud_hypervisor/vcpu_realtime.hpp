#pragma once
// KubeVirt's cpu.realtime on Cloud Hypervisor: the vCPU threads of realtime.mask made SCHED_FIFO
// at priority 1, as virt-handler does for QEMU's "CPU N/KVM" threads
// (pkg/hypervisor/kvm/realtime.go configureVCPUScheduler, d923fdb: sched_setscheduler(tid,
// SCHED_FIFO, {1}) on each vCPU the mask enables, once, before the VMI is Running). CH's vCPU
// threads are "vcpu<N>" (vmm/src/cpu.rs start_vcpu), started by vm.boot; the launcher does it
// right after boot, which takes CAP_SYS_NICE (validate refuses realtime without it).
// All or nothing: a thread missing or refused puts back the ones already changed and fails.
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>

#include "common/error.hpp"

namespace chl::cloud_hypervisor {

// SCHED_FIFO at `priority` for vCPU thread "vcpu<i>" of `pid`, for each i of `vcpus`.
common::Status make_vcpus_realtime(pid_t pid, std::span<const std::uint32_t> vcpus, int priority,
                                   const std::filesystem::path& proc = "/proc");

// {"priority", "realtime": every listed vCPU's thread SCHED_FIFO at `priority`,
//  "vcpus": [{vcpu, tid, policy ("fifo", "other", ...), priority}], "problems": [...]}, read now.
nlohmann::json realtime_report(pid_t pid, std::span<const std::uint32_t> vcpus, int priority,
                               const std::filesystem::path& proc = "/proc");

}  // namespace chl::cloud_hypervisor

#pragma once
// KubeVirt's isolateEmulatorThread on Cloud Hypervisor: every VMM thread that is not a vCPU on
// the pod's extra CPU(s), each vCPU on its own dedicated CPU.
//
// How: the VMM is started with the emulator CPUs as its affinity (vmm_process.cpp), so every
// thread it starts inherits them — the vmm, http-server, signal, serial and event-monitor
// threads, and the virtio worker threads spawned later when the guest activates a device or a
// device is hot-plugged (they are spawned from the vmm thread's control loop: vmm/src/lib.rs:820
// EpollDispatch::ActivateVirtioDevices -> device_manager.rs activate_virtio_devices);
// each vCPU thread then moves itself onto its CPU from cpus.affinity (CH v52 vmm/src/cpu.rs
// start_vcpu: sched_setaffinity(0, …) first thing in the thread named "vcpu<N>"). After boot
// and after a hotplug the driver re-reads every thread (/proc/<pid>/task/*/status) and puts a
// non-vCPU thread that is elsewhere back on the emulator CPUs; `status` shows each thread.
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "common/thread_affinity.hpp"

namespace chl::cloud_hypervisor {

// N for a Cloud Hypervisor vCPU thread ("vcpu<N>", vmm/src/cpu.rs); nullopt for any other.
std::optional<std::uint32_t> vcpu_index(std::string_view thread_name);

// Where the threads run against where they should: `pinning[i]` is vCPU i's CPU, `emulator`
// every other thread's set. {"emulator_cpus", "isolated", "threads": [{tid, name, role, cpus}],
// "problems": [...]} — isolated only when every thread is where it should be.
nlohmann::json isolation_report(const std::vector<common::ThreadAffinity>& threads,
                                std::span<const std::uint32_t> pinning,
                                std::span<const std::uint32_t> emulator);

// Put every thread of `pid` that is not a vCPU, and is not already there, on `emulator`; a
// thread that ends meanwhile is skipped. Returns how many were moved.
common::Result<std::size_t> pin_non_vcpu_threads(pid_t pid, std::span<const std::uint32_t> emulator,
                                                 const std::filesystem::path& proc = "/proc");

}  // namespace chl::cloud_hypervisor

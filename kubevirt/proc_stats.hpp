#pragma once
// What virt-launcher takes from libvirt about the VMM process, which libvirt reads from /proc
// for QEMU, read here from /proc: the process's CPU time and RSS, and per vCPU thread (Cloud
// Hypervisor names them vcpu0, vcpu1, …; QEMU "CPU 0/KVM" or "CPU 0/TCG") its CPU time and its
// run-queue delay.
#include <filesystem>

#include "kubevirt/stats_json.hpp"

namespace chl::kubevirt {

// `proc_pid` is /proc/<pid> (a copy of one in tests). Fills d.cpu, d.memory.rss_kib and, for
// every vcpuN thread, d.vcpus[N].time_ns and delay_ns (growing d.vcpus when it is shorter).
// Whatever cannot be read is left unset.
void add_process_stats(const std::filesystem::path& proc_pid, DomainStatsDocument& d);

}  // namespace chl::kubevirt

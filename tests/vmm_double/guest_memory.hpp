#pragma once
// The double's model of Cloud Hypervisor v52's guest memory as configured (memory.zones, numa):
// the checks VmConfig::validate makes at vm.create (vmm/src/config.rs), then what
// MemoryManager::new and Vm::create_numa_nodes do at vm.boot (vmm/src/memory_manager.rs,
// vmm/src/vm.rs), with CH's own errors. No memory is allocated: the host facts CH's syscalls
// would meet (the nodes with memory, the free hugepages) are read from sysfs.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace chl::vmm_double {

// VmConfig::validate's memory and NUMA rules, in its order (config.rs): hugepage_size without
// hugepages, NumaConfig::validate, a zone in two NUMA nodes, zone ids unique among the device
// ids (`ids`, filled by the caller's device checks). Empty = valid.
std::vector<std::string> validate_memory_config(const nlohmann::json& cfg,
                                                std::set<std::string>& ids);

struct GuestMemoryOutcome {
  std::vector<std::string> error;  // CH's chain below "The VM could not boot"; empty = booted
  // CH would die of SIGBUS loading the payload: hugetlb memory (MAP_NORESERVE memfd,
  // create_ram_region_raw) with no free hugepage of its size where it is bound.
  bool sigbus = false;
  std::string why;  // for the double's log
};

// MemoryManager::new (zones against memory.size, each zone's mbind to host_numa_node: EINVAL for
// a node without memory or outside this process's Mems_allowed), then create_numa_nodes.
// `sysfs` is /sys (a synthetic tree in tests).
GuestMemoryOutcome create_guest_memory(const nlohmann::json& cfg,
                                       const std::filesystem::path& sysfs = "/sys");

}  // namespace chl::vmm_double

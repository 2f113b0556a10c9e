#pragma once
// The pod memory a VMI needs beyond its guest RAM on a given hypervisor, itemized the way
// KubeVirt's GetMemoryOverhead is (fixed per-process costs, page tables, per-vCPU state,
// extras), with the figures from the hypervisor's capability description.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "vmi/hypervisor_capabilities.hpp"
#include "vmi/vmi.hpp"

namespace chl::vmi {

struct OverheadItem {
  std::string what;  // "launcher", "page tables", "vCPUs"
  std::int64_t bytes = 0;
  std::string note;  // how it was computed
};

struct MemoryOverhead {
  std::vector<OverheadItem> items;
  std::int64_t total = 0;  // the sum, rounded up to a whole MiB
};

MemoryOverhead memory_overhead(const Vmi& vmi, const HypervisorCapabilities& caps);

// Text table (one item a line, quantities in Kubernetes form) and JSON forms.
std::string format_overhead(const MemoryOverhead& o);
nlohmann::json overhead_json(const MemoryOverhead& o);

}  // namespace chl::vmi

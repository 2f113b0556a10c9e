#include "vmi/overhead.hpp"

#include <algorithm>
#include <cstdio>

#include "vmi/quantity.hpp"

namespace chl::vmi {

MemoryOverhead memory_overhead(const Vmi& vmi, const HypervisorCapabilities& caps) {
  MemoryOverhead o;
  for (const auto& p : caps.process_overheads) {
    o.items.push_back({std::string(p.process), p.bytes, std::string(p.role)});
  }
  const std::int64_t guest = guest_memory_bytes(vmi).value_or(0);
  const std::int64_t pt = caps.pagetable_divisor > 0
                              ? (guest + caps.pagetable_divisor - 1) / caps.pagetable_divisor
                              : 0;
  o.items.push_back({"page tables", pt,
                     "guest memory " + format_bytes_quantity(guest) + " / " +
                         std::to_string(caps.pagetable_divisor)});
  const Cpu& c = vmi.spec.domain.cpu;
  CpuTopology t = cpu_topology(vmi);
  std::uint64_t vcpus = t.vcpus();
  if (c.max_sockets > t.sockets) vcpus = std::uint64_t{c.max_sockets} * t.cores * t.threads;
  o.items.push_back(
      {"vCPUs", static_cast<std::int64_t>(vcpus) * caps.per_vcpu_overhead,
       std::to_string(vcpus) + " x " + format_bytes_quantity(caps.per_vcpu_overhead)});
  const Devices& d = vmi.spec.domain.devices;
  const auto fss = std::count_if(d.filesystems.begin(), d.filesystems.end(),
                                 [](const Filesystem& f) { return f.virtiofs; });
  if (fss > 0) {
    // Nothing in this container: virtiofsd runs in virt-controller's virtiofs-<name> containers,
    // with their own resources (pkg/virtiofs/resources.go: 1M request, 80M limit), and KubeVirt's
    // compute overhead counts none for it. The guest memory becomes a shared memfd
    // (memory.shared / memfd access='shared') the VMM maps and virtiofsd maps too: the same
    // pages, counted once, as guest memory (a page virtiofsd touches first is charged to its
    // container instead).
    o.items.push_back({"virtiofsd", 0,
                       std::to_string(fss) + " filesystem(s): virtiofsd runs in KubeVirt's virtiofs containers; "
                                             "guest memory is shared, counted once"});
  }
  if (caps.graphics_overhead > 0 && d.autoattach_graphics_device.value_or(true)) {
    o.items.push_back({"video RAM", caps.graphics_overhead, "graphics device attached"});
  }
  if (!d.host_devices.empty()) {
    o.items.push_back({"VFIO", caps.vfio_overhead, "host devices passed through"});
  }
  std::int64_t sum = 0;
  for (const auto& i : o.items) sum += i.bytes;
  const std::int64_t mi = std::int64_t{1} << 20;
  o.total = (sum + mi - 1) / mi * mi;
  return o;
}

std::string format_overhead(const MemoryOverhead& o) {
  std::string s;
  char line[512];
  for (const auto& i : o.items) {
    std::snprintf(line, sizeof line, "  %-18s %10s  %s\n", i.what.c_str(),
                  format_bytes_quantity(i.bytes).c_str(), i.note.c_str());
    s += line;
  }
  std::snprintf(line, sizeof line, "  %-18s %10s  %s\n", "total",
                format_bytes_quantity(o.total).c_str(), "rounded up to a whole Mi");
  s += line;
  return s;
}

nlohmann::json overhead_json(const MemoryOverhead& o) {
  nlohmann::json items = nlohmann::json::array();
  for (const auto& i : o.items) {
    items.push_back({{"what", i.what},
                     {"bytes", i.bytes},
                     {"quantity", format_bytes_quantity(i.bytes)},
                     {"note", i.note}});
  }
  return {{"items", items}, {"total_bytes", o.total}, {"total", format_bytes_quantity(o.total)}};
}

}  // namespace chl::vmi

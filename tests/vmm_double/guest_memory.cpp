#include "tests/vmm_double/guest_memory.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>

#include "common/thread_affinity.hpp"
#include "tests/vmm_double/tap_device.hpp"

namespace chl::vmm_double {
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

bool flag(const json& o, const char* key) {
  return o.contains(key) && o[key].is_boolean() && o[key].get<bool>();
}

std::optional<std::uint64_t> u64(const json& o, const char* key) {
  if (!o.contains(key) || !o[key].is_number_unsigned()) return std::nullopt;
  return o[key].get<std::uint64_t>();
}

std::string first_line(const fs::path& p) {
  std::ifstream f(p);
  std::string line;
  std::getline(f, line);
  return line;
}

// The nodes an mbind(MPOL_BIND) of this process may name: those with memory
// (/sys/devices/system/node/has_memory) within its cpuset's Mems_allowed_list (mm/mempolicy.c
// mpol_set_nodemask: an empty intersection is EINVAL).
std::set<std::uint32_t> bindable_nodes(const fs::path& sysfs) {
  std::set<std::uint32_t> out;
  const auto with_memory =
      common::parse_cpu_list(first_line(sysfs / "devices/system/node/has_memory"));
  if (!with_memory) return out;
  std::optional<std::vector<std::uint32_t>> allowed;
  std::ifstream st("/proc/self/status");
  for (std::string line; std::getline(st, line);) {
    if (line.rfind("Mems_allowed_list:", 0) != 0) continue;
    const auto b = line.find_first_not_of(" \t", 18);
    allowed = common::parse_cpu_list(b == std::string::npos ? "" : line.substr(b));
  }
  for (auto n : *with_memory)
    if (!allowed || std::find(allowed->begin(), allowed->end(), n) != allowed->end()) out.insert(n);
  return out;
}

// The default hugepage size (/proc/meminfo Hugepagesize), bytes; 2 MiB when unknown.
std::uint64_t default_hugepage_size() {
  std::ifstream f("/proc/meminfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("Hugepagesize:", 0) == 0) return std::stoull(line.substr(13)) * 1024;
  }
  return std::uint64_t{2} << 20;
}

// Free hugepages of `size` bytes: on `node`'s pool when the zone is bound there, else the host's.
std::uint64_t free_hugepages(const fs::path& sysfs, std::uint64_t size,
                             std::optional<std::uint32_t> node) {
  const std::string dir = "hugepages-" + std::to_string(size >> 10) + "kB";
  const fs::path p = node ? sysfs / "devices/system/node" / ("node" + std::to_string(*node)) /
                                "hugepages" / dir / "free_hugepages"
                          : sysfs / "kernel/mm/hugepages" / dir / "free_hugepages";
  const std::string text = first_line(p);
  return text.empty() ? 0 : std::stoull(text);
}

}  // namespace

std::vector<std::string> validate_memory_config(const json& cfg, std::set<std::string>& ids) {
  const json& mem = cfg["memory"];
  // config.rs validate: HugePageSizeWithoutHugePages, InvalidHugePageSize.
  if (auto hs = u64(mem, "hugepage_size")) {
    if (!flag(mem, "hugepages"))
      return {"Failed to validate config", "Huge page size specified but huge pages not enabled"};
    if ((*hs & (*hs - 1)) != 0 || *hs == 0)
      return {"Failed to validate config",
              "Huge page size is not power of 2: " + std::to_string(*hs)};
  }
  // NumaConfig::validate (config.rs:2496): cpus or memory_zones, neither empty; then a zone in
  // two nodes is MemoryZoneReused.
  std::map<std::string, std::uint64_t> zone_node;
  if (cfg.contains("numa") && cfg["numa"].is_array()) {
    for (const auto& n : cfg["numa"]) {
      const bool has_dev = n.contains("device_id") && n["device_id"].is_string();
      const bool has_cpus = n.contains("cpus") && n["cpus"].is_array();
      const bool has_zones = n.contains("memory_zones") && n["memory_zones"].is_array();
      const bool bad =
          (has_dev && (has_cpus || has_zones)) || (!has_dev && !has_cpus && !has_zones) ||
          (has_dev && n["device_id"].get<std::string>().empty()) ||
          (has_cpus && n["cpus"].empty()) || (!has_cpus && has_zones && n["memory_zones"].empty());
      if (bad) return {"Failed to validate config", "NUMA Configuration is invalid"};
      if (!has_zones) continue;
      const auto id = n["guest_numa_id"].get<std::uint64_t>();
      for (const auto& z : n["memory_zones"]) {
        const std::string zid = z.get<std::string>();
        auto [it, inserted] = zone_node.emplace(zid, id);
        if (!inserted)
          return {"Failed to validate config",
                  "Memory zone: " + zid + " belongs to multiple NUMA nodes: " +
                      std::to_string(it->second) + " and " + std::to_string(id)};
      }
    }
  }
  // validate_identifier for each zone id (after the devices').
  if (mem.contains("zones") && mem["zones"].is_array()) {
    for (const auto& z : mem["zones"]) {
      const std::string id = z["id"].get<std::string>();
      if (!ids.insert(id).second)
        return {"Failed to validate config", "Identifier " + id + " is not unique"};
    }
  }
  return {};
}

GuestMemoryOutcome create_guest_memory(const json& cfg, const fs::path& sysfs) {
  GuestMemoryOutcome out;
  const json& mem = cfg["memory"];
  const bool has_zones = mem.contains("zones") && mem["zones"].is_array();
  const std::uint64_t size = u64(mem, "size").value_or(0);
  // memory_manager.rs MemoryManager::new: zones only with size 0 ("User defined memory regions
  // can't be provided if the memory size is not 0": InvalidMemoryParameters).
  if (size != 0 && has_zones)
    return {{"Memory manager error", "Memory configuration is not valid"}, false, {}};
  if (size == 0 && has_zones && mem["zones"].empty())
    return {{"Memory manager error", "No memory zones found"}, false, {}};
  // The zones (the global memory is one zone when there are none), in order.
  std::vector<json> zones;
  if (has_zones) {
    for (const auto& z : mem["zones"]) zones.push_back(z);
  } else {
    zones.push_back(
        json{{"id", "mem0"},
             {"size", size},
             {"hugepages", flag(mem, "hugepages")},
             {"hugepage_size", mem.contains("hugepage_size") ? mem["hugepage_size"] : json()}});
  }
  const auto bindable = bindable_nodes(sysfs);
  for (const auto& z : zones) {
    std::optional<std::uint32_t> node;
    if (z.contains("host_numa_node") && z["host_numa_node"].is_number_unsigned())
      node = z["host_numa_node"].get<std::uint32_t>();
    // create_ram_region_raw: mbind(MPOL_BIND, MPOL_MF_STRICT|MPOL_MF_MOVE) -> ApplyNumaPolicy.
    if (node && !bindable.count(*node))
      return {{"Memory manager error", "Failed applying NUMA memory policy", rust_os_error(EINVAL)},
              false,
              {}};
    if (flag(z, "hugepages")) {
      const std::uint64_t hs =
          z.contains("hugepage_size") && z["hugepage_size"].is_number_unsigned()
              ? z["hugepage_size"].get<std::uint64_t>()
              : default_hugepage_size();
      if (free_hugepages(sysfs, hs, node) == 0) {
        out.sigbus = true;
        out.why = "memory zone " + z["id"].get<std::string>() + ": no free " +
                  std::to_string(hs >> 10) + " kB hugepage" +
                  (node ? " on host node " + std::to_string(*node) : std::string()) +
                  ": the MAP_NORESERVE hugetlb memfd faults SIGBUS when the payload is loaded";
        return out;
      }
    }
  }
  // vm.rs create_numa_nodes: a guest node twice, an unknown zone, an unknown or repeated
  // destination are InvalidNumaConfig.
  if (cfg.contains("numa") && cfg["numa"].is_array()) {
    std::set<std::uint64_t> ids;
    for (const auto& n : cfg["numa"]) ids.insert(n["guest_numa_id"].get<std::uint64_t>());
    std::set<std::uint64_t> seen;
    for (const auto& n : cfg["numa"]) {
      const auto id = n["guest_numa_id"].get<std::uint64_t>();
      bool bad = !seen.insert(id).second;
      if (n.contains("memory_zones") && n["memory_zones"].is_array()) {
        for (const auto& zid : n["memory_zones"]) {
          bool known = false;
          for (const auto& z : zones) known = known || z["id"] == zid;
          bad = bad || !known;
        }
      }
      if (n.contains("distances") && n["distances"].is_array()) {
        std::set<std::uint64_t> dests;
        for (const auto& d : n["distances"]) {
          const auto dest = d["destination"].get<std::uint64_t>();
          bad = bad || !ids.count(dest) || !dests.insert(dest).second;
        }
      }
      if (bad) return {{"Invalid NUMA configuration"}, false, {}};
    }
  }
  return out;
}

}  // namespace chl::vmm_double

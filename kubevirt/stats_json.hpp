#pragma once
// KubeVirt's DomainStats as JSON (pkg/virt-launcher/virtwrap/stats: every value beside a
// `…Set` flag saying whether it was measured), built from a plain description of what the
// launcher could measure. It is Cmd.GetDomainStats's answer, from which virt-handler makes
// its Prometheus metrics. An optional left empty is written as "not set" (value 0).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace chl::kubevirt {

using Counter = std::optional<std::uint64_t>;

struct CpuStats {
  Counter time_ns{};  // user + system, of the VMM process
  Counter user_ns{};
  Counter system_ns{};
};

// VCPUOffline = 0, VCPURunning = 1, VCPUBlocked = 2 (KubeVirt's values).
enum class VcpuState : int { Offline = 0, Running = 1, Blocked = 2 };

struct VcpuStats {
  std::optional<VcpuState> state{};
  Counter time_ns{};
  Counter wait_ns{};
  Counter delay_ns{};
};

struct MemoryStats {  // KiB, as libvirt reports them
  Counter unused_kib{};
  Counter cached_kib{};
  Counter available_kib{};
  Counter actual_balloon_kib{};
  Counter rss_kib{};
  Counter swap_in_kib{};
  Counter swap_out_kib{};
  Counter major_faults{};
  Counter minor_faults{};
  Counter usable_kib{};
  Counter total_kib{};
};

struct NetStats {
  std::string name;   // host device ("tap0")
  std::string alias;  // the VMI's interface name ("default")
  Counter rx_bytes{}, rx_packets{}, rx_errors{}, rx_drops{};
  Counter tx_bytes{}, tx_packets{}, tx_errors{}, tx_drops{};
};

struct BlockStats {
  std::string name;   // target device ("vda")
  std::string alias;  // the VMI's disk name
  std::string path;   // image path; empty: not set
  Counter read_requests{}, read_bytes{}, read_time_ns{};
  Counter write_requests{}, write_bytes{}, write_time_ns{};
  Counter flush_requests{}, flush_time_ns{};
  Counter errors{};
  Counter allocation_bytes{}, capacity_bytes{}, physical_bytes{};
};

struct DomainStatsDocument {
  std::string name;  // the domain name, <namespace>_<name>
  std::string uuid;
  CpuStats cpu;
  MemoryStats memory;
  std::vector<VcpuStats> vcpus;
  std::vector<NetStats> nets;
  std::vector<BlockStats> blocks;
  // Which host CPUs each vCPU may run on; empty: not set.
  std::vector<std::vector<bool>> cpu_map;
};

nlohmann::json to_stats_json(const DomainStatsDocument& s);

}  // namespace chl::kubevirt

#include "launcher/numa.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>

#include "common/thread_affinity.hpp"

namespace chl::launcher {
namespace fs = std::filesystem;

namespace {

common::Result<std::string> read_line(const fs::path& p) {
  std::ifstream f(p);
  if (!f) return common::fail_errno("reading " + p.string());
  std::string line;
  std::getline(f, line);
  return line;
}

std::optional<std::uint32_t> node_number(const std::string& name) {
  if (name.size() <= 4 || name.compare(0, 4, "node") != 0) return std::nullopt;
  std::uint32_t n = 0;
  const char* b = name.data() + 4;
  const char* e = name.data() + name.size();
  auto [p, ec] = std::from_chars(b, e, n);
  if (ec != std::errc{} || p != e) return std::nullopt;
  return n;
}

}  // namespace

common::Result<std::optional<std::vector<HostNumaNode>>> read_host_numa(const fs::path& node_dir) {
  std::error_code ec;
  if (!fs::is_directory(node_dir, ec)) return std::optional<std::vector<HostNumaNode>>{};
  std::vector<HostNumaNode> nodes;
  for (const auto& entry : fs::directory_iterator(node_dir, ec)) {
    const auto id = node_number(entry.path().filename().string());
    if (!id) continue;
    HostNumaNode n;
    n.id = *id;
    CHL_TRY(auto cpulist, read_line(entry.path() / "cpulist"));
    // A node without CPUs (memory only) has an empty cpulist.
    if (!cpulist.empty()) {
      auto cpus = common::parse_cpu_list(cpulist);
      if (!cpus)
        return common::fail(
            std::errc::invalid_argument,
            (entry.path() / "cpulist").string() + ": not a CPU list: \"" + cpulist + "\"");
      n.cpus = std::move(*cpus);
    }
    nodes.push_back(std::move(n));
  }
  if (ec) return common::fail(ec, "listing " + node_dir.string());
  if (nodes.empty()) return std::optional<std::vector<HostNumaNode>>{};
  std::sort(nodes.begin(), nodes.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  // `distance` lists the distance to every online node, in node order (drivers/base/node.c
  // node_read_distance: for_each_online_node).
  for (auto& n : nodes) {
    const fs::path dp = node_dir / ("node" + std::to_string(n.id)) / "distance";
    CHL_TRY(auto text, read_line(dp));
    std::istringstream in(text);
    std::uint32_t d = 0;
    std::size_t i = 0;
    while (in >> d) {
      if (i >= nodes.size())
        return common::fail(std::errc::invalid_argument,
                            dp.string() + ": more distances than nodes (" + text + ")");
      n.distances.emplace_back(nodes[i++].id, d);
    }
  }
  return std::optional<std::vector<HostNumaNode>>(std::move(nodes));
}

tl::expected<std::vector<GuestNumaNode>, std::string> numa_mapping(
    const std::vector<std::uint32_t>& pinning, const std::vector<HostNumaNode>& host,
    std::uint64_t memory, std::uint64_t hugepage_size) {
  // involvedCells: host node -> its vCPUs, in vCPU order.
  std::map<std::uint32_t, std::uint32_t> cpu_node;
  for (const auto& n : host)
    for (auto c : n.cpus) cpu_node.emplace(c, n.id);
  std::map<std::uint32_t, std::vector<std::uint32_t>> vcpus_of;
  for (std::size_t v = 0; v < pinning.size(); ++v) {
    auto it = cpu_node.find(pinning[v]);
    if (it == cpu_node.end())
      return tl::unexpected("vcpu " + std::to_string(v) +
                            " is mapped to a not existing host cpu set " +
                            std::to_string(pinning[v]));
    vcpus_of[it->second].push_back(static_cast<std::uint32_t>(v));
  }
  if (hugepage_size == 0)
    return tl::unexpected(std::string(
        "passing through a numa topology is restricted to VMIs with hugepages enabled"));
  const std::uint64_t cells = vcpus_of.size();
  if (cells == 0) return std::vector<GuestNumaNode>{};
  if (memory < cells * hugepage_size)
    return tl::unexpected(
        "not enough memory requested to allocate at least one hugepage per numa node: " +
        std::to_string(memory) + " < " + std::to_string(cells * hugepage_size));
  if (memory % hugepage_size != 0)
    return tl::unexpected(
        "requested memory can't be divided through the numa page size: " + std::to_string(memory) +
        " mod " + std::to_string(hugepage_size) + " != 0");
  const std::uint64_t mod = memory % (hugepage_size * cells) / hugepage_size;
  memory -= mod * hugepage_size;

  std::map<std::uint32_t, std::uint32_t> host_to_guest;
  std::uint32_t next = 0;
  for (const auto& n : host)
    if (vcpus_of.count(n.id)) host_to_guest[n.id] = next++;
  std::vector<GuestNumaNode> out;
  for (const auto& n : host) {
    auto it = vcpus_of.find(n.id);
    if (it == vcpus_of.end()) continue;
    GuestNumaNode g;
    g.guest_id = host_to_guest[n.id];
    g.host_node = n.id;
    g.vcpus = it->second;
    g.memory = memory / cells;
    for (const auto& [to, d] : n.distances) {
      auto gt = host_to_guest.find(to);
      if (gt != host_to_guest.end()) g.distances.emplace_back(gt->second, d);
    }
    out.push_back(std::move(g));
  }
  for (std::uint64_t i = 0; i < mod && i < out.size(); ++i) out[i].memory += hugepage_size;
  return out;
}

}  // namespace chl::launcher

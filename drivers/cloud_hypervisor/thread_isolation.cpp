#include "drivers/cloud_hypervisor/thread_isolation.hpp"

#include <algorithm>
#include <charconv>
#include <string>

namespace chl::cloud_hypervisor {
using nlohmann::json;

std::optional<std::uint32_t> vcpu_index(std::string_view name) {
  constexpr std::string_view kPrefix = "vcpu";
  if (name.size() <= kPrefix.size() || name.substr(0, kPrefix.size()) != kPrefix)
    return std::nullopt;
  const std::string_view digits = name.substr(kPrefix.size());
  std::uint32_t n = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc{} || p != digits.data() + digits.size()) return std::nullopt;
  return n;
}

json isolation_report(const std::vector<common::ThreadAffinity>& threads,
                      std::span<const std::uint32_t> pinning,
                      std::span<const std::uint32_t> emulator) {
  const std::vector<std::uint32_t> want_other(emulator.begin(), emulator.end());
  json list = json::array();
  json problems = json::array();
  for (const auto& t : threads) {
    const auto vcpu = vcpu_index(t.name);
    const std::string cpus = common::format_cpu_list(t.cpus);
    list.push_back(
        {{"tid", t.tid}, {"name", t.name}, {"role", vcpu ? "vcpu" : "other"}, {"cpus", cpus}});
    const std::string who = "thread " + std::to_string(t.tid) + " (" + t.name + ")";
    if (vcpu) {
      if (*vcpu >= pinning.size()) {
        problems.push_back(who + " is a vCPU without a dedicated CPU (hot-plugged?), on CPUs " +
                           cpus);
      } else if (t.cpus != std::vector<std::uint32_t>{pinning[*vcpu]}) {
        problems.push_back(who + " runs on CPUs " + cpus + ", not on its dedicated CPU " +
                           std::to_string(pinning[*vcpu]));
      }
    } else if (t.cpus != want_other) {
      problems.push_back(who + " runs on CPUs " + cpus + ", not on the emulator CPUs " +
                         common::format_cpu_list(emulator));
    }
  }
  // Every pinned vCPU has its thread: CH's vCPU thread ends at once when it cannot move onto
  // its CPU (vmm/src/cpu.rs: "Failed scheduling the vCPU … on the expected CPU set").
  for (std::size_t i = 0; i < pinning.size(); ++i) {
    const bool found = std::any_of(threads.begin(), threads.end(), [&](const auto& t) {
      return vcpu_index(t.name) == static_cast<std::uint32_t>(i);
    });
    if (!found && !threads.empty())
      problems.push_back("vCPU " + std::to_string(i) + " has no thread (pinned to CPU " +
                         std::to_string(pinning[i]) + "; see the VMM's log)");
  }
  return {{"emulator_cpus", common::format_cpu_list(emulator)},
          {"vcpu_cpus", std::vector<std::uint32_t>(pinning.begin(), pinning.end())},
          {"isolated", problems.empty() && !threads.empty()},
          {"threads", std::move(list)},
          {"problems", std::move(problems)}};
}

common::Result<std::size_t> pin_non_vcpu_threads(pid_t pid, std::span<const std::uint32_t> emulator,
                                                 const std::filesystem::path& proc) {
  CHL_TRY(auto threads, common::read_thread_affinities(pid, proc));
  const std::vector<std::uint32_t> want(emulator.begin(), emulator.end());
  std::size_t moved = 0;
  for (const auto& t : threads) {
    if (vcpu_index(t.name) || t.cpus == want) continue;
    auto st = common::set_thread_affinity(t.tid, emulator);
    if (!st) {
      if (st.error().code == std::errc::no_such_process) continue;  // it ended meanwhile
      return tl::unexpected(
          st.error().wrap("keeping the VMM's non-vCPU threads on the emulator CPUs"));
    }
    ++moved;
  }
  return moved;
}

}  // namespace chl::cloud_hypervisor

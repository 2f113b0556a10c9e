#pragma once
// KubeVirt's cpu.numa.guestMappingPassthrough, hypervisor-neutral: the guest's NUMA nodes mirror
// the host NUMA nodes that hold the vCPUs' dedicated CPUs, each with its share of the guest
// memory, bound to its host node and backed by hugepages.
//
// The host's topology is read from sysfs (/sys/devices/system/node/node<N>/{cpulist,distance}),
// where KubeVirt's virt-handler reads libvirt's capabilities (the same kernel facts). The mapping
// is KubeVirt's numaMapping (pkg/virt-launcher/virtwrap/converter/vcpu/vcpu.go, d923fdb:
// involvedCells, numaMapping): the host nodes in their order that hold a pinned vCPU become guest
// nodes 0, 1, ...; each holds the vCPUs pinned on its host node; the memory is cut down to a
// multiple of (hugepage size x nodes), split evenly, and the first nodes get one hugepage more
// each for the remainder; the distances are the host's between the involved nodes.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <tl/expected.hpp>
#include <vector>

#include "common/error.hpp"

namespace chl::launcher {

struct HostNumaNode {
  std::uint32_t id = 0;
  std::vector<std::uint32_t> cpus;
  // (node id, distance) to every online node, this one included (the `distance` file).
  std::vector<std::pair<std::uint32_t, std::uint32_t>> distances;
};

// The host's NUMA nodes in id order; nullopt when the kernel has none to show (no `node_dir`,
// a kernel without NUMA): KubeVirt then maps nothing ("If there is no numa topology reported,
// we don't do anything"). A node directory that cannot be read is an error.
common::Result<std::optional<std::vector<HostNumaNode>>> read_host_numa(
    const std::filesystem::path& node_dir = "/sys/devices/system/node");

struct GuestNumaNode {
  std::uint32_t guest_id = 0;
  std::uint32_t host_node = 0;
  std::vector<std::uint32_t> vcpus;
  std::uint64_t memory = 0;  // bytes, a whole number of hugepages
  // (guest node id, distance) to each guest node the host gave a distance for.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> distances;
};

// The guest nodes for vCPU i pinned on host CPU pinning[i]; KubeVirt's errors otherwise ("vcpu 2
// is mapped to a not existing host cpu set 9", "not enough memory requested to allocate at least
// one hugepage per numa node", "requested memory can't be divided through the numa page size").
tl::expected<std::vector<GuestNumaNode>, std::string> numa_mapping(
    const std::vector<std::uint32_t>& pinning, const std::vector<HostNumaNode>& host,
    std::uint64_t memory, std::uint64_t hugepage_size);

}  // namespace chl::launcher

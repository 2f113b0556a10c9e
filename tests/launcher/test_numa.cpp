// numa.guestMappingPassthrough: the host's NUMA nodes read from a synthetic sysfs tree, KubeVirt's
// numaMapping on them (pkg/virt-launcher/virtwrap/converter/vcpu/vcpu.go, d923fdb), the plan and
// Cloud Hypervisor's vm.create body (memory.zones with host_numa_node, numa).
#include <doctest/doctest.h>

#include <fstream>

#include "drivers/cloud_hypervisor/translate.hpp"
#include "launcher/numa.hpp"
#include "launcher/plan.hpp"
#include "tests/support/test_support.hpp"
#include "vmi/validator.hpp"

using namespace chl::launcher;
namespace fs = std::filesystem;
using V = std::vector<std::uint32_t>;
using D = std::vector<std::pair<std::uint32_t, std::uint32_t>>;

namespace {

constexpr std::uint64_t kMi = 1ull << 20;

void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text << "\n";
}

// node<id>/cpulist and node<id>/distance, as the kernel writes them.
void node(const fs::path& root, std::uint32_t id, const std::string& cpulist,
          const std::string& distance) {
  put(root / ("node" + std::to_string(id)) / "cpulist", cpulist);
  put(root / ("node" + std::to_string(id)) / "distance", distance);
}

std::vector<HostNumaNode> two_nodes() {
  return {{0, {0, 1, 2, 3}, {{0, 10}, {1, 21}}}, {1, {4, 5, 6, 7}, {{0, 21}, {1, 10}}}};
}

}  // namespace

TEST_CASE("host NUMA: nodes, CPUs and distances from sysfs") {
  chl::test::TempDir t("chl-numa");
  const fs::path root = t.path() / "node";
  node(root, 0, "0-3", "10 21 31");
  node(root, 1, "4-7", "21 10 21");
  node(root, 2, "", "31 21 10");  // memory only: no CPUs
  put(root / "online", "0-2");
  put(root / "possible", "0-3");
  auto nodes = read_host_numa(root);
  REQUIRE_MESSAGE(nodes, nodes.error().message());
  REQUIRE(nodes->has_value());
  const auto& n = **nodes;
  REQUIRE(n.size() == 3);
  CHECK(n[0].cpus == V{0, 1, 2, 3});
  CHECK(n[1].cpus == V{4, 5, 6, 7});
  CHECK(n[2].cpus.empty());
  CHECK(n[1].distances == D{{0, 21}, {1, 10}, {2, 21}});
}

TEST_CASE("host NUMA: the distance columns are the online nodes, with gaps in the numbering") {
  chl::test::TempDir t("chl-numa");
  const fs::path root = t.path() / "node";
  node(root, 0, "0-1", "10 20");
  node(root, 2, "2-3", "20 10");
  auto nodes = read_host_numa(root);
  REQUIRE(nodes);
  REQUIRE((*nodes)->size() == 2);
  CHECK((**nodes)[1].id == 2);
  CHECK((**nodes)[1].distances == D{{0, 20}, {2, 10}});
}

TEST_CASE("host NUMA: none without the directory, an error on a bad cpulist") {
  chl::test::TempDir t("chl-numa");
  auto none = read_host_numa(t.path() / "absent");
  REQUIRE(none);
  CHECK_FALSE(none->has_value());
  node(t.path() / "node", 0, "0-x", "10");
  auto bad = read_host_numa(t.path() / "node");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message().find("cpulist: not a CPU list: \"0-x\"") != std::string::npos);
}

TEST_CASE("this machine's own sysfs reads (one node or more)") {
  auto nodes = read_host_numa();
  REQUIRE_MESSAGE(nodes, nodes.error().message());
  if (!nodes->has_value()) {
    chl::test::skip("this kernel shows no NUMA nodes (/sys/devices/system/node)");
    return;
  }
  CHECK_FALSE((*nodes)->empty());
  MESSAGE("host NUMA nodes: " << (*nodes)->size());
}

TEST_CASE("mapping: one host node, one guest node with every vCPU and all the memory") {
  auto g = numa_mapping({1, 2}, two_nodes(), 1024 * kMi, 2 * kMi);
  REQUIRE(g);
  REQUIRE(g->size() == 1);
  CHECK((*g)[0].guest_id == 0);
  CHECK((*g)[0].host_node == 0);
  CHECK((*g)[0].vcpus == V{0, 1});
  CHECK((*g)[0].memory == 1024 * kMi);
  CHECK((*g)[0].distances == D{{0, 10}});
}

TEST_CASE("mapping: vCPUs across two host nodes, the memory split, the host's distances") {
  auto g = numa_mapping({2, 3, 4, 5}, two_nodes(), 1024 * kMi, 2 * kMi);
  REQUIRE(g);
  REQUIRE(g->size() == 2);
  CHECK((*g)[0].vcpus == V{0, 1});
  CHECK((*g)[1].vcpus == V{2, 3});
  CHECK((*g)[1].host_node == 1);
  CHECK((*g)[0].memory == 512 * kMi);
  CHECK((*g)[1].memory == 512 * kMi);
  CHECK((*g)[0].distances == D{{0, 10}, {1, 21}});
  CHECK((*g)[1].distances == D{{0, 21}, {1, 10}});
}

TEST_CASE("mapping: guest nodes follow the host nodes' order, not the vCPUs'") {
  auto g = numa_mapping({4, 5, 0}, two_nodes(), 64 * kMi, 2 * kMi);
  REQUIRE(g);
  REQUIRE(g->size() == 2);
  CHECK((*g)[0].host_node == 0);
  CHECK((*g)[0].vcpus == V{2});
  CHECK((*g)[1].host_node == 1);
  CHECK((*g)[1].vcpus == V{0, 1});
}

TEST_CASE("mapping: a remainder of hugepages goes to the first nodes, one each") {
  // 5 pages over 2 nodes: KubeVirt cuts to 4 (2 each), then gives the first node one more.
  auto g = numa_mapping({0, 4}, two_nodes(), 10 * kMi, 2 * kMi);
  REQUIRE(g);
  CHECK((*g)[0].memory == 6 * kMi);
  CHECK((*g)[1].memory == 4 * kMi);
}

TEST_CASE("mapping: KubeVirt's errors") {
  CHECK(numa_mapping({0, 9}, two_nodes(), 64 * kMi, 2 * kMi).error() ==
        "vcpu 1 is mapped to a not existing host cpu set 9");
  CHECK(numa_mapping({0}, two_nodes(), 64 * kMi, 0).error() ==
        "passing through a numa topology is restricted to VMIs with hugepages enabled");
  CHECK(numa_mapping({0, 4}, two_nodes(), 2 * kMi, 2 * kMi)
            .error()
            .rfind("not enough memory requested to allocate at least one hugepage per numa node",
                   0) == 0);
  CHECK(numa_mapping({0}, two_nodes(), 3 * kMi, 2 * kMi)
            .error()
            .rfind("requested memory can't be divided through the numa page size", 0) == 0);
}

namespace {

constexpr const char* kNumaVmi = R"(
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: numa, namespace: default}
spec:
  domain:
    cpu: {cores: 4, dedicatedCpuPlacement: true, numa: {guestMappingPassthrough: {}}, realtime: {mask: "0-3,^1"}}
    memory: {guest: 1Gi, hugepages: {pageSize: 2Mi}}
    resources: {requests: {memory: 1Gi}}
    devices: {}
)";

}  // namespace

TEST_CASE(
    "plan and vm.create: one memory zone per guest node, bound to its host node, hugepages kept") {
  auto c = chl::vmi::check_vmi(kNumaVmi, "cloud-hypervisor");
  REQUIRE_MESSAGE(c, (c ? "" : chl::vmi::format_violations(c.error(), "vmi")));
  // The two-node host as sysfs shows it.
  chl::test::TempDir t("chl-numa");
  node(t.path() / "node", 0, "0-3", "10 21");
  node(t.path() / "node", 1, "4-7", "21 10");
  auto host = read_host_numa(t.path() / "node");
  REQUIRE(host);
  REQUIRE(host->has_value());
  PlanInputs in;
  in.cpu_set = V{2, 3, 4, 5, 6};
  in.host_numa = **host;
  auto p = plan_launch(c->vmi, *c->caps, in);
  REQUIRE_MESSAGE(p, (p ? "" : chl::vmi::format_violations(p.error(), "plan")));
  CHECK(p->cpus.pinning == V{2, 3, 4, 5});
  CHECK(p->cpus.realtime);
  CHECK(p->cpus.realtime_vcpus == V{0, 2, 3});
  REQUIRE(p->memory.numa.size() == 2);

  const nlohmann::json body = chl::cloud_hypervisor::to_ch_vm_config(*p);
  CAPTURE(body.dump());
  CHECK(body["memory"]["size"] == 0);
  CHECK_FALSE(body["memory"].contains("hugepages"));
  const auto& zones = body["memory"]["zones"];
  REQUIRE(zones.size() == 2);
  CHECK(
      zones[0] ==
      nlohmann::json::parse(
          R"({"id":"numa0","size":536870912,"hugepages":true,"hugepage_size":2097152,"host_numa_node":0})"));
  CHECK(zones[1]["host_numa_node"] == 1);
  const auto& numa = body["numa"];
  REQUIRE(numa.size() == 2);
  CHECK(
      numa[0] ==
      nlohmann::json::parse(
          R"({"guest_numa_id":0,"cpus":[0,1],"distances":[{"destination":1,"distance":21}],"memory_zones":["numa0"]})"));
  CHECK(numa[1]["cpus"] == nlohmann::json::parse("[2,3]"));

  // Without a host topology (a kernel without NUMA), as KubeVirt: no guest nodes, one memory.
  in.host_numa.reset();
  auto flat = plan_launch(c->vmi, *c->caps, in);
  REQUIRE(flat);
  CHECK(flat->memory.numa.empty());
  const nlohmann::json fb = chl::cloud_hypervisor::to_ch_vm_config(*flat);
  CHECK(fb["memory"]["size"] == 1ull << 30);
  CHECK_FALSE(fb.contains("numa"));

  // A pinned CPU on no host node: the plan names the field.
  in.host_numa = std::vector<HostNumaNode>{{0, {2, 3}, {{0, 10}}}};
  auto off = plan_launch(c->vmi, *c->caps, in);
  REQUIRE_FALSE(off);
  CHECK(off.error()[0].path == "spec.domain.cpu.numa.guestMappingPassthrough");
  CHECK(off.error()[0].message == "vcpu 2 is mapped to a not existing host cpu set 4");
}

TEST_CASE(
    "mapping: four host nodes, vCPUs on nodes 1 and 3 only: two guest nodes, their distance") {
  chl::test::TempDir t("chl-numa");
  const fs::path root = t.path() / "node";
  node(root, 0, "0-1", "10 16 16 22");
  node(root, 1, "2-3", "16 10 22 16");
  node(root, 2, "4-5", "16 22 10 16");
  node(root, 3, "6-7", "22 16 16 10");
  auto host = read_host_numa(root);
  REQUIRE(host);
  REQUIRE(host->has_value());
  auto g = numa_mapping({6, 2, 7, 3}, **host, 128 * kMi, 2 * kMi);
  REQUIRE(g);
  REQUIRE(g->size() == 2);
  CHECK((*g)[0].host_node == 1);
  CHECK((*g)[0].vcpus == V{1, 3});
  CHECK((*g)[0].distances == D{{0, 10}, {1, 16}});
  CHECK((*g)[1].host_node == 3);
  CHECK((*g)[1].vcpus == V{0, 2});
  CHECK((*g)[1].distances == D{{0, 16}, {1, 10}});
  CHECK((*g)[0].memory + (*g)[1].memory == 128 * kMi);
}

// numa.guestMappingPassthrough and realtime end to end: `ch-launcher run` against the VMM double
// or a real cloud-hypervisor (CLOUD_HYPERVISOR_BIN, booting the PVH test guest). Hugepages are
// reserved for the run when the machine has none free (root: /proc/sys/vm/nr_hugepages, put back
// after); the VMM's threads' policies are read with sched_getscheduler, its memory's binding from
// /proc/<pid>/numa_maps.
#include <sched.h>

#include <fstream>
#include <regex>

#include "common/thread_affinity.hpp"
#include "launcher/numa.hpp"
#include "tests/support/launcher_harness.hpp"

using chl::test::LauncherRun;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const fs::path kNrHugepages = "/proc/sys/vm/nr_hugepages";
const fs::path kFree2M = "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages";

long read_long(const fs::path& p) {
  std::ifstream f(p);
  long v = -1;
  f >> v;
  return v;
}

bool write_long(const fs::path& p, long v) {
  std::ofstream f(p);
  f << v << "\n";
  f.flush();
  return static_cast<bool>(f);
}

// The machine's 2 MiB hugepage pool set to `pages` for this scope, put back as it was after.
class HugepagePool {
 public:
  explicit HugepagePool(long pages) : before_(read_long(kNrHugepages)) {
    ok_ = before_ >= 0 && write_long(kNrHugepages, pages) && read_long(kNrHugepages) == pages;
  }
  ~HugepagePool() {
    if (before_ >= 0) (void)write_long(kNrHugepages, before_);
  }
  HugepagePool(const HugepagePool&) = delete;
  HugepagePool& operator=(const HugepagePool&) = delete;
  [[nodiscard]] bool ok() const { return ok_; }

 private:
  long before_;
  bool ok_ = false;
};

std::vector<std::uint32_t> allowed_cpus() {
  cpu_set_t set;
  std::vector<std::uint32_t> out;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (std::uint32_t c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

// The harness's VMI (1 vCPU, 64Mi) with dedicated CPUs, NUMA passthrough on 2Mi hugepages and,
// when `realtime` is set, realtime with that mask.
void write_numa_vmi(LauncherRun& r, const char* realtime = nullptr) {
  r.write_vmi("console=ttyS0");
  std::string text = chl::test::read_file(r.vmi_file());
  text = std::regex_replace(
      text, std::regex("    cpu:\n      cores: 1\n"),
      std::string("    cpu:\n      cores: 1\n      dedicatedCpuPlacement: true\n"
                  "      numa:\n        guestMappingPassthrough: {}\n") +
          (realtime ? std::string("      realtime:\n        mask: \"") + realtime + "\"\n"
                    : std::string()));
  text = std::regex_replace(text, std::regex("      guest: 64Mi\n"),
                            "      guest: 64Mi\n      hugepages:\n        pageSize: 2Mi\n");
  chl::test::write_file(r.vmi_file(), text);
}

// The host node of `cpu` (sysfs), or nullopt.
std::optional<std::uint32_t> node_of(std::uint32_t cpu) {
  auto nodes = chl::launcher::read_host_numa();
  if (!nodes || !nodes->has_value()) return std::nullopt;
  for (const auto& n : **nodes)
    if (std::find(n.cpus.begin(), n.cpus.end(), cpu) != n.cpus.end()) return n.id;
  return std::nullopt;
}

}  // namespace

TEST_CASE(
    "run: NUMA passthrough gives the guest the host node of its CPU, memory bound there on "
    "hugepages") {
  const auto cpus = allowed_cpus();
  REQUIRE_FALSE(cpus.empty());
  const auto host_node = node_of(cpus[0]);
  if (!host_node) {
    chl::test::skip("this kernel shows no NUMA nodes: KubeVirt (and the launcher) then map none");
    return;
  }
  // 64Mi of 2Mi pages and a margin, reserved for the run when not free already.
  std::optional<HugepagePool> pool;
  if (read_long(kFree2M) < 40) {
    pool.emplace(read_long(kNrHugepages) + 40);
    if (!pool->ok()) {
      chl::test::skip("no free 2 MiB hugepages and " + kNrHugepages.string() +
                      " not writable here (not root): a hugepage zone cannot be backed");
      return;
    }
  }
  LauncherRun r;
  write_numa_vmi(r);
  r.start({"--cpu-set", std::to_string(cpus[0])});
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  const json d = r.domain();
  const auto pid = static_cast<pid_t>(d["vmm"].value("pid", -1L));
  REQUIRE(pid > 0);
  // What the VMM was given and took (vm.info's config).
  const json cfg = d["info"]["config"];
  CAPTURE(cfg.dump());
  CHECK(cfg["memory"]["size"] == 0);
  REQUIRE(cfg["memory"]["zones"].size() == 1);
  const json& zone = cfg["memory"]["zones"][0];
  CHECK(zone["host_numa_node"] == *host_node);
  CHECK(zone["hugepages"] == true);
  CHECK(zone["hugepage_size"] == 2u << 20);
  CHECK(zone["size"] == 64u << 20);
  REQUIRE(cfg["numa"].size() == 1);
  CHECK(cfg["numa"][0]["guest_numa_id"] == 0);
  CHECK(cfg["numa"][0]["cpus"] == json::parse("[0]"));
  CHECK(cfg["numa"][0]["memory_zones"] == json::parse(R"(["numa0"])"));
  if (chl::test::using_real_vmm()) {
    // The kernel's view of CH's guest memory: a hugetlb mapping bound to the node.
    const std::string maps = chl::test::read_file("/proc/" + std::to_string(pid) + "/numa_maps");
    const std::regex bound("bind:" + std::to_string(*host_node) + " [^\n]*huge");
    CHECK_MESSAGE(std::regex_search(maps, bound), maps);
  }
  CHECK(r.cli({"stop", "--grace-period", "1"}).exit_code == 0);
  r.wait_exit();
}

TEST_CASE(
    "run: a hugepage zone with no hugepage free kills the VMM with SIGBUS at boot, the start "
    "fails") {
  const auto cpus = allowed_cpus();
  if (!node_of(cpus.at(0))) {
    chl::test::skip("this kernel shows no NUMA nodes");
    return;
  }
  HugepagePool none(0);
  if (!none.ok() || read_long(kFree2M) != 0) {
    chl::test::skip("the 2 MiB hugepage pool cannot be emptied here (not root, or pages in use)");
    return;
  }
  LauncherRun r;
  write_numa_vmi(r);
  r.start({"--cpu-set", std::to_string(cpus[0])});
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK(exit->code == 1);
  // CH v52 maps the zone's hugetlb memfd MAP_NORESERVE (memory_manager.rs create_ram_region_raw)
  // and dies of SIGBUS writing the payload into it: vm.boot is never answered.
  CHECK_MESSAGE(r.output().find("booting the VM") != std::string::npos, r.output());
  CHECK_MESSAGE(r.output().find("signal 7") != std::string::npos, r.output());
}

TEST_CASE(
    "run: realtime makes the vCPU threads of the mask SCHED_FIFO priority 1, shown in status") {
  const auto cpus = allowed_cpus();
  if (!node_of(cpus.at(0))) {
    chl::test::skip("this kernel shows no NUMA nodes");
    return;
  }
  std::optional<HugepagePool> pool;
  if (read_long(kFree2M) < 40) {
    pool.emplace(read_long(kNrHugepages) + 40);
    if (!pool->ok()) {
      chl::test::skip("no free 2 MiB hugepages and " + kNrHugepages.string() +
                      " not writable here");
      return;
    }
  }
  LauncherRun r;
  write_numa_vmi(r, "0");
  // The vCPU on the last CPU: the guest's vCPU spins, and SCHED_FIFO holds that CPU (up to the
  // kernel's RT throttling) until the VM stops, a few seconds later.
  r.start({"--cpu-set", std::to_string(cpus.back())});
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  const json d = r.domain();
  const auto pid = static_cast<pid_t>(d["vmm"].value("pid", -1L));
  REQUIRE(pid > 0);
  auto threads = chl::common::read_thread_affinities(pid);
  REQUIRE(threads);
  int vcpus = 0;
  for (const auto& t : *threads) {
    CAPTURE(t.name);
    const int policy = ::sched_getscheduler(t.tid);
    sched_param sp{};
    REQUIRE(::sched_getparam(t.tid, &sp) == 0);
    if (t.name == "vcpu0") {
      ++vcpus;
      CHECK(policy == SCHED_FIFO);
      CHECK(sp.sched_priority == 1);
    } else {
      CHECK(policy == SCHED_OTHER);
    }
  }
  CHECK(vcpus == 1);
  const json& rt = d["vmm"]["realtime"];
  CHECK_MESSAGE(rt.value("realtime", false), rt.dump());
  auto st = r.cli({"status"});
  CHECK_MESSAGE(st.output.find("realtime:  SCHED_FIFO: vCPU 0 fifo 1") != std::string::npos,
                st.output);
  CHECK(r.cli({"stop", "--grace-period", "1"}).exit_code == 0);
  r.wait_exit();
}

TEST_CASE(
    "run: realtime without CAP_SYS_NICE is refused before anything starts, naming the field") {
  if (::geteuid() != 0) {
    chl::test::skip("dropping CAP_SYS_NICE with setpriv needs root");
    return;
  }
  LauncherRun r;
  write_numa_vmi(r, "0");
  // As KubeVirt's non-root pod: no CAP_SYS_NICE (rendercontainer.go requiredCapabilities).
  r.wrapper = {"/usr/bin/setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice", "--"};
  r.start({"--cpu-set", std::to_string(allowed_cpus().at(0))});
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK(exit->code == 2);
  CHECK_MESSAGE(
      r.output().find(
          "spec.domain.cpu.realtime: the launcher cannot make its vCPU threads SCHED_FIFO") !=
          std::string::npos,
      r.output());
  CHECK_FALSE(fs::exists(r.state_dir() / "vmm.log"));
}

// `ch-launcher run`: parse arguments, hand them to cli::run_launcher.
#include <cstdio>

#include "cli/args.hpp"
#include "cli/registry.hpp"
#include "drivers/libvirt/accel_probe.hpp"
#include "cli/run_launcher.hpp"
#include "common/log.hpp"
#include "launcher/plan.hpp"

namespace chl::cli {
namespace {

const char* kUsage =
    "usage: ch-launcher run --vmi FILE [--state-dir DIR] [--volume NAME=PATH]... [--vmm-binary PATH]\n"
    "                       [--hypervisor cloud-hypervisor|qemu-kvm] [--grace-period SECONDS] [--pod-layout]\n"
    "                       [--firmware-dir DIR] [--console-take-over] [--log-level LEVEL] [--log-file PATH]\n"
    "                       [--vmm-verbose N] [--vmm-seccomp true|false] [--accel auto|kvm|tcg]\n"
    "                       [--restore SNAPSHOT-DIR] [--seccomp enforce|log|off] [--api-timeout SECONDS]\n"
    "                       [--allow-host-network] [--virtiofs-dir DIR] [--virtiofs-wait SECONDS]\n"
    "                       [--cpu-set LIST] [--network-info PATH]\n\n"
    "Run the VMI until it ends. SIGTERM/SIGINT press the ACPI power button and force the VM off after\n"
    "the grace period (default: the VMI's terminationGracePeriodSeconds, else 30).\n"
    "qemu-kvm (spec.hypervisor or --hypervisor) runs QEMU through libvirt (qemu:///system; a libvirtd is started\n"
    "when none answers); --vmm-binary then names the QEMU binary, --accel picks KVM or TCG (auto: probed, see\n"
    "docs/qemu/daemon.md).\n"
    "--restore starts the VM from a snapshot made by `ch-launcher snapshot` instead of booting it.\n"
    "--seccomp: the launcher's own filter once the VMM runs (docs/security.md). --api-timeout bounds each\n"
    "VMM API call (default 5 s, 30 s for create/boot/shutdown).\n"
    "Interfaces joined to the pod network are wired (bridge, tap, nftables, DHCP: docs/network/); that\n"
    "needs CAP_NET_ADMIN in the pod's network namespace. In the host's own network namespace (no pod, no\n"
    "`ip netns exec`) it is refused unless --allow-host-network: it would rewire the host.\n"
    "Filesystems (virtiofs) connect to <--virtiofs-dir>/<name>.sock (default /var/run/kubevirt/virtiofs-containers,\n"
    "KubeVirt's), served by a virtiofsd the launcher does not start; it waits --virtiofs-wait (default 60) for each.\n"
    "--cpu-set (e.g. 2-5): the pod's CPUs for dedicatedCpuPlacement (default: the cgroup's cpuset.cpus.effective).\n"
    "--network-info: KubeVirt's network-info file giving each SR-IOV network's VF (default /etc/podinfo/network-info).\n"
    "Exit codes: 0 guest shut down cleanly, 1 could not start, 2 bad input, 3 crashed, 4 forced off.";

int run(const std::vector<std::string>& argv) {
  Args a({"--vmi", "--state-dir", "--volume", "--vmm-binary", "--hypervisor", "--grace-period", "--firmware-dir",
          "--log-level", "--log-file", "--vmm-verbose", "--vmm-seccomp", "--accel", "--restore", "--seccomp",
          "--api-timeout", "--virtiofs-dir", "--virtiofs-wait", "--cpu-set", "--network-info"},
         {"--pod-layout", "--console-take-over", "--allow-host-network"});
  if (!a.parse(argv)) return usage_error("run", a.error());
  if (!a.positionals().empty()) return usage_error("run", "unexpected argument " + a.positionals()[0]);
  auto vmi = a.get("--vmi");
  if (!vmi) return usage_error("run", "--vmi FILE is required");
  spdlog::level::level_enum level = spdlog::level::info;
  if (auto l = a.get("--log-level"); l && !common::log::parse_level(*l, level))
    return usage_error("run", "--log-level: unknown level " + *l);
  common::log::init("ch-launcher", level, a.get_or("--log-file", ""));

  launcher::LaunchOptions o;
  o.vmi_path = *vmi;
  if (auto d = a.get("--state-dir")) o.state_dir = std::filesystem::absolute(*d);
  for (const auto& v : a.all("--volume")) {
    auto eq = v.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
      return usage_error("run", "--volume takes NAME=PATH, got '" + v + "'");
    o.volumes[v.substr(0, eq)] = std::filesystem::absolute(v.substr(eq + 1)).string();
  }
  o.vmm_binary = a.get_or("--vmm-binary", "");
  o.default_hypervisor = a.get_or("--hypervisor", "cloud-hypervisor");
  if (auto g = a.get("--grace-period")) {
    try {
      std::size_t used = 0;
      int s = std::stoi(*g, &used);
      if (used != g->size() || s < 0) throw std::invalid_argument(*g);
      o.grace_period_seconds = s;
    } catch (...) {
      return usage_error("run", "--grace-period takes a whole number of seconds, got '" + *g + "'");
    }
  }
  o.pod_layout = a.has("--pod-layout");
  o.console_take_over = a.has("--console-take-over");
  o.allow_host_network = a.has("--allow-host-network");
  if (auto f = a.get("--firmware-dir")) o.firmware_dir = *f;
  if (auto v = a.get("--vmm-verbose")) o.vmm_verbosity = std::atoi(v->c_str());
  if (auto s = a.get("--vmm-seccomp")) {
    if (*s != "true" && *s != "false") return usage_error("run", "--vmm-seccomp takes true or false");
    o.vmm_seccomp = *s == "true";
  }
  if (auto ac = a.get("--accel")) {
    if (!libvirt::accel_request_from_string(*ac)) return usage_error("run", "--accel takes auto, kvm or tcg, got '" + *ac + "'");
    o.accel = *ac;
  }
  if (auto r = a.get("--restore")) o.restore_from = std::filesystem::absolute(*r);
  if (auto s = a.get("--seccomp")) {
    if (*s != "enforce" && *s != "log" && *s != "off")
      return usage_error("run", "--seccomp takes enforce, log or off, got '" + *s + "'");
    o.seccomp = *s;
  }
  if (auto t = a.get("--api-timeout")) {
    try {
      std::size_t used = 0;
      double secs = std::stod(*t, &used);
      if (used != t->size() || !(secs > 0) || secs > 3600) throw std::invalid_argument(*t);
      o.api_timeout_ms = static_cast<int>(secs * 1000);
    } catch (...) {
      return usage_error("run", "--api-timeout takes seconds (0 < s <= 3600), got '" + *t + "'");
    }
  }
  if (auto d = a.get("--virtiofs-dir")) o.virtiofs_dir = std::filesystem::absolute(*d).string();
  if (auto n = a.get("--network-info")) o.network_info_path = std::filesystem::absolute(*n).string();
  if (auto cs = a.get("--cpu-set")) {
    o.cpu_set = launcher::parse_cpu_list(*cs);
    if (!o.cpu_set || o.cpu_set->empty()) return usage_error("run", "--cpu-set takes a CPU list such as 2-5 or 0,2, got '" + *cs + "'");
  }
  if (auto w = a.get("--virtiofs-wait")) {
    try {
      std::size_t used = 0;
      double secs = std::stod(*w, &used);
      if (used != w->size() || !(secs >= 0) || secs > 3600) throw std::invalid_argument(*w);
      o.virtiofs_wait_ms = static_cast<int>(secs * 1000);
    } catch (...) {
      return usage_error("run", "--virtiofs-wait takes seconds (0 <= s <= 3600), got '" + *w + "'");
    }
  }
  return cli::run_launcher(o);
}

Registrar reg({"run", "run a VMI until it ends (the launcher itself)", kUsage, run});

}  // namespace
}  // namespace chl::cli

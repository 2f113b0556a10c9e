// `ch-launcher render`: the exact vm.create body (cloud-hypervisor) or libvirt domain XML
// (qemu-kvm) for a VMI (nothing started, nothing written).
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "drivers/libvirt/accel_probe.hpp"
#include "drivers/cloud_hypervisor/translate.hpp"
#include "drivers/libvirt/domain_xml.hpp"
#include "cli/args.hpp"
#include "cli/registry.hpp"
#include "launcher/plan.hpp"
#include "vmi/parser.hpp"
#include "vmi/validator.hpp"

namespace {

int run(const std::vector<std::string>& argv) {
  chl::cli::Args args(
      {"--vmi", "--hypervisor", "--volume", "--state-dir", "--cpu-set", "--firmware", "--accel", "--emulator"},
      {"--pod-layout", "--plan"});
  if (!args.parse(argv)) return chl::cli::usage_error("render", args.error());
  auto vmi = args.get("--vmi");
  if (!vmi) return chl::cli::usage_error("render", "--vmi FILE is required");
  chl::launcher::PlanInputs in;
  for (const auto& v : args.all("--volume")) {
    auto eq = v.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == v.size()) {
      return chl::cli::usage_error("render", "--volume takes NAME=PATH, got \"" + v + "\"");
    }
    in.volume_paths[v.substr(0, eq)] = v.substr(eq + 1);
  }
  in.pod_layout = args.has("--pod-layout");
  in.state_dir = args.get_or("--state-dir", "");
  in.firmware_path = args.get_or("--firmware", "");
  if (auto cs = args.get("--cpu-set")) {
    in.cpu_set = chl::launcher::parse_cpu_list(*cs);
    if (!in.cpu_set)
      return chl::cli::usage_error("render",
                                   "--cpu-set takes a CPU list such as 2-5,8, got \"" + *cs + "\"");
  }
  auto checked = chl::cli::checked_vmi_or_print(*vmi, args.get_or("--hypervisor", "cloud-hypervisor"));
  if (!checked) return 2;
  in.device_env = chl::launcher::device_plugin_env(environ);
  // KubeVirt's network-info (SR-IOV VFs), as `run` reads it by default.
  if (std::error_code ec; std::filesystem::exists(chl::launcher::kNetworkInfoPath, ec)) {
    auto text = chl::vmi::read_manifest(std::string(chl::launcher::kNetworkInfoPath));
    if (!text) {
      std::fprintf(stderr, "ch-launcher render: SR-IOV network-info: %s\n", text.error().message().c_str());
      return 1;
    }
    in.network_info = std::move(*text);
  }
  if (!in.cpu_set && checked->vmi.spec.domain.cpu.dedicated_cpu_placement) {
    if (auto cs = chl::launcher::read_cgroup_cpu_set()) in.cpu_set = std::move(*cs);
  }
  const bool qemu = checked->caps->name == "qemu-kvm";
  if (checked->caps->name != "cloud-hypervisor" && !qemu) {
    std::fprintf(
        stderr,
        "ch-launcher render: rendering for %s is not yet implemented (the VMI is valid for it)\n",
        std::string(checked->caps->name).c_str());
    return 1;
  }
  auto accel = chl::libvirt::accel_request_from_string(args.get_or("--accel", "auto"));
  if (!accel) return chl::cli::usage_error("render", "--accel takes auto, kvm or tcg");
  if (checked->vmi.spec.domain.cpu.numa_guest_mapping_passthrough) {
    auto numa = chl::launcher::read_host_numa();
    if (!numa) {
      std::fprintf(stderr, "ch-launcher render: numa.guestMappingPassthrough: %s\n", numa.error().message().c_str());
      return 1;
    }
    in.host_numa = std::move(*numa);
  }
  auto plan = chl::launcher::plan_launch(checked->vmi, *checked->caps, in);
  if (!plan) {
    std::fputs(chl::vmi::format_violations(plan.error(), *vmi == "-" ? "<stdin>" : *vmi).c_str(),
               stderr);
    return 2;
  }
  if (qemu && !args.has("--plan")) {
    chl::libvirt::DomainXmlOptions xo;
    auto choice = chl::libvirt::choose_accel(*accel);
    xo.accel = choice.accel;
    xo.plain_cpu = choice.nested_pvm;
    xo.emulator = args.get_or("--emulator", "");
    std::fputs(chl::libvirt::to_domain_xml(checked->vmi, *plan, xo).c_str(), stdout);
  } else if (qemu) {
    std::printf("%s\n", chl::launcher::preparations_json(*plan).dump(2).c_str());
  } else if (args.has("--plan")) {
    std::printf("%s\n", chl::cloud_hypervisor::ch_plan_json(*plan).dump(2).c_str());
  } else {
    nlohmann::json body = chl::cloud_hypervisor::to_ch_vm_config(*plan);
    std::printf("%s\n", body.dump(2).c_str());
  }
  return 0;
}

chl::cli::Registrar reg(
    {"render", "print the exact vm.create body or libvirt domain XML for a VMI (nothing started)",
     "usage: ch-launcher render --vmi FILE [--hypervisor H] [--volume NAME=PATH]...\n"
     "                          [--pod-layout] [--state-dir DIR] [--cpu-set LIST]\n"
     "                          [--firmware PATH] [--plan] [--accel auto|kvm|tcg] [--emulator PATH]\n"
     "  --volume NAME=PATH  the file behind volume NAME (kernel-boot=DIR: the kernel-boot\n"
     "                      container's root)\n"
     "  --pod-layout        KubeVirt's virt-launcher paths for volumes without --volume\n"
     "  --state-dir DIR     the VM's state directory (default /run/ch-launcher/NS/NAME)\n"
     "  --cpu-set LIST      the pod's CPUs for dedicatedCpuPlacement (default: cgroup's\n"
     "                      cpuset.cpus.effective)\n"
     "  --firmware PATH     firmware file to use instead of finding one\n"
     "  --plan              print the whole plan: preparations and the vm.create body\n"
     "                      (qemu-kvm: the preparations)\n"
     "  --hypervisor qemu-kvm  print the libvirt domain XML instead (for a VMI without\n"
     "                      spec.hypervisor); --accel: domain type kvm or qemu (auto probes\n"
     "                      this host), --emulator: the QEMU binary in <emulator>\n"
     "  exit 0: the body (or XML) on stdout; 2: every problem; 1: hypervisor without a renderer.",
     run});

}  // namespace

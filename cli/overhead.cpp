// `ch-launcher overhead`: the pod memory the hypervisor needs for a VMI beyond guest RAM.
#include "vmi/overhead.hpp"

#include <cstdio>

#include "cli/args.hpp"
#include "cli/registry.hpp"
#include "vmi/quantity.hpp"
#include "vmi/validator.hpp"

namespace {

int run(const std::vector<std::string>& argv) {
  chl::cli::Args args({"--vmi", "--hypervisor"}, {"--json"});
  if (!args.parse(argv)) return chl::cli::usage_error("overhead", args.error());
  auto vmi = args.get("--vmi");
  if (!vmi) return chl::cli::usage_error("overhead", "--vmi FILE is required");
  auto checked = chl::cli::checked_vmi_or_print(*vmi, args.get_or("--hypervisor", "cloud-hypervisor"));
  if (!checked) return 2;
  auto o = chl::vmi::memory_overhead(checked->vmi, *checked->caps);
  if (args.has("--json")) {
    std::printf("%s\n", chl::vmi::overhead_json(o).dump(2).c_str());
    return 0;
  }
  std::printf("memory overhead of %s/%s on %s: %s\n", checked->vmi.metadata.namespace_.c_str(),
              checked->vmi.metadata.name.c_str(), std::string(checked->caps->name).c_str(),
              chl::vmi::format_bytes_quantity(o.total).c_str());
  std::fputs(chl::vmi::format_overhead(o).c_str(), stdout);
  return 0;
}

chl::cli::Registrar reg(
    {"overhead", "pod memory overhead a VMI needs on the hypervisor, itemized",
     "usage: ch-launcher overhead --vmi FILE [--hypervisor H] [--json]\n"
     "  Prints the memory the pod needs beyond the guest's RAM (processes, page "
     "tables, vCPUs, ...) in Kubernetes quantity form.",
     run});

}  // namespace

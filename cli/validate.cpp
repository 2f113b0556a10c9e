// `ch-launcher validate`: check a VMI against a hypervisor; exit 0 with a summary line, or 2
// with every violation.
#include <cstdio>

#include "cli/args.hpp"
#include "cli/registry.hpp"
#include "vmi/validator.hpp"

namespace {

int run(const std::vector<std::string>& argv) {
  chl::cli::Args args({"--vmi", "--hypervisor"}, {"--support-matrix"});
  if (!args.parse(argv)) return chl::cli::usage_error("validate", args.error());
  if (args.has("--support-matrix")) {
    std::fputs(chl::vmi::support_matrix_markdown().c_str(), stdout);
    return 0;
  }
  auto vmi = args.get("--vmi");
  if (!vmi) return chl::cli::usage_error("validate", "--vmi FILE is required");
  auto checked = chl::cli::checked_vmi_or_print(*vmi, args.get_or("--hypervisor", "cloud-hypervisor"));
  if (!checked) return 2;
  std::printf("ok: %s\n", chl::vmi::vmi_summary(checked->vmi, *checked->caps).c_str());
  return 0;
}

chl::cli::Registrar reg(
    {"validate", "check a VMI against the hypervisor (exit 2 lists every problem)",
     "usage: ch-launcher validate --vmi FILE [--hypervisor cloud-hypervisor|qemu-kvm]\n"
     "       ch-launcher validate --support-matrix   (what each hypervisor serves, Markdown)\n"
     "  FILE is YAML or JSON (\"-\" = stdin); spec.hypervisor, when set, wins over "
     "--hypervisor.\n"
     "  exit 0: prints a one-line summary; exit 2: prints every violation, one a line.",
     run});

}  // namespace

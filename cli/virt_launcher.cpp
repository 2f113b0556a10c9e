// `ch-launcher virt-launcher [flags]`, also run as `virt-launcher` or `virt-launcher-monitor`
// (argv[0], main.cpp): loads libchl-kubevirt.so (kubevirt/module.hpp) and runs virt-launcher
// mode from it with this executable's launch (run_launcher). The module is loaded only here, so
// `run` never maps KubeVirt's transport libraries.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/registry.hpp"
#include "cli/run_launcher.hpp"
#include "common/module_loader.hpp"
#include "kubevirt/module.hpp"
#include "launcher/launch_options.hpp"

namespace {

int run(const std::vector<std::string>& argv) {
  using namespace chl;
  const std::string what = "KubeVirt support";
  auto found = common::find_module(kubevirt::kKubevirtModuleFile, "CHL_KUBEVIRT_MODULE", kubevirt::kKubevirtModuleSymbol, what);
  if (!found) {
    std::fprintf(stderr, "ch-launcher virt-launcher: %s\n", found.error().message().c_str());
    return launcher::kExitLaunchFailed;
  }
  const auto* api = static_cast<const kubevirt::KubevirtModuleApi*>(found->api);
  if (api->abi != kubevirt::kKubevirtModuleAbi || api->options_size != sizeof(launcher::LaunchOptions) ||
      api->hooks_size != sizeof(launcher::LaunchHooks) || !api->main) {
    std::fprintf(stderr, "ch-launcher virt-launcher: %s\n",
                 common::module_from_other_build(what, found->path, "module ABI " + std::to_string(api->abi),
                                                 std::to_string(kubevirt::kKubevirtModuleAbi))
                     .c_str());
    return launcher::kExitLaunchFailed;
  }
  // The module stays loaded (found->library) until main returns: everything it made is gone then.
  return api->main(argv, [](const launcher::LaunchOptions& o, const launcher::LaunchHooks& h) {
    return cli::run_launcher(o, h);
  });
}

chl::cli::Registrar reg(
    {"virt-launcher", "KubeVirt's compute container: serve virt-handler's protocol, run the VMI it syncs",
     "usage: ch-launcher virt-launcher [virt-launcher's flags]   (also as virt-launcher, virt-launcher-monitor)\n"
     "  --name NAME --namespace NS --uid UID   the VMI this pod is for (a Sync for another is refused)\n"
     "  --kubevirt-share-dir DIR      sockets/launcher-sock, domain-notify-pipe.sock (default /var/run/kubevirt)\n"
     "  --private-dir DIR             <uid>/virt-serial0 and the VMI's volumes (default /var/run/kubevirt-private)\n"
     "  --container-disk-dir DIR      disk_N.img, kernel-boot/ (default /var/run/kubevirt/container-disks)\n"
     "  --ephemeral-disk-dir DIR      the launcher's state directory ch-launcher/ (default /var/run/kubevirt-ephemeral-disks)\n"
     "  --hypervisor kvm|hyperv-direct|cloud-hypervisor|qemu-kvm   KubeVirt's kvm/hyperv-direct name the kernel's\n"
     "                                hypervisor: the VMM on it is CHL_VMM's (the image: cloud-hypervisor; unset: QEMU\n"
     "                                through libvirt); cloud-hypervisor and qemu-kvm choose the VMM\n"
     "  --grace-period-seconds N      the graceful stop's grace period\n"
     "  --hook-sidecars N             0 only\n"
     "  --vmm-binary PATH             the VMM (tests: the VMM double)\n"
     "  --state-dir DIR  --log-level LEVEL  --log-file PATH  --seccomp enforce|log|off  --accel auto|kvm|tcg\n"
     "  --access-credentials-batch-ms N   how long Secret changes are batched (KubeVirt's 15000; tests shorten it)\n"
     "  other virt-launcher flags (--qemu-timeout, --ovmf-path, --allow-emulation, …) are accepted; unknown ones are logged.\n"
     "  STANDALONE_VMI (YAML or JSON) in the environment syncs that VMI at start.\n"
     "  exit: the VM's (as `run`: 0 clean, 3 crashed, 4 forced off); 2 bad flags; 1 the server could not start.",
     run});

}  // namespace

// The entry point of libchl-kubevirt.so (module.hpp). Built only into the module.
#include "kubevirt/module.hpp"

#include "kubevirt/virt_launcher_main.hpp"

extern "C" __attribute__((visibility("default"))) const chl::kubevirt::KubevirtModuleApi chl_kubevirt_module = {
    chl::kubevirt::kKubevirtModuleAbi,
    sizeof(chl::launcher::LaunchOptions),
    sizeof(chl::launcher::LaunchHooks),
    &chl::kubevirt::virt_launcher_main,
};

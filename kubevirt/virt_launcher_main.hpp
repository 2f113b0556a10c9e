#pragma once
// virt-launcher mode (docs/kubevirt/protocol.md): virt-launcher's flags, KubeVirt's command server
// and notify client, and a launch through `run_launch` (the executable's run_launcher) for the
// first Sync it can serve. Returns the process exit code.
#include <string>
#include <vector>

#include "launcher/launch_hooks.hpp"

namespace chl::kubevirt {

int virt_launcher_main(const std::vector<std::string>& argv, const launcher::RunLaunch& run_launch);

}  // namespace chl::kubevirt

#pragma once
// `ch-launcher run`: read and check the VMI, lock its state directory, plan and prepare what
// it needs, start the VMM and keep the VM alive until it ends. Returns the exit code
// (launch_options.hpp).
#include <string>

#include "launcher/launch_hooks.hpp"
#include "launcher/launch_options.hpp"

namespace chl::cli {

using launcher::LaunchHooks;

int run_launcher(const launcher::LaunchOptions& opts, const LaunchHooks& hooks = {});

// Where the command and console sockets are for a state directory (or in KubeVirt's pod
// layout for a VMI uid).
std::filesystem::path launcher_socket_path(const std::filesystem::path& state_dir, bool pod_layout);
std::filesystem::path console_socket_path(const std::filesystem::path& state_dir, bool pod_layout,
                                          const std::string& uid);

}  // namespace chl::cli

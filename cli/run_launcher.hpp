#pragma once
// `ch-launcher run`: read and check the VMI, lock its state directory, plan and prepare what
// it needs, start the VMM and keep the VM alive until it ends. Returns the exit code
// (launch_options.hpp).
#include <functional>
#include <optional>
#include <string>

#include "launcher/launch_options.hpp"
#include "vmi/validator.hpp"

namespace chl::launcher {
class LauncherService;
}

namespace chl::cli {

// What another transport (virt-launcher mode, cli/virt_launcher.cpp) hooks into a launch.
struct LaunchHooks {
  // The VMI's text (YAML or JSON) instead of reading opts.vmi_path.
  std::optional<std::string> vmi_text;
  // The launch failed before the VM ran: the message ("spec.x: reason" lines for a refusal)
  // and the exit code run_launcher returns. Not called once on_service was.
  std::function<void(const std::string& message, int code)> on_failure;
  // The service exists and is about to run: attach transports (called on the main thread,
  // before the io_context runs).
  std::function<void(launcher::LauncherService& service, const vmi::CheckedVmi& vmi)> on_service;
  // The service has run to its end (the VM is gone), before the launcher's files are removed.
  std::function<void(int code)> on_finished;
};

int run_launcher(const launcher::LaunchOptions& opts, const LaunchHooks& hooks = {});

// Where the command and console sockets are for a state directory (or in KubeVirt's pod
// layout for a VMI uid).
std::filesystem::path launcher_socket_path(const std::filesystem::path& state_dir, bool pod_layout);
std::filesystem::path console_socket_path(const std::filesystem::path& state_dir, bool pod_layout,
                                          const std::string& uid);

}  // namespace chl::cli

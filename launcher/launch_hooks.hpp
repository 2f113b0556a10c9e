#pragma once
// What another transport hooks into a launch (virt-launcher mode: kubevirt/virt_launcher_main.cpp
// through cli/run_launcher.cpp): the VMI's text instead of a file, and callbacks at the points
// where a transport must act.
#include <functional>
#include <optional>
#include <string>

#include "launcher/launch_options.hpp"
#include "vmi/validator.hpp"

namespace chl::launcher {

class LauncherService;

struct LaunchHooks {
  // The VMI's text (YAML or JSON) instead of reading LaunchOptions::vmi_path.
  std::optional<std::string> vmi_text;
  // The launch failed before the VM ran: the message ("spec.x: reason" lines for a refusal)
  // and the exit code the launch returns. Not called once on_service was.
  std::function<void(const std::string& message, int code)> on_failure;
  // The service exists and is about to run: attach transports (called on the launching thread,
  // before the io_context runs).
  std::function<void(LauncherService& service, const vmi::CheckedVmi& vmi)> on_service;
  // The service has run to its end (the VM is gone), before the launcher's files are removed.
  std::function<void(int code)> on_finished;
};

// A launch as `run` does it (cli/run_launcher.cpp), handed to the transports that need one.
using RunLaunch = std::function<int(const LaunchOptions& opts, const LaunchHooks& hooks)>;

}  // namespace chl::launcher

#pragma once
// virt-launcher mode as a module: libchl-kubevirt.so holds KubeVirt's protocol (the HTTP/2
// transport, protobuf-lite messages, the command server, the notify client, the adapter over
// LauncherService) and is the only thing that links libnghttp2 and libprotobuf-lite.
// `ch-launcher virt-launcher` loads it (cli/virt_launcher.cpp); `run` never maps it.
//
// This header is the contract between the two. As with libchl-libvirt.so, the module resolves
// the launcher's own symbols (logging, LauncherService, the validator…) from the executable,
// and C++ types cross the boundary: `abi` and the sizes are checked before anything else in it
// is used.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "launcher/launch_hooks.hpp"

namespace chl::kubevirt {

// Bump when anything below, or a type it uses, changes in a way an older module would misread.
inline constexpr std::uint32_t kKubevirtModuleAbi = 2;  // 2: LaunchOptions::network_phase1
inline constexpr char kKubevirtModuleFile[] = "libchl-kubevirt.so";
inline constexpr char kKubevirtModuleSymbol[] = "chl_kubevirt_module";

struct KubevirtModuleApi {
  std::uint32_t abi;           // kKubevirtModuleAbi of the build the module comes from
  std::size_t options_size;    // sizeof(launcher::LaunchOptions) there
  std::size_t hooks_size;      // sizeof(launcher::LaunchHooks) there
  // virt_launcher_main (virt_launcher_main.hpp).
  int (*main)(const std::vector<std::string>& argv, const launcher::RunLaunch& run_launch);
};

}  // namespace chl::kubevirt

// The one symbol the module exports (looked up by kKubevirtModuleSymbol).
extern "C" const chl::kubevirt::KubevirtModuleApi chl_kubevirt_module;

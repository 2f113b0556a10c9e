#pragma once
// Which VMM binary a launch runs, and whether it is one. The container image ships a
// placeholder in place of Cloud Hypervisor when it was built without one (Dockerfile, stage
// `vmm`; image/vmm/placeholder-vmm.sh): the launcher says so at start and refuses to launch with
// it, naming the file, instead of failing later on what the placeholder prints.
#include <filesystem>
#include <optional>
#include <string>

namespace chl::launcher {

// The marker on the placeholder's second line.
inline constexpr const char* kPlaceholderVmmMarker = "ch-launcher-placeholder-vmm";

// The path of the Cloud Hypervisor binary a launch would run: `configured` (--vmm-binary); else
// cloud-hypervisor beside the running launcher (its own directory, /proc/self/exe: the bundle's
// bin/, docs/deploy.md), then in PATH; nullopt when there is none.
std::optional<std::string> cloud_hypervisor_binary(const std::string& configured);
// The same with the launcher's directory given (nullopt: unknown, PATH alone).
std::optional<std::string> cloud_hypervisor_binary(const std::string& configured,
                                                   const std::optional<std::filesystem::path>& own_dir);

// True when `path` is the image's placeholder (its first 512 bytes hold the marker).
bool is_placeholder_vmm(const std::string& path);

// What to say of `path` when it is the placeholder: "" when it is a real binary.
std::string placeholder_vmm_message(const std::string& path);

// Cloud Hypervisor needs /dev/kvm (or /dev/mshv) read-write and exits at start without it. ""
// when one opens; else what to say, naming the device and the pod's request that brings it.
std::string cloud_hypervisor_device_error();

}  // namespace chl::launcher

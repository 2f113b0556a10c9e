#include "launcher/vmm_binary.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "common/child_process.hpp"
#include "common/module_loader.hpp"
#include "common/unique_fd.hpp"

namespace chl::launcher {

std::optional<std::string> cloud_hypervisor_binary(const std::string& configured,
                                                   const std::optional<std::filesystem::path>& own_dir) {
  if (!configured.empty()) return common::find_program(configured);
  if (own_dir && !own_dir->empty()) {
    if (auto beside = common::find_program((*own_dir / "cloud-hypervisor").string())) return beside;
  }
  return common::find_program("cloud-hypervisor");
}

std::optional<std::string> cloud_hypervisor_binary(const std::string& configured) {
  return cloud_hypervisor_binary(configured, common::own_directory());
}

bool is_placeholder_vmm(const std::string& path) {
  common::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  char head[512];
  ssize_t n = ::read(fd.get(), head, sizeof head);
  if (n <= 0) return false;
  return std::string_view(head, static_cast<std::size_t>(n)).find(kPlaceholderVmmMarker) != std::string_view::npos;
}

std::string placeholder_vmm_message(const std::string& path) {
  if (!is_placeholder_vmm(path)) return "";
  return path + " is ch-launcher's placeholder, not Cloud Hypervisor: this image has no real VMM (it was built "
                "without one; docs/deploy.md says how to build it with one, or mount one there)";
}

std::string cloud_hypervisor_device_error() {
  std::string why;
  for (const char* dev : {"/dev/kvm", "/dev/mshv"}) {
    common::UniqueFd fd(::open(dev, O_RDWR | O_CLOEXEC));
    if (fd) return "";
    if (why.empty()) why = std::string(dev) + ": " + std::strerror(errno);
  }
  return "Cloud Hypervisor needs /dev/kvm (or /dev/mshv), readable and writable by the launcher's user: " + why +
         " (in KubeVirt the pod requests devices.kubevirt.io/kvm)";
}

}  // namespace chl::launcher

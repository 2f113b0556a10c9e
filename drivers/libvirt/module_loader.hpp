#pragma once
// Loading libchl-libvirt.so (module.hpp) for a VMI that asks for qemu-kvm: the launcher itself
// never links libvirt0. The generic part (finding, dlopen, the ABI error) is common/module_loader.
#include <filesystem>
#include <vector>

#include "common/error.hpp"
#include "common/module_loader.hpp"
#include "drivers/libvirt/module.hpp"

namespace chl::libvirt {

// libchl-libvirt.so's candidates ($CHL_LIBVIRT_MODULE, else beside the executable, then
// ../lib/ch-launcher/).
std::vector<std::filesystem::path> libvirt_module_candidates();

struct LibvirtModule {
  common::SharedLibrary library;
  const LibvirtModuleApi* api = nullptr;  // inside `library`: valid while it is loaded
};

// Load the first candidate that exists and check that it is from this build (ABI). The error
// says what to do: "qemu-kvm support is not installed: libchl-libvirt.so not found in …",
// or dlopen's own text for a module that is there but cannot be loaded.
common::Result<LibvirtModule> load_libvirt_module();

}  // namespace chl::libvirt

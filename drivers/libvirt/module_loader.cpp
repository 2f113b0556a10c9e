#include "drivers/libvirt/module_loader.hpp"

#include <string>
#include <system_error>

#include "common/log.hpp"

namespace chl::libvirt {
using common::fail;

std::vector<std::filesystem::path> libvirt_module_candidates() {
  return common::module_candidates(kLibvirtModuleFile, "CHL_LIBVIRT_MODULE");
}

common::Result<LibvirtModule> load_libvirt_module() {
  const std::string what = "qemu-kvm support";
  CHL_TRY(auto m, common::find_module(kLibvirtModuleFile, "CHL_LIBVIRT_MODULE", kLibvirtModuleSymbol, what));
  const auto* api = static_cast<const LibvirtModuleApi*>(m.api);
  if (api->abi != kLibvirtModuleAbi || api->options_size != sizeof(LibvirtDriverOptions) || !api->create_driver)
    return fail(std::errc::executable_format_error,
                common::module_from_other_build(
                    what, m.path,
                    "module ABI " + std::to_string(api->abi) + ", options size " + std::to_string(api->options_size),
                    std::to_string(kLibvirtModuleAbi) + ", " + std::to_string(sizeof(LibvirtDriverOptions))));
  CHL_LOG_DEBUG("qemu-kvm support: loaded {}", m.path.string());
  return LibvirtModule{std::move(m.library), api};
}

}  // namespace chl::libvirt

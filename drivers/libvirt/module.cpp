// The entry point of libchl-libvirt.so (libvirt_module.hpp). Built only into the module and the
// chl_libvirt static library, never into chl_libvirt_domain.
#include "drivers/libvirt/module.hpp"

#include "drivers/libvirt/daemon.hpp"
#include "drivers/libvirt/libvirt_driver.hpp"

namespace chl::libvirt {
namespace {

common::Result<LibvirtLaunch> create_driver(boost::asio::io_context& io, LibvirtDriverOptions options) {
  // Root: qemu:///system. Another uid (KubeVirt's non-root launcher): libvirt's session daemon.
  auto dopts = daemon_options_for_user();
  if (!dopts) return tl::unexpected(dopts.error().wrap("libvirt"));
  if (dopts->session) {
    options.uri = connect_uri(*dopts);
    options.qemu_pid_dir = qemu_pid_dir(*dopts);
  }
  options.daemon_socket = dopts->libvirtd_socket;
  auto daemons = LibvirtDaemons::ensure(*dopts);
  if (!daemons) return tl::unexpected(daemons.error().wrap("libvirt"));
  if (!options.taps.empty()) {
    if (auto st = check_daemon_network_namespace(dopts->libvirtd_socket, options.taps); !st)
      return tl::unexpected(st.error().wrap("libvirt"));
  }
  LibvirtLaunch out;
  out.daemon = daemons->describe();
  options.daemon = out.daemon;
  out.driver = std::make_unique<LibvirtDriver>(io, std::move(options), std::move(*daemons));
  return out;
}

}  // namespace
}  // namespace chl::libvirt

extern "C" __attribute__((visibility("default"))) const chl::libvirt::LibvirtModuleApi chl_libvirt_module = {
    chl::libvirt::kLibvirtModuleAbi,
    sizeof(chl::libvirt::LibvirtDriverOptions),
    &chl::libvirt::create_driver,
};

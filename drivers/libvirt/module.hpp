#pragma once
// The QEMU/KVM path as a module: libchl-libvirt.so holds the libvirt driver, the libvirt daemon
// handling and everything else that needs libvirt (libvirt_*.cpp), and is the only thing that
// links libvirt0 (and its ~60 libraries). `ch-launcher` loads it (module_loader.hpp) only when
// a VMI asks for `spec.hypervisor: qemu-kvm`; the Cloud Hypervisor path never maps it.
//
// This header is the contract between the two, included by both and free of libvirt headers.
// The module resolves the launcher's own symbols (logging, Error, the event tracker…) from the
// executable, which exports them: there is one logger and one copy of everything. C++ types
// cross the boundary, so the module must come from the same build as the executable: `abi`
// and `options_size` are checked before anything else in the module is used.
#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "launcher/driver.hpp"
#include "drivers/libvirt/driver_options.hpp"
#include "common/error.hpp"

namespace chl::libvirt {

// Bump when anything below, or a type it uses, changes in a way an older module would misread.
// 3: Driver::resize, 4: Driver::abandon, 5: Driver::agent_transport, 6: live migration,
// 7: Driver::acpi_reboot
inline constexpr std::uint32_t kLibvirtModuleAbi = 7;
inline constexpr char kLibvirtModuleFile[] = "libchl-libvirt.so";
inline constexpr char kLibvirtModuleSymbol[] = "chl_libvirt_module";

// What the module's create_driver gives back.
struct LibvirtLaunch {
  std::unique_ptr<launcher::Driver> driver;  // a LibvirtDriver, which owns the daemons it uses
  std::string daemon;              // which libvirtd: "host libvirtd (pid N)"…
};

struct LibvirtModuleApi {
  std::uint32_t abi;         // kLibvirtModuleAbi of the build the module comes from
  std::size_t options_size;  // sizeof(LibvirtDriverOptions) there
  // Make sure a libvirtd answers (LibvirtDaemons::ensure: the host's, or one started for the
  // launchers; blocks up to a minute) and create the driver for `options` (options.daemon is
  // filled in). The driver releases the daemons when it is destroyed; the module must stay
  // loaded until then, and until `io` has dropped every handler the driver posted.
  common::Result<LibvirtLaunch> (*create_driver)(boost::asio::io_context& io,
                                                 LibvirtDriverOptions options);
};

}  // namespace chl::libvirt

// The one symbol the module exports (looked up by kLibvirtModuleSymbol).
extern "C" const chl::libvirt::LibvirtModuleApi chl_libvirt_module;

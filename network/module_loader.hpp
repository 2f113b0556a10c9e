#pragma once
// Loading libchl-network.so (network_module.hpp) for a VMI with interfaces to wire: a VMI without
// any never maps libnl-route-3 and libnftables. The generic part is common/module_loader.
#include "common/error.hpp"
#include "common/module_loader.hpp"
#include "network/network_module.hpp"

namespace chl::network {

struct NetworkModule {
  common::SharedLibrary library;
  const NetworkModuleApi* api = nullptr;  // inside `library`: valid while it is loaded
};

// $CHL_NETWORK_MODULE, else beside the executable, then ../lib/ch-launcher/: "pod networking
// support is not installed: libchl-network.so not found in …", "pod networking support is
// broken: …".
common::Result<NetworkModule> load_network_module();

}  // namespace chl::network

#include "network/module_loader.hpp"

#include <string>
#include <system_error>

#include "common/log.hpp"

namespace chl::network {
using common::fail;

common::Result<NetworkModule> load_network_module() {
  const std::string what = "pod networking support";
  CHL_TRY(auto m, common::find_module(kNetworkModuleFile, "CHL_NETWORK_MODULE", kNetworkModuleSymbol, what));
  const auto* api = static_cast<const NetworkModuleApi*>(m.api);
  const auto sizes = [](std::size_t plan, std::size_t facts, std::size_t iface) {
    return std::to_string(plan) + "/" + std::to_string(facts) + "/" + std::to_string(iface);
  };
  if (api->abi != kNetworkModuleAbi || api->plan_size != sizeof(NetworkPlan) || api->facts_size != sizeof(PodFacts) ||
      api->interface_size != sizeof(WiredInterface) || !api->discover_pod || !api->wire_pod_network)
    return fail(std::errc::executable_format_error,
                common::module_from_other_build(
                    what, m.path,
                    "module ABI " + std::to_string(api->abi) + ", sizes " +
                        sizes(api->plan_size, api->facts_size, api->interface_size),
                    std::to_string(kNetworkModuleAbi) + ", " +
                        sizes(sizeof(NetworkPlan), sizeof(PodFacts), sizeof(WiredInterface))));
  CHL_LOG_DEBUG("pod networking support: loaded {}", m.path.string());
  return NetworkModule{std::move(m.library), api};
}

}  // namespace chl::network

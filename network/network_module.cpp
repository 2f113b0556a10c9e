// The entry point of libchl-network.so (network_module.hpp). Built only into the module and the
// chl_network_wire static library, never into ch-launcher itself.
#include "network/network_module.hpp"

extern "C" __attribute__((visibility("default"))) const chl::network::NetworkModuleApi chl_network_module = {
    chl::network::kNetworkModuleAbi,
    sizeof(chl::network::NetworkPlan),
    sizeof(chl::network::PodFacts),
    sizeof(chl::network::WiredInterface),
    &chl::network::discover_pod,
    &chl::network::wire_pod_network,
};

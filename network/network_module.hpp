#pragma once
// Pod networking as a module: libchl-network.so holds the code that needs libnl-route-3 and
// libnftables (wire.cpp, netlink.cpp, nft_ruleset.cpp) and is the only thing that links them
// (with libnl-3, libnftnl, libmnl, libgmp, libjansson, libxtables: ~1.1 MiB of the launcher's
// RSS once mapped and relocated). `ch-launcher run` loads it (network/module_loader.hpp) only
// for a VMI with interfaces to wire, and only in its short-lived phase 1 child
// (network/phase1_child.hpp): a running launcher never maps those libraries.
//
// This header is the contract between the two, included by both and free of libnl/libnftables
// headers. As with libchl-libvirt.so, the module resolves the launcher's own symbols (logging,
// Error, the DHCP servers, the plan types…) from the executable, which exports them, and C++
// types cross the boundary: the module must come from the same build, which `abi` and the
// sizes are checked against before anything else in it is used.
#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "network/plan.hpp"
#include "network/wire.hpp"

namespace chl::network {

// Bump when anything below, or a type it uses, changes in a way an older module would misread.
inline constexpr std::uint32_t kNetworkModuleAbi = 1;
inline constexpr char kNetworkModuleFile[] = "libchl-network.so";
inline constexpr char kNetworkModuleSymbol[] = "chl_network_module";

struct NetworkModuleApi {
  std::uint32_t abi;            // kNetworkModuleAbi of the build the module comes from
  std::size_t plan_size;        // sizeof(NetworkPlan) there
  std::size_t facts_size;       // sizeof(PodFacts) there
  std::size_t interface_size;   // sizeof(WiredInterface) there
  // discover_pod and wire_pod_network of wire.hpp. The WiredNetwork's code lives in the module:
  // it must stay loaded until the WiredNetwork is destroyed and `io` has dropped every handler
  // its servers posted.
  common::Result<PodFacts> (*discover_pod)(const std::string& resolv_conf);
  common::Result<std::unique_ptr<WiredNetwork>> (*wire_pod_network)(const std::vector<NetworkPlan>& plans,
                                                                    boost::asio::io_context* io);
};

}  // namespace chl::network

// The one symbol the module exports (looked up by kNetworkModuleSymbol).
extern "C" const chl::network::NetworkModuleApi chl_network_module;

#pragma once
// Removing what phase 1 (wire.cpp) made in the pod, with no library: plain rtnetlink and
// nfnetlink messages on two netlink sockets opened at wiring time, in the pod's namespace.
//
// Why not libnl-route-3 and libnftables, which made the devices: the teardown runs when the VM
// is gone, long after wiring, in a launcher that keeps nothing of the wiring mapped
// (`ch-launcher run` wires in a short-lived child, network/phase1_child.hpp, so libnl,
// libnftables and libchl-network.so are never in the launcher once the VM runs), and under the
// launcher's seccomp filter, which refuses new non-Unix sockets and new processes. What the
// teardown needs is therefore two already-open sockets and the plans as data. The module's own
// WiredNetwork (`network up`, tests) uses the same teardown: one implementation.
//
// What it does (run(plans), every step attempted, the first error returned):
//   1. delete table inet ch_launcher (absent: fine);
//   2. per plan, last first: delete the tap; for a bridge binding give the pod interface back
//      (released from the bridge, its address and routes re-added; an existing one is fine);
//      delete the bridge. A link already gone counts as deleted.
#include <vector>

#include "common/error.hpp"
#include "common/unique_fd.hpp"
#include "network/plan.hpp"

namespace chl::network {

class PodTeardown {
 public:
  // Opens a NETLINK_ROUTE and a NETLINK_NETFILTER socket in the calling thread's network
  // namespace (needs no capability to open; the messages need NET_ADMIN there).
  static common::Result<PodTeardown> open();

  common::Status run(const std::vector<NetworkPlan>& plans);

 private:
  PodTeardown(common::UniqueFd route, common::UniqueFd netfilter)
      : route_(std::move(route)), netfilter_(std::move(netfilter)) {}
  common::UniqueFd route_;
  common::UniqueFd netfilter_;
  std::uint32_t seq_ = 1;
};

}  // namespace chl::network

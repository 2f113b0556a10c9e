#pragma once
// `ch-launcher run` wires the pod network itself (phase 1 as well as phase 2, docs/network/phases.md),
// but keeps nothing of the wiring resident: phase 1 runs in a short-lived child process.
//
//   wire_in_child  forks; the child loads libchl-network.so (libnl-route-3, libnftables...),
//                  reads the pod (discover_pod), plans, wires the bridges, persistent taps,
//                  nftables table and sysctls (wire_pod_network without servers), leaves them in
//                  place and exits, handing back on a pipe the pod facts it planned from (or the
//                  error). The launcher never maps the module, so nothing of it (code, relocated
//                  data, libnl's caches, libnftables' heap) stays once the VM runs.
//   then           the launcher plans again from those facts (plan_networks is pure: the same
//                  plans), does phase 2 exactly as virt-launcher mode does (attach_pod_network:
//                  attach to the taps, DHCP, plus router advertisements since it owns the
//                  bridge), and owns what the child made through own_pod_network, whose
//                  teardown removes it with PodTeardown (plain netlink on sockets opened now,
//                  before the seccomp sandbox; pod_teardown.hpp).
//
// The fork happens before the launcher starts any thread (the VMM, the event loop and the
// drivers come later), so the child may load libraries and allocate freely; it leaves with
// _exit, running no destructor of the launcher's.
#include <memory>
#include <map>
#include <string>

#include "common/error.hpp"
#include "network/plan.hpp"
#include "network/pod_teardown.hpp"
#include "network/wire.hpp"
#include "vmi/vmi.hpp"

namespace chl::network {

struct Phase1Options {
  std::string resolv_conf = "/etc/resolv.conf";
  // Wire even in the host's own network namespace (network/host_namespace.hpp).
  bool allow_host_network = false;
  // The SR-IOV VFs the launcher passes through, by network name (PodFacts::sriov_vf_pci).
  std::map<std::string, std::string> sriov_vf_pci;
};

// Phase 1 in a child process (above). Errors, as the child saw them: the module missing or
// broken ("pod networking support is not installed: …"), the host's namespace refused, the
// discovery or the wiring failed ("wiring interface default: bridge k6t-eth0: …"); or the child
// died ("the wiring process (pid N) ended without an answer: killed by SIGKILL"). With
// refusals from plan_networks nothing is wired, and the facts come back so that the caller
// finds and reports the same refusals.
common::Result<PodFacts> wire_in_child(const vmi::Vmi& vmi, const Phase1Options& options = {});

// `attached` (phase 2 on devices this launcher made) owning them: its teardown closes phase 2's
// fds and sockets, then removes the devices and the nftables table with `teardown`.
std::unique_ptr<WiredNetwork> own_pod_network(std::unique_ptr<WiredNetwork> attached,
                                              PodTeardown teardown);

}  // namespace chl::network

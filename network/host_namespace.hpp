#pragma once
// Is this the host's own network namespace? `run` wires the pod network (bridge, tap, nftables
// NAT, DHCP) in the namespace it runs in, which is right in a pod and wrong on a workstation:
// there it would rewire the host for the VM's life. A launcher is in the host's namespace when
// its PID namespace is the initial one (a pod has its own) and its network namespace is the
// kernel threads' (kthreadd's, else PID 1's).
#include "common/error.hpp"

namespace chl::network {

// true: the host's network namespace (or it cannot tell: /proc/1/ns/net unreadable from the
// initial PID namespace); false: a namespace of its own (a pod, `ip netns exec`, a container).
bool in_host_network_namespace();

}  // namespace chl::network

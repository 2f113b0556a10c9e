#pragma once
// Handing a wired interface to the hypervisor.
//   Cloud Hypervisor: vm.add-net with ch_net_config(w) as the body and w.tap_fds (one per queue
//     pair) as SCM_RIGHTS — vmm_api::Client::vm_add_net(ch_net_config(w), tap_fd_numbers(w)).
//     Cold-add after vm.create and before vm.boot (CH takes no fds on vm.create). CH keeps its
//     own copies; the launcher may close its fds afterwards (the tap is persistent).
//   QEMU through libvirt: libvirt_interface_xml(w, model) in <devices>: libvirt opens the
//     existing tap by name (managed='no' leaves it alone), so it needs no fd.
#include <string>
#include <vector>

#include "network/wire.hpp"
#include "vmm_api/types.hpp"

namespace chl::network {

// id "net-<interface name>" (CH device ids must be unique in the VM), the guest MAC, MTU and
// num_queues = 2 * queue pairs; no `tap` (the fds say which tap).
vmm_api::NetConfig ch_net_config(const WiredInterface& w);
std::vector<int> tap_fd_numbers(const WiredInterface& w);
// <interface type='ethernet'> with <target dev='tap0' managed='no'/>, the MAC, MTU, model
// ("virtio" when empty) and <driver queues='N'/> when multiqueue.
std::string libvirt_interface_xml(const WiredInterface& w, const std::string& model);

}  // namespace chl::network

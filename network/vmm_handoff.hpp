#pragma once
// Handing a wired interface to the hypervisor.
//   Cloud Hypervisor: vm.add-net with ch_net_config(w) as the body and w.tap_fds (one per queue
//     pair) as SCM_RIGHTS — vmm_api::Client::vm_add_net(ch_net_config(w), tap_fd_numbers(w)).
//     Cold-add after vm.create and before vm.boot (CH takes no fds on vm.create). CH keeps its
//     own copies; the launcher may close its fds afterwards (the tap is persistent).
//   QEMU through libvirt: libvirt_interface_xml(...) in <devices>: libvirt opens the existing
//     tap by name (managed='no': it neither creates nor deletes it), so it needs no fd — close
//     the launcher's (w.tap_fds.clear()) first: a single-queue tap takes one attached fd only,
//     and libvirt's TUNSETIFF would get EBUSY. The tap is persistent, so it stays.
#include <string>
#include <vector>

#include "network/wire.hpp"
#include "vmm_api/types.hpp"

namespace chl::network {

// id "net-<interface name>" (CH device ids must be unique in the VM), the guest MAC and
// num_queues = 2 * queue pairs; no `tap` (the fds say which tap) and no `mtu` (CH would set the
// tap's MTU, which needs CAP_NET_ADMIN; the tap has the pod's MTU already and CH reads it).
vmm_api::NetConfig ch_net_config(const WiredInterface& w);
std::vector<int> tap_fd_numbers(const WiredInterface& w);
// The same NIC given by tap name (`tap`, no fds): CH v52 opens the tap itself (net_util
// open_tap: TUNSETIFF on the tap owned by 107, SIOCGIFHWADDR, SIOCGIFFLAGS on a tap that is up,
// TUNSETVNETHDRSZ: no capability needed), and so can a live migration's target, which CH v52
// gives no fds (NetConfig.fds arrive as -1). The launcher closes its own fds on the tap first
// (w.tap_fds.clear()): a single-queue tap takes one attached fd only (TUNSETIFF: EBUSY).
vmm_api::NetConfig ch_net_config_by_name(const WiredInterface& w);
// What a libvirt <interface type='ethernet'> on an existing tap says (the domain XML renders
// the launch plan's NICs through it: one writer of this element).
struct LibvirtNic {
  std::string tap;           // <target dev='tap0' managed='no'/>
  std::string mac;           // "02:..."; "" = libvirt picks one
  std::string model;         // "" = virtio
  std::uint32_t mtu = 0;     // 0 = no <mtu> (libvirt/QEMU default)
  std::uint32_t queues = 1;  // queue pairs; <driver queues='N'/> when > 1 (virtio only)
  std::string alias;         // <alias name='ua-default'/> (KubeVirt's user alias); "" = none
  std::uint32_t boot_order = 0;  // <boot order='N'/> (network boot, the firmware's PXE); 0 = none
  std::string pci_address;       // "0000:00:0a.0" -> <address type='pci' .../>; "" = libvirt's choice
};
// The element, indented for <devices>; attribute values escaped.
std::string libvirt_interface_xml(const LibvirtNic& nic);
// A validated pciAddress ("0000:00:0a.0", domain:bus:slot.function) as libvirt's
// <address type='pci' domain='0x0000' bus='0x00' slot='0x0a' function='0x0'/>; "" if malformed.
std::string pci_address_xml(const std::string& dbsf);
// The same for a wired interface: its tap, MAC, MTU and queue pairs, alias "ua-<interface>".
LibvirtNic libvirt_nic(const WiredInterface& w, const std::string& model);
std::string libvirt_interface_xml(const WiredInterface& w, const std::string& model);

}  // namespace chl::network

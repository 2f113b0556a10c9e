#include "network/vmm_handoff.hpp"

#include <algorithm>
#include <sstream>

#include "common/xml_escape.hpp"

namespace chl::network {

vmm_api::NetConfig ch_net_config(const WiredInterface& w) {
  vmm_api::NetConfig n;
  n.id = "net-" + w.iface_name;
  n.mac = format_mac(w.mac);
  // No `mtu`: CH v52 sets the tap's MTU (SIOCSIFMTU, CAP_NET_ADMIN) whenever the config has
  // one (virtio-devices/src/net.rs Net::from_tap_fds, net_util/src/open_tap.rs), which a VMM
  // running as uid 107 without capabilities (virt-launcher mode) may not do. The tap already has
  // the pod's MTU (phase 1 set it), CH reads it (SIOCGIFMTU, Net::new_with_tap) and offers it to
  // the guest as VIRTIO_NET_F_MTU, and our DHCP/RA tell it too.
  n.num_queues = 2 * w.queues;  // CH counts RX and TX queues
  return n;
}

vmm_api::NetConfig ch_net_config_by_name(const WiredInterface& w) {
  vmm_api::NetConfig n = ch_net_config(w);
  n.tap = w.tap;
  return n;
}

std::vector<int> tap_fd_numbers(const WiredInterface& w) {
  std::vector<int> fds;
  for (const auto& fd : w.tap_fds) fds.push_back(fd.get());
  return fds;
}

std::string pci_address_xml(const std::string& dbsf) {
  // KubeVirt's device.NewPciAddressField (pkg/virt-launcher/virtwrap/device/pciaddress.go).
  if (dbsf.size() != 12) return "";
  return "<address type='pci' domain='0x" + common::xml_escape(dbsf.substr(0, 4)) + "' bus='0x" +
         common::xml_escape(dbsf.substr(5, 2)) + "' slot='0x" + common::xml_escape(dbsf.substr(8, 2)) +
         "' function='0x" + common::xml_escape(dbsf.substr(11, 1)) + "'/>";
}

std::string libvirt_interface_xml(const LibvirtNic& nic) {
  const std::string model = nic.model.empty() ? "virtio" : nic.model;
  std::ostringstream x;
  x << "    <interface type='ethernet'>\n";
  if (!nic.mac.empty()) x << "      <mac address='" << common::xml_escape(nic.mac) << "'/>\n";
  x << "      <target dev='" << common::xml_escape(nic.tap) << "' managed='no'/>\n"
    << "      <model type='" << common::xml_escape(model) << "'/>\n";
  // No driver name: libvirt takes vhost-net when it can (KVM) and QEMU's userspace backend
  // otherwise (TCG), where name='vhost' would be refused.
  if (nic.queues > 1 && (model == "virtio" || model == "virtio-transitional"))
    x << "      <driver queues='" << nic.queues << "'/>\n";
  if (nic.mtu > 0) x << "      <mtu size='" << nic.mtu << "'/>\n";
  if (nic.boot_order > 0) x << "      <boot order='" << nic.boot_order << "'/>\n";
  if (!nic.pci_address.empty()) x << "      " << pci_address_xml(nic.pci_address) << "\n";
  if (!nic.alias.empty()) x << "      <alias name='" << common::xml_escape(nic.alias) << "'/>\n";
  x << "    </interface>\n";
  return x.str();
}

LibvirtNic libvirt_nic(const WiredInterface& w, const std::string& model) {
  LibvirtNic n;
  n.tap = w.tap;
  n.mac = format_mac(w.mac);
  n.model = model;
  n.mtu = w.mtu;
  n.queues = w.queues;
  n.alias = "ua-" + w.iface_name;
  return n;
}

std::string libvirt_interface_xml(const WiredInterface& w, const std::string& model) {
  return libvirt_interface_xml(libvirt_nic(w, model));
}

}  // namespace chl::network

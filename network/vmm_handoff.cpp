#include "network/vmm_handoff.hpp"

#include <algorithm>
#include <sstream>

namespace chl::network {

vmm_api::NetConfig ch_net_config(const WiredInterface& w) {
  vmm_api::NetConfig n;
  n.id = "net-" + w.iface_name;
  n.mac = format_mac(w.mac);
  n.mtu = static_cast<std::uint16_t>(std::min<std::uint32_t>(w.mtu, 65535));
  n.num_queues = 2 * w.queues;  // CH counts RX and TX queues
  return n;
}

std::vector<int> tap_fd_numbers(const WiredInterface& w) {
  std::vector<int> fds;
  for (const auto& fd : w.tap_fds) fds.push_back(fd.get());
  return fds;
}

std::string libvirt_interface_xml(const WiredInterface& w, const std::string& model) {
  std::ostringstream x;
  x << "    <interface type='ethernet'>\n"
    << "      <mac address='" << format_mac(w.mac) << "'/>\n"
    << "      <target dev='" << w.tap << "' managed='no'/>\n"
    << "      <model type='" << (model.empty() ? "virtio" : model) << "'/>\n"
    << "      <mtu size='" << w.mtu << "'/>\n";
  if (w.queues > 1) x << "      <driver name='vhost' queues='" << w.queues << "'/>\n";
  x << "    </interface>\n";
  return x.str();
}

}  // namespace chl::network

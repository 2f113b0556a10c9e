#pragma once
// The in-process DHCPv6 server of one masquerade bridge (dhcp6_packet.hpp decides the answers):
// a UDP socket on [::]:547 bound to the bridge (SO_BINDTODEVICE), in the All_DHCP_Relay_Agents_
// and_Servers group ff02::1:2 there, on the caller's io_context; answers go back to the client's
// link-local address, port 546. One answer in flight; a request arriving meanwhile is dropped
// (the client retransmits).
#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/udp.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "network/dhcp6_packet.hpp"

namespace chl::network {

class Dhcp6Server {
 public:
  static common::Result<std::unique_ptr<Dhcp6Server>> start(boost::asio::io_context& io,
                                                            const std::string& bridge,
                                                            const Dhcp6Lease& lease);
  Dhcp6Server(const Dhcp6Server&) = delete;
  Dhcp6Server& operator=(const Dhcp6Server&) = delete;
  ~Dhcp6Server();

  [[nodiscard]] std::uint64_t answered() const { return answered_; }

 private:
  Dhcp6Server(boost::asio::io_context& io, Dhcp6Lease lease);
  void receive();
  boost::asio::ip::udp::socket socket_;
  Dhcp6Lease lease_;
  Mac server_mac_{};
  std::string bridge_;
  std::array<std::uint8_t, 1500> in_{};
  std::vector<std::uint8_t> out_;
  bool sending_ = false;
  boost::asio::ip::udp::endpoint from_;
  std::uint64_t answered_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// The MAC of link `name` (SIOCGIFHWADDR).
common::Result<Mac> link_mac(const std::string& name);

}  // namespace chl::network

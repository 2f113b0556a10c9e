#pragma once
// The in-process DHCPv4 server of one bridge: a UDP socket on port 67 bound to the bridge
// (SO_BINDTODEVICE), on the caller's io_context, answering the guest's MAC only (dhcp_answer).
// Replies are broadcast to 255.255.255.255:68 on the bridge (the client has no address yet).
// One reply in flight; a request arriving meanwhile is dropped (the client retransmits).
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/udp.hpp>

#include "common/error.hpp"
#include "network/mac.hpp"
#include "network/plan.hpp"

namespace chl::network {

class DhcpServer {
 public:
  // Binds and starts receiving; the object must stay where it is (held by unique_ptr).
  static common::Result<std::unique_ptr<DhcpServer>> start(boost::asio::io_context& io,
                                                           const std::string& bridge,
                                                           const Mac& client, const Lease& lease);
  DhcpServer(const DhcpServer&) = delete;
  DhcpServer& operator=(const DhcpServer&) = delete;
  ~DhcpServer();

  [[nodiscard]] std::uint64_t answered() const { return answered_; }

 private:
  DhcpServer(boost::asio::io_context& io, Mac client, Lease lease);
  void receive();
  boost::asio::ip::udp::socket socket_;
  Mac client_;
  Lease lease_;
  std::string bridge_;
  std::array<std::uint8_t, 1500> in_{};
  std::vector<std::uint8_t> out_;
  bool sending_ = false;
  boost::asio::ip::udp::endpoint from_;
  std::uint64_t answered_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace chl::network

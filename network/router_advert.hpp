#pragma once
// IPv6 router advertisements (RFC 4861) on a masquerade bridge, so that the guest finds its
// default router (the bridge's link-local address) and is told to take its address from DHCPv6
// (M flag: fd10:0:2::2 is handed out in an IA_NA, dhcp6_server.hpp) — no prefix to autoconfigure
// from, since KubeVirt's fd10:0:2::/120 is too small for SLAAC. Sent to ff02::1 at start, a few
// times more while the guest's interface may still be coming up, then every 200 s, and in answer
// to each router solicitation.
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace chl::network {

struct RouterAdvertConfig {
  bool managed = true;                   // M: addresses from DHCPv6
  bool other = true;                     // O: other configuration from DHCPv6
  std::uint16_t router_lifetime = 1800;  // seconds as the default router
  std::uint32_t mtu = 0;                 // MTU option; 0 = none
};

// The ICMPv6 message (type 134) without the checksum, which the kernel fills in on raw ICMPv6
// sockets. Pure, for tests.
std::vector<std::uint8_t> encode_router_advert(const RouterAdvertConfig& c);

class RouterAdvertiser {
 public:
  static common::Result<std::unique_ptr<RouterAdvertiser>> start(boost::asio::io_context& io,
                                                                 const std::string& bridge,
                                                                 const RouterAdvertConfig& config);
  RouterAdvertiser(const RouterAdvertiser&) = delete;
  RouterAdvertiser& operator=(const RouterAdvertiser&) = delete;
  ~RouterAdvertiser();

  [[nodiscard]] std::uint64_t sent() const { return sent_; }

 private:
  RouterAdvertiser(boost::asio::io_context& io, std::vector<std::uint8_t> message);
  void send();
  void schedule();
  void wait_solicitation();
  boost::asio::posix::stream_descriptor socket_;
  boost::asio::steady_timer timer_;
  std::vector<std::uint8_t> message_;
  std::string bridge_;
  unsigned index_ = 0;
  int initial_left_ = 5;
  std::uint64_t sent_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace chl::network

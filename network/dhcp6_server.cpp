#include "network/dhcp6_server.hpp"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstring>

#include "common/log.hpp"
#include "common/unique_fd.hpp"

namespace chl::network {

namespace asio = boost::asio;

common::Result<Mac> link_mac(const std::string& name) {
  common::UniqueFd fd(::socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) return common::fail_errno("socket");
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (::ioctl(fd.get(), SIOCGIFHWADDR, &ifr) < 0)
    return common::fail_errno("SIOCGIFHWADDR " + name);
  Mac m{};
  std::memcpy(m.data(), ifr.ifr_hwaddr.sa_data, m.size());
  return m;
}

Dhcp6Server::Dhcp6Server(asio::io_context& io, Dhcp6Lease lease)
    : socket_(io), lease_(std::move(lease)) {}

Dhcp6Server::~Dhcp6Server() {
  *alive_ = false;
  boost::system::error_code ec;
  socket_.close(ec);
}

common::Result<std::unique_ptr<Dhcp6Server>> Dhcp6Server::start(asio::io_context& io,
                                                                const std::string& bridge,
                                                                const Dhcp6Lease& lease) {
  const unsigned index = ::if_nametoindex(bridge.c_str());
  if (index == 0) return common::fail_errno("dhcpv6: no link " + bridge);
  CHL_TRY(Mac mac, common::wrap(link_mac(bridge), "dhcpv6"));
  common::UniqueFd fd(::socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return common::fail_errno("dhcpv6: socket");
  int one = 1;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_BINDTODEVICE, bridge.c_str(),
                   static_cast<socklen_t>(bridge.size())) < 0)
    return common::fail_errno("dhcpv6: binding to device " + bridge);
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) < 0)
    return common::fail_errno("dhcpv6: socket options");
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  sa.sin6_port = htons(547);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0)
    return common::fail_errno("dhcpv6: binding port 547 on " + bridge);
  ipv6_mreq group{};
  ::inet_pton(AF_INET6, "ff02::1:2", &group.ipv6mr_multiaddr);
  group.ipv6mr_interface = index;
  if (::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_JOIN_GROUP, &group, sizeof group) < 0)
    return common::fail_errno("dhcpv6: joining ff02::1:2 on " + bridge);
  std::unique_ptr<Dhcp6Server> s(new Dhcp6Server(io, lease));
  s->bridge_ = bridge;
  s->server_mac_ = mac;
  boost::system::error_code ec;
  s->socket_.assign(asio::ip::udp::v6(), fd.release(), ec);
  if (ec) return common::fail(ec, "dhcpv6: adopting the socket");
  s->receive();
  return s;
}

void Dhcp6Server::receive() {
  socket_.async_receive_from(
      asio::buffer(in_), from_,
      [this, alive = alive_](boost::system::error_code ec, std::size_t n) {
        if (!*alive || ec == asio::error::operation_aborted) return;
        if (ec) {
          CHL_LOG_WARN("dhcpv6 on {}: receive: {}", bridge_, ec.message());
          receive();
          return;
        }
        auto req = decode_dhcp6(std::span<const std::uint8_t>(in_.data(), n));
        if (!req) {
          CHL_LOG_DEBUG("dhcpv6 on {}: ignoring a message: {}", bridge_, req.error().message());
        } else if (auto answer = dhcp6_answer(*req, server_mac_, lease_); answer && !sending_) {
          out_ = std::move(*answer);
          sending_ = true;
          socket_.async_send_to(asio::buffer(out_), from_,
                                [this, alive = alive_](boost::system::error_code sec, std::size_t) {
                                  if (!*alive) return;
                                  sending_ = false;
                                  if (sec)
                                    CHL_LOG_WARN("dhcpv6 on {}: send: {}", bridge_, sec.message());
                                  else
                                    ++answered_;
                                });
        }
        receive();
      });
}

}  // namespace chl::network

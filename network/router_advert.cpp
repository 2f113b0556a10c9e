#include "network/router_advert.hpp"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/icmp6.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include "common/log.hpp"
#include "common/unique_fd.hpp"

namespace chl::network {

namespace asio = boost::asio;

std::vector<std::uint8_t> encode_router_advert(const RouterAdvertConfig& c) {
  std::vector<std::uint8_t> m;
  m.reserve(24);
  auto put = [&m](std::initializer_list<unsigned> bytes) {
    for (unsigned b : bytes) m.push_back(static_cast<std::uint8_t>(b));
  };
  put({134, 0, 0, 0});  // type, code, checksum (the kernel's)
  put({64});            // current hop limit
  put({(c.managed ? 0x80u : 0u) | (c.other ? 0x40u : 0u)});
  const unsigned lifetime = c.router_lifetime;
  put({lifetime >> 8u, lifetime & 0xffu});
  put({0, 0, 0, 0});  // reachable time: unspecified
  put({0, 0, 0, 0});  // retrans timer: unspecified
  if (c.mtu > 0) {
    put({5, 1, 0, 0});  // MTU option, 8 bytes
    put({c.mtu >> 24, (c.mtu >> 16) & 0xffu, (c.mtu >> 8) & 0xffu, c.mtu & 0xffu});
  }
  return m;
}

RouterAdvertiser::RouterAdvertiser(asio::io_context& io, std::vector<std::uint8_t> message)
    : socket_(io), timer_(io), message_(std::move(message)) {}

RouterAdvertiser::~RouterAdvertiser() {
  *alive_ = false;
  boost::system::error_code ec;
  timer_.cancel();
  socket_.close(ec);
}

common::Result<std::unique_ptr<RouterAdvertiser>> RouterAdvertiser::start(
    asio::io_context& io, const std::string& bridge, const RouterAdvertConfig& config) {
  const unsigned index = ::if_nametoindex(bridge.c_str());
  if (index == 0) return common::fail_errno("router advertisements: no link " + bridge);
  common::UniqueFd fd(::socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, IPPROTO_ICMPV6));
  if (!fd) return common::fail_errno("router advertisements: raw ICMPv6 socket");
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_BINDTODEVICE, bridge.c_str(),
                   static_cast<socklen_t>(bridge.size())) < 0)
    return common::fail_errno("router advertisements: binding to device " + bridge);
  int hops = 255;  // RFC 4861: hosts drop neighbour discovery messages with any other hop limit
  int ifindex = static_cast<int>(index);
  icmp6_filter filter{};
  ICMP6_FILTER_SETBLOCKALL(&filter);
  ICMP6_FILTER_SETPASS(ND_ROUTER_SOLICIT, &filter);
  ipv6_mreq routers{};
  ::inet_pton(AF_INET6, "ff02::2", &routers.ipv6mr_multiaddr);
  routers.ipv6mr_interface = index;
  if (::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_MULTICAST_HOPS, &hops, sizeof hops) < 0 ||
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_UNICAST_HOPS, &hops, sizeof hops) < 0 ||
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_MULTICAST_IF, &ifindex, sizeof ifindex) < 0 ||
      ::setsockopt(fd.get(), IPPROTO_ICMPV6, ICMP6_FILTER, &filter, sizeof filter) < 0 ||
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_JOIN_GROUP, &routers, sizeof routers) < 0)
    return common::fail_errno("router advertisements: socket options on " + bridge);
  std::unique_ptr<RouterAdvertiser> ra(new RouterAdvertiser(io, encode_router_advert(config)));
  ra->bridge_ = bridge;
  ra->index_ = index;
  boost::system::error_code ec;
  ra->socket_.assign(fd.release(), ec);
  if (ec) return common::fail(ec, "router advertisements: adopting the socket");
  ra->send();
  ra->schedule();
  ra->wait_solicitation();
  return ra;
}

void RouterAdvertiser::send() {
  sockaddr_in6 to{};
  to.sin6_family = AF_INET6;
  ::inet_pton(AF_INET6, "ff02::1", &to.sin6_addr);
  to.sin6_scope_id = index_;
  // Non-blocking, one datagram: a full socket buffer only loses this advertisement.
  if (::sendto(socket_.native_handle(), message_.data(), message_.size(), 0,
               reinterpret_cast<sockaddr*>(&to), sizeof to) < 0) {
    // The bridge's link-local address may still be tentative (DAD) at start: the next one goes.
    CHL_LOG_DEBUG("router advertisement on {}: {}", bridge_, std::strerror(errno));
    return;
  }
  ++sent_;
}

void RouterAdvertiser::schedule() {
  // A few quick ones while the bridge's link-local address and the guest's interface come up.
  const auto delay = initial_left_ > 0 ? std::chrono::seconds(2) : std::chrono::seconds(200);
  if (initial_left_ > 0) --initial_left_;
  timer_.expires_after(delay);
  timer_.async_wait([this, alive = alive_](boost::system::error_code ec) {
    if (!*alive || ec) return;
    send();
    schedule();
  });
}

void RouterAdvertiser::wait_solicitation() {
  socket_.async_wait(asio::posix::stream_descriptor::wait_read,
                     [this, alive = alive_](boost::system::error_code ec) {
                       if (!*alive || ec == asio::error::operation_aborted) return;
                       std::uint8_t buf[512];
                       bool solicited = false;
                       for (;;) {  // drain: the filter lets only router solicitations through
                         const ssize_t n = ::recv(socket_.native_handle(), buf, sizeof buf, 0);
                         if (n < 0) break;
                         solicited = solicited || (n >= 8 && buf[0] == ND_ROUTER_SOLICIT);
                       }
                       if (solicited) send();
                       wait_solicitation();
                     });
}

}  // namespace chl::network

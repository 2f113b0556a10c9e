#include "network/dhcp_server.hpp"

#include <netinet/in.h>
#include <sys/socket.h>

#include <boost/asio/ip/address_v4.hpp>

#include "common/log.hpp"
#include "common/unique_fd.hpp"
#include "network/dhcp_packet.hpp"

namespace chl::network {

namespace asio = boost::asio;

DhcpServer::DhcpServer(asio::io_context& io, Mac client, Lease lease)
    : socket_(io), client_(client), lease_(std::move(lease)) {}

DhcpServer::~DhcpServer() {
  *alive_ = false;
  boost::system::error_code ec;
  socket_.close(ec);
}

common::Result<std::unique_ptr<DhcpServer>> DhcpServer::start(asio::io_context& io,
                                                              const std::string& bridge,
                                                              const Mac& client, const Lease& lease) {
  common::UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return common::fail_errno("dhcp: socket");
  int one = 1;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_BINDTODEVICE, bridge.c_str(),
                   static_cast<socklen_t>(bridge.size())) < 0)
    return common::fail_errno("dhcp: binding to device " + bridge);
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      ::setsockopt(fd.get(), SOL_SOCKET, SO_BROADCAST, &one, sizeof one) < 0)
    return common::fail_errno("dhcp: socket options");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(67);
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0)
    return common::fail_errno("dhcp: binding port 67 on " + bridge);
  std::unique_ptr<DhcpServer> s(new DhcpServer(io, client, lease));
  s->bridge_ = bridge;
  boost::system::error_code ec;
  s->socket_.assign(asio::ip::udp::v4(), fd.release(), ec);
  if (ec) return common::fail(ec, "dhcp: adopting the socket");
  s->receive();
  return s;
}

void DhcpServer::receive() {
  socket_.async_receive_from(
      asio::buffer(in_), from_, [this, alive = alive_](boost::system::error_code ec, std::size_t n) {
        if (!*alive || ec == asio::error::operation_aborted) return;
        if (ec) {
          CHL_LOG_WARN("dhcp on {}: receive: {}", bridge_, ec.message());
          receive();
          return;
        }
        auto req = decode_dhcp(std::span<const std::uint8_t>(in_.data(), n));
        if (!req) {
          CHL_LOG_DEBUG("dhcp on {}: ignoring a packet: {}", bridge_, req.error().message());
        } else if (auto answer = dhcp_answer(*req, client_, lease_); answer && !sending_) {
          out_ = encode_dhcp(*answer);
          sending_ = true;
          const asio::ip::udp::endpoint to(asio::ip::address_v4::broadcast(), 68);
          socket_.async_send_to(asio::buffer(out_), to,
                                [this, alive = alive_](boost::system::error_code sec, std::size_t) {
                                  if (!*alive) return;
                                  sending_ = false;
                                  if (sec) CHL_LOG_WARN("dhcp on {}: send: {}", bridge_, sec.message());
                                  else ++answered_;
                                });
        }
        receive();
      });
}

}  // namespace chl::network

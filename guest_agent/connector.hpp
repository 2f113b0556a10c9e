#pragma once
// How the launcher reaches the guest's qemu-ga: a Connector makes one connected stream, without
// blocking the event loop, and hands it over with any bytes it read past its own handshake.
//   UnixConnector        — a Unix stream socket whose peer is the agent (a chardev socket, a test's
//                          `qemu-ga -m unix-listen`).
//   HybridVsockConnector — Cloud Hypervisor's hybrid vsock (CH v52
//                          virtio-devices/src/vsock/unix/muxer.rs): connect to the vsock device's
//                          Unix socket, write "CONNECT <port>\n", read "OK <host port>\n"
//                          (muxer.rs:761); the stream is then the guest's AF_VSOCK connection.
//                          When nothing listens on that port in the guest, the guest answers RST
//                          and CH closes the stream (muxer.rs:224-262); a guest that does not
//                          answer at all is given up after 2 s (csm/mod.rs
//                          CONN_REQUEST_TIMEOUT_MS).
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "common/error.hpp"

namespace chl::guest_agent {

using Socket = boost::asio::local::stream_protocol::socket;

struct Connection {
  Socket socket;
  std::string leftover;  // agent bytes read together with the handshake
};

class Connector {
 public:
  using Done = std::function<void(common::Result<Connection>)>;
  virtual ~Connector() = default;
  // Start connecting; `done` runs once on `io`'s thread (not from inside this call).
  virtual void async_connect(boost::asio::io_context& io, Done done) = 0;
  // Abandon a connection under way: its `done` reports operation_canceled.
  virtual void cancel() = 0;
  // "unix socket /path", "vsock port 1024 via /path" (for logs and errors).
  [[nodiscard]] virtual std::string describe() const = 0;
};

std::unique_ptr<Connector> unix_connector(std::filesystem::path path);
std::unique_ptr<Connector> hybrid_vsock_connector(
    std::filesystem::path path, std::uint32_t port,
    std::chrono::milliseconds handshake_timeout = std::chrono::milliseconds(5000));

}  // namespace chl::guest_agent

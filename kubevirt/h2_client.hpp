#pragma once
// A client of gRPC unary calls over HTTP/2 cleartext (prior knowledge) on a Unix socket, without
// a gRPC library (libnghttp2 for HTTP/2; gRPC's part per grpc/grpc PROTOCOL-HTTP2.md). One
// thread drives it: call() connects when there is no connection, sends, and polls the socket
// until the answer, the deadline or cancel(). Between calls nothing polls: no wake-ups.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/unique_fd.hpp"
#include "kubevirt/grpc_wire.hpp"

namespace chl::kubevirt {

class RpcChannel {
 public:
  explicit RpcChannel(std::string socket_path);
  ~RpcChannel();
  RpcChannel(const RpcChannel&) = delete;
  RpcChannel& operator=(const RpcChannel&) = delete;

  // One unary call of `path` ("/package.Service/Method") with the serialized `request`.
  // A connection that fails, or one the server closed or said GOAWAY on, is dropped and the
  // next call dials again; a failure to connect or a broken connection is Unavailable.
  GrpcReply call(std::string_view path, std::string_view request,
                 std::chrono::steady_clock::time_point deadline);
  // Drop the connection (the next call dials again).
  void disconnect();
  bool connected() const;
  std::uint64_t connects() const { return connects_; }  // connections made

  // From any thread: the call in flight, and every later one, ends at once with Cancelled.
  void cancel();

  struct Connection;

 private:
  GrpcReply connect();
  std::string socket_path_;
  common::UniqueFd cancel_fd_;  // eventfd, readable once cancelled
  std::unique_ptr<Connection> conn_;
  std::uint64_t connects_ = 0;
};

}  // namespace chl::kubevirt

#pragma once
// A server of gRPC unary calls over HTTP/2 cleartext (prior knowledge) on a listening Unix
// socket, without a gRPC library: libnghttp2 does the framing, HPACK and flow control; this does
// gRPC's part (grpc/grpc PROTOCOL-HTTP2.md): routes by :path, the length-prefixed message,
// grpc-status/grpc-message trailers, grpc-status 12 UNIMPLEMENTED for an unknown method.
//
// One I/O thread polls the listener and every connection, many streams each; it sleeps in
// poll() without a timeout while nothing happens. A method that may block runs on a small pool
// of worker threads (grown on demand up to max_workers, parked on a condition variable), so one
// slow call stalls no other stream; the others are answered on the I/O thread itself.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/error.hpp"
#include "common/unique_fd.hpp"
#include "kubevirt/grpc_wire.hpp"

namespace chl::kubevirt {

struct RpcMethod {
  // The serialized request in, the answer out; an exception escaping is grpc-status INTERNAL.
  std::function<GrpcReply(const std::string& request)> call;
  bool may_block = true;  // false: answered on the I/O thread (must not block)
};

struct RpcServerOptions {
  std::size_t max_workers = 8;       // blocking calls at once; more wait their turn, in order
  std::size_t max_connections = 64;  // beyond: accepted and closed at once
  std::uint32_t max_streams = 100;   // SETTINGS_MAX_CONCURRENT_STREAMS, per connection
};

class RpcServer {
 public:
  // Serve `methods` (by :path, "/package.Service/Method") on `listener`, a listening socket.
  static common::Result<std::unique_ptr<RpcServer>> start(common::UniqueFd listener,
                                                          std::map<std::string, RpcMethod> methods,
                                                          RpcServerOptions options = {});
  // stop(1 s).
  ~RpcServer();
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  // Stop accepting, send GOAWAY, give the calls in flight `grace` to answer, then close every
  // connection and wait for the workers (a handler call still running is waited for).
  void stop(std::chrono::milliseconds grace);

  struct Impl;

 private:
  explicit RpcServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chl::kubevirt

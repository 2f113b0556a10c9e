#pragma once
// The webhook's HTTPS server on one Boost.Asio io_context (one thread, never blocking): TLS
// from TlsFiles (a new handshake gets the newest certificate), HTTP/1.1 with keep-alive,
// `POST /mutate` (an AdmissionReview, admission.hpp) and `GET /healthz`. Every peer is bounded:
// the handshake, each request (from its first byte to the end of the response) and the idle
// time between requests each have a deadline, requests a size limit (http_request.hpp), and the
// number of connections a cap (beyond it a new connection is closed at once).
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "common/error.hpp"
#include "webhook/pod_patch.hpp"
#include "webhook/tls_files.hpp"

namespace chl::webhook {

struct ServerOptions {
  PatchConfig patch;
  std::chrono::milliseconds handshake_timeout{10'000};
  std::chrono::milliseconds request_timeout{10'000};
  std::chrono::milliseconds idle_timeout{60'000};
  std::size_t max_connections = 256;
};

struct ServerCounters {
  std::size_t connections = 0;  // open now
  std::size_t accepted = 0;
  std::size_t rejected = 0;  // over max_connections
  std::size_t handshake_failures = 0;
  std::size_t timeouts = 0;
  std::size_t requests = 0;
  std::size_t bad_requests = 0;  // HTTP errors and malformed reviews
};

class Server {
 public:
  Server(boost::asio::io_context& io, TlsFiles& tls, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  // Bind and listen (port 0: any free port, see port()).
  common::Status listen(const boost::asio::ip::tcp::endpoint& at);
  [[nodiscard]] unsigned short port() const;
  void start();
  // Stop accepting and close every connection.
  void stop();
  // Read on the io_context's thread.
  [[nodiscard]] const ServerCounters& counters() const;

  struct State;

 private:
  void accept_next();
  std::shared_ptr<State> state_;
};

// "host:port" (host may be [v6]) into an endpoint; the error names what was wrong.
common::Result<boost::asio::ip::tcp::endpoint> parse_listen_address(const std::string& text);

}  // namespace chl::webhook

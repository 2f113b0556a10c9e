#pragma once
// The double's HTTP/1.1 server on a Unix socket, shaped like micro_http inside Cloud Hypervisor:
// keep-alive connections, requests framed by Content-Length, fds passed with SCM_RIGHTS
// attached to the request they arrive with, responses "HTTP/1.1 204 \r\n" (no reason phrase)
// with "Server: Cloud Hypervisor API". Non-blocking, driven by the caller's poll loop; the
// caller decides when a parsed request is answered (a request can be held: boot delay, hang).
#include <poll.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace chl::vmm_double {

struct HttpRequest {
  std::uint64_t conn = 0;  // which connection to answer on
  std::string method;
  std::string path;                   // without scheme/host and query
  std::optional<std::string> body;    // none when there was no body (micro_http: Body None)
  std::vector<common::UniqueFd> fds;  // received with SCM_RIGHTS alongside this request
};

class HttpServer {
 public:
  // path=P: remove a stale socket, bind, listen; the file is removed by the destructor.
  common::Status listen_path(const std::string& path);
  // fd=N: a socket already bound and listening in the parent.
  common::Status adopt_fd(int fd);
  ~HttpServer();

  // Fill pollfds for the listener and every connection; `tags` gets the matching ids
  // (0 for the listener).
  void fill_poll(std::vector<pollfd>& fds, std::vector<std::uint64_t>& tags) const;
  // Handle readiness for one entry filled above.
  void handle(std::uint64_t tag, short revents);

  // The next complete request of a connection that is not waiting for an answer.
  std::optional<HttpRequest> next_request();
  // Answer the request outstanding on `conn`.
  void respond(std::uint64_t conn, int status, const std::string& body);
  // Try to write every pending response within `budget` (before exiting).
  void drain(int budget_ms);
  // Stop accepting and remove the socket file we created (CH does this at exit).
  void close_listener();

 private:
  struct Conn {
    common::UniqueFd fd;
    std::string in;
    std::string out;
    std::vector<common::UniqueFd> fds;
    bool waiting = false;  // a request was handed out and is not answered yet
    bool sent_continue = false;
    bool closing = false;  // peer closed or protocol error: close once `out` is written
  };
  void accept_all();
  void read_conn(std::uint64_t id, Conn& c);
  void write_conn(Conn& c);

  common::UniqueFd listener_;
  std::string path_;  // set when we created the socket file
  std::map<std::uint64_t, Conn> conns_;
  std::uint64_t next_id_ = 1;
};

std::string http_response(int status, const std::string& body);

}  // namespace chl::vmm_double

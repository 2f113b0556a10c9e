#pragma once
// One HTTP/1.1 request over a fresh connection to a Unix stream socket, bounded by a deadline,
// optionally passing file descriptors (SCM_RIGHTS) with the request's first bytes — the way
// Cloud Hypervisor's own api_client sends tap fds for vm.add-net.
//
// Errors (vmm_api/error.hpp): socket_missing (ENOENT on connect), connection_refused,
// timeout (the deadline passed while connecting, writing or waiting for the answer),
// connection_closed, malformed_response; errno errors for local failures. A non-2xx status is
// NOT an error here: the response is returned as is.
#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/error.hpp"
#include "vmm_api/http_response_parser.hpp"

namespace chl::vmm_api {

struct HttpRequest {
  std::string_view method;               // "GET" | "PUT" | ...
  std::string_view target;               // "/api/v1/vm.info"
  std::optional<std::string_view> body;  // nullopt: no body and no Content-Length at all
  std::span<const int> fds;              // passed with SCM_RIGHTS (not owned, not closed)
};

// The request as bytes on the wire (exposed for tests).
std::string format_request(const HttpRequest& req);

common::Result<HttpResponse> unix_http_request(const std::string& socket_path,
                                               const HttpRequest& req,
                                               std::chrono::steady_clock::time_point deadline);

}  // namespace chl::vmm_api

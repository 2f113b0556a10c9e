#pragma once
// How a Cloud Hypervisor API call failed, as a common::Error that callers can test.
//
// Two error categories:
// - vmm_api_category(): the transport failed (ApiErrc below);
// - http_category(): CH answered with a non-2xx status; the code's value IS the HTTP status.
//   The context then reads "PUT vm.boot: HTTP 500: Error from API: The VM could not boot:
//   VM config is missing" — CH's message array joined with ": ", outermost first.
// Other codes (errno) mean a local failure (e.g. socket() EMFILE).
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "common/error.hpp"

namespace chl::vmm_api {

enum class ApiErrc {
  socket_missing = 1,  // no file at the API socket path (VMM not started, or gone)
  connection_refused,  // a file is there but nobody listens (stale socket of a dead VMM)
  timeout,             // no complete answer within the call's budget
  malformed_response,  // not HTTP/1.x, bad framing, or a 2xx body that is not the schema
  connection_closed,   // the VMM closed the connection before a complete answer
};

}  // namespace chl::vmm_api

template <>
struct std::is_error_code_enum<chl::vmm_api::ApiErrc> : std::true_type {};

namespace chl::vmm_api {

const std::error_category& vmm_api_category();
const std::error_category& http_category();
std::error_code make_error_code(ApiErrc e);

// The kind of a failure, for a switch: the transport ApiErrc, or nullopt for HTTP or local
// errors.
std::optional<ApiErrc> api_errc(const common::Error& e);
inline bool is(const common::Error& e, ApiErrc kind) { return api_errc(e) == kind; }

// The HTTP status when CH answered non-2xx, else nullopt.
std::optional<int> http_status(const common::Error& e);

// CH's error messages (outermost first) of an HTTP error, recovered from the context.
// Exact unless a message itself contains ": " (then it comes back split in two); for the
// exact array use Client::request() and parse_ch_error_body().
std::vector<std::string> ch_messages(const common::Error& e);
// The same messages as one string, exactly as they appear in the context ("" if none).
std::string ch_message(const common::Error& e);

// CH's error body: a JSON array of strings. Anything else becomes one message with the body
// text (trimmed); an empty body gives no message.
std::vector<std::string> parse_ch_error_body(std::string_view body);

// The error for a non-2xx answer: code {status, http_category()}, context
// "<what>: HTTP <status>: m1: m2: ..." (or "<what>: HTTP <status> <reason>" without messages).
common::Error http_error(std::string_view what, int status, std::string_view reason,
                         const std::vector<std::string>& messages);

}  // namespace chl::vmm_api

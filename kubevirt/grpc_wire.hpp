#pragma once
// The gRPC-over-HTTP/2 details both of our endpoints share (grpc/grpc's PROTOCOL-HTTP2.md):
// status codes, the 5-byte length-prefixed message, grpc-timeout and grpc-message encodings.
// No gRPC library: the HTTP/2 side is libnghttp2's (h2_server, h2_client).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace chl::kubevirt {

// The gRPC status codes we produce or act upon.
enum class GrpcCode : int {
  Ok = 0,
  Cancelled = 1,
  Unknown = 2,
  InvalidArgument = 3,
  DeadlineExceeded = 4,
  ResourceExhausted = 8,
  Aborted = 10,
  Unimplemented = 12,
  Internal = 13,
  Unavailable = 14,
};

// An answer: status, grpc-message, and (status Ok) the serialized response message.
struct GrpcReply {
  GrpcCode code = GrpcCode::Ok;
  std::string message;
  std::string body;
};

// The largest message either endpoint accepts (a VMI JSON is tens of KiB; gRPC's default is 4 MiB).
inline constexpr std::size_t kMaxGrpcMessage = 16 * 1024 * 1024;

// `body` with its 5-byte prefix (uncompressed flag, big-endian length).
std::string frame_message(std::string_view body);

// Collects the bytes of one message of a unary call, DATA frame by DATA frame.
class MessageReader {
 public:
  // Append received bytes; false (and error()) once the stream is not one valid message.
  bool append(std::string_view bytes);
  // At end of stream: the message (nullopt, and error(), when there is none or a partial one).
  std::optional<std::string> finish();
  const std::string& error() const { return error_; }
  GrpcCode error_code() const { return error_code_; }

 private:
  bool fail(GrpcCode code, std::string message);
  std::string buf_;
  std::string error_;
  GrpcCode error_code_ = GrpcCode::Ok;
};

// grpc-timeout: "<at most 8 digits><unit>"; parse gives nullopt on a malformed value.
std::string format_grpc_timeout(std::chrono::milliseconds timeout);
std::optional<std::chrono::milliseconds> parse_grpc_timeout(std::string_view value);

// grpc-message is percent-encoded UTF-8 (bytes outside 0x20..0x7e, and '%').
std::string percent_encode(std::string_view s);
std::string percent_decode(std::string_view s);

// The status of an HTTP response that is not gRPC (PROTOCOL-HTTP2.md's mapping).
GrpcCode code_of_http_status(int status);

}  // namespace chl::kubevirt

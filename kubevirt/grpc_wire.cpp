#include "kubevirt/grpc_wire.hpp"

#include <charconv>

namespace chl::kubevirt {

std::string frame_message(std::string_view body) {
  const auto n = static_cast<std::uint32_t>(body.size());
  std::string out;
  out.reserve(5 + body.size());
  out.push_back('\0');  // not compressed
  out.push_back(static_cast<char>(n >> 24));
  out.push_back(static_cast<char>(n >> 16));
  out.push_back(static_cast<char>(n >> 8));
  out.push_back(static_cast<char>(n));
  out.append(body);
  return out;
}

bool MessageReader::fail(GrpcCode code, std::string message) {
  if (error_.empty()) {
    error_code_ = code;
    error_ = std::move(message);
  }
  buf_.clear();
  return false;
}

bool MessageReader::append(std::string_view bytes) {
  if (!error_.empty()) return false;
  buf_.append(bytes);
  if (buf_.size() >= 5) {
    if (buf_[0] != '\0')
      return fail(GrpcCode::Unimplemented, "compressed messages are not supported");
    const auto* p = reinterpret_cast<const unsigned char*>(buf_.data());
    const std::size_t n = (std::size_t{p[1]} << 24) | (std::size_t{p[2]} << 16) |
                          (std::size_t{p[3]} << 8) | std::size_t{p[4]};
    if (n > kMaxGrpcMessage)
      return fail(GrpcCode::ResourceExhausted, "message of " + std::to_string(n) +
                                                   " bytes is larger than the limit of " +
                                                   std::to_string(kMaxGrpcMessage));
    if (buf_.size() > 5 + n) return fail(GrpcCode::Unimplemented, "more than one message");
  }
  return true;
}

std::optional<std::string> MessageReader::finish() {
  if (!error_.empty()) return std::nullopt;
  if (buf_.size() < 5) {
    fail(GrpcCode::Internal, "no message");
    return std::nullopt;
  }
  const auto* p = reinterpret_cast<const unsigned char*>(buf_.data());
  const std::size_t n = (std::size_t{p[1]} << 24) | (std::size_t{p[2]} << 16) |
                        (std::size_t{p[3]} << 8) | std::size_t{p[4]};
  if (buf_.size() != 5 + n) {
    fail(GrpcCode::Internal, "truncated message");
    return std::nullopt;
  }
  return buf_.substr(5);
}

std::string format_grpc_timeout(std::chrono::milliseconds timeout) {
  const long long ms = std::max<long long>(timeout.count(), 0);
  if (ms < 100000000) return std::to_string(ms) + "m";
  return std::to_string(std::min<long long>(ms / 1000, 99999999)) + "S";
}

std::optional<std::chrono::milliseconds> parse_grpc_timeout(std::string_view v) {
  if (v.size() < 2 || v.size() > 9) return std::nullopt;
  long long n = 0;
  const auto digits = v.substr(0, v.size() - 1);
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size() || n < 0) return std::nullopt;
  using namespace std::chrono;
  switch (v.back()) {
    case 'H':
      return duration_cast<milliseconds>(hours(n));
    case 'M':
      return duration_cast<milliseconds>(minutes(n));
    case 'S':
      return duration_cast<milliseconds>(seconds(n));
    case 'm':
      return milliseconds(n);
    case 'u':
      return duration_cast<milliseconds>(microseconds(n));
    case 'n':
      return duration_cast<milliseconds>(nanoseconds(n));
    default:
      return std::nullopt;
  }
}

std::string percent_encode(std::string_view s) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c <= 0x7e && c != '%') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

std::string percent_decode(std::string_view s) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && nibble(s[i + 1]) >= 0 && nibble(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(nibble(s[i + 1]) * 16 + nibble(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

GrpcCode code_of_http_status(int status) {
  switch (status) {
    case 400:
      return GrpcCode::Internal;
    case 404:
      return GrpcCode::Unimplemented;
    case 429:
    case 502:
    case 503:
    case 504:
      return GrpcCode::Unavailable;
    default:
      return GrpcCode::Unknown;
  }
}

}  // namespace chl::kubevirt

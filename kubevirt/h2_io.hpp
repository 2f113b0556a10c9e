#pragma once
// Bytes between a non-blocking socket and an nghttp2 session, for both of our HTTP/2 endpoints.
#include <nghttp2/nghttp2.h>

#include <cstddef>
#include <string>

namespace chl::kubevirt {

// nghttp2's string view of a header name or value.
inline std::string_view h2_view(const std::uint8_t* p, std::size_t n) {
  return {reinterpret_cast<const char*>(p), n};
}
// A header to submit (nghttp2 copies it).
inline nghttp2_nv h2_header(std::string_view name, std::string_view value) {
  return {reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(),
          value.size(), NGHTTP2_NV_FLAG_NONE};
}

class H2Io {
 public:
  // Read what the socket has (at most a few frames' worth) into the session. False when the
  // peer closed, on a socket error, or when the session refuses the bytes (a protocol error).
  bool pump_in(nghttp2_session* session, int fd);
  // Serialize what the session wants to send and write it; what the socket does not take now
  // waits here (at most ~64 KiB: the session is asked for more only below that). False on a
  // write error.
  bool pump_out(nghttp2_session* session, int fd);
  // Bytes wait for the socket to be writable.
  bool blocked() const { return off_ < pending_.size(); }

 private:
  std::string pending_;
  std::size_t off_ = 0;
};

}  // namespace chl::kubevirt

#pragma once
// An incremental HTTP/1.1 request parser for the webhook's connections: bytes in as they arrive
// (one read is never one request; several pipelined requests may arrive in one read), bounded
// head and body, Content-Length bodies only (the API server's webhook client sends one;
// chunked is refused), keep-alive as HTTP/1.1 says. Fuzzed (fuzz/fuzz_webhook.cpp).
#include <cstddef>
#include <map>
#include <string>
#include <string_view>

namespace chl::webhook {

struct HttpRequest {
  std::string method;
  std::string target;                          // e.g. "/mutate?timeout=10s"
  std::string path;                            // the target without its query
  std::map<std::string, std::string> headers;  // lower-cased names
  std::string body;
  bool keep_alive = true;
};

class RequestParser {
 public:
  enum class State { need_more, complete, error };
  static constexpr std::size_t kMaxHead = 16 << 10;
  static constexpr std::size_t kMaxBody = 4 << 20;  // the API server itself takes 3 MiB at most

  // Append bytes and parse as far as they go.
  State feed(std::string_view bytes);
  [[nodiscard]] State state() const { return state_; }
  // The complete request; the parser goes on with the bytes after it (a pipelined request).
  HttpRequest take();
  // Nothing of a next request received yet.
  [[nodiscard]] bool idle() const { return state_ == State::need_more && buf_.empty(); }
  // After State::error: the status to answer with (400, 413, 501, 505) and why.
  [[nodiscard]] int error_status() const { return error_status_; }
  [[nodiscard]] const std::string& error() const { return error_; }

 private:
  State parse();
  State fail(int status, std::string why);

  std::string buf_;
  State state_ = State::need_more;
  HttpRequest req_;
  std::size_t head_end_ = 0;  // past "\r\n\r\n" once the head is parsed; 0 before
  std::size_t body_length_ = 0;
  int error_status_ = 0;
  std::string error_;
};

}  // namespace chl::webhook

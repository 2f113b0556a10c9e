#pragma once
// Incremental HTTP/1.x response parser: feed it whatever read() returned (a read is never a
// message — input may be split anywhere), it says when one response is complete.
// Framing: Content-Length, chunked transfer coding, or (neither) the body runs to EOF.
// 1xx interim responses are skipped. Limits keep a misbehaving peer from growing memory.
#include <cstddef>
#include <map>
#include <string>
#include <string_view>

namespace chl::vmm_api {

struct HttpResponse {
  int status = 0;
  std::string reason;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

class HttpResponseParser {
 public:
  enum class State { need_more, done, error };

  static constexpr std::size_t kMaxHeaderBytes = 64 * 1024;
  static constexpr std::size_t kMaxBodyBytes = 64 * 1024 * 1024;

  // Consume bytes. Bytes after a complete response are ignored (one request per connection).
  State feed(std::string_view data);
  // The peer closed the connection: completes a to-EOF body, else an error.
  State finish_eof();

  [[nodiscard]] State state() const { return state_; }
  [[nodiscard]] const std::string& error() const { return error_; }
  // Valid once state() == done.
  [[nodiscard]] HttpResponse& response() { return resp_; }
  // True once any byte arrived (distinguishes "closed without answering").
  [[nodiscard]] bool started() const { return started_; }

 private:
  // Move up to remaining_ buffered bytes into the body; true once remaining_ reaches 0.
  bool take_body();
  enum class Phase {
    head,
    body_length,
    body_eof,
    chunk_size,
    chunk_data,
    chunk_data_crlf,
    trailers,
    complete
  };
  State fail(std::string why);
  State run();
  bool parse_head(std::string_view head);

  State state_ = State::need_more;
  Phase phase_ = Phase::head;
  std::string buf_;
  std::string error_;
  HttpResponse resp_;
  std::size_t remaining_ = 0;
  bool started_ = false;
};

}  // namespace chl::vmm_api

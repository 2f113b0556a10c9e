#pragma once
// A small HTTP/1.1 server on the launcher's own io_context, for the command socket: one request
// per connection (Connection: close), bounded request size, one write in flight per peer, and
// streaming responses (JSON lines until either side closes) whose queue is bounded — a peer
// that stops reading is dropped, never allowed to stall the loop. No threads, no timers while
// idle.
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include "common/unique_fd.hpp"

namespace chl::control {

struct HttpRequest {
  std::string method;
  std::string target;  // path and query, e.g. "/v1/pause"
  std::map<std::string, std::string> headers;  // lower-cased names
  std::string body;
};

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  using Socket = boost::asio::local::stream_protocol::socket;
  explicit HttpConnection(Socket socket);

  // A complete response; the connection closes once it is written.
  void respond(int status, const std::string& content_type, const std::string& body);
  // Start a streaming response (200, application/x-ndjson); then send_line() as things happen.
  void start_stream();
  // Queue one line (a newline is added). Returns false (and drops the peer) when its queue is
  // over the limit or it is gone.
  bool send_line(const std::string& line);
  void close();
  // Close once everything queued has been written (a stream's natural end).
  void finish();
  [[nodiscard]] bool open() const { return open_; }
  // Called once when the peer goes away (closed, error, or dropped).
  void on_close(std::function<void()> cb) { on_close_ = std::move(cb); }

  static constexpr std::size_t kMaxRequest = 1 << 20;       // header + body
  static constexpr std::size_t kMaxQueuedBytes = 256 << 10; // per streaming peer

 private:
  friend class HttpServer;
  void read_request(std::function<void(std::shared_ptr<HttpConnection>, HttpRequest)> dispatch);
  void on_read(std::size_t n, std::function<void(std::shared_ptr<HttpConnection>, HttpRequest)> dispatch);
  void queue(std::string data, bool close_after);
  void write_next();
  void watch_peer();

  Socket socket_;
  std::string in_;
  char buf_[4096];
  std::deque<std::string> out_;
  std::size_t queued_ = 0;
  bool writing_ = false;
  bool close_after_write_ = false;
  bool streaming_ = false;
  bool open_ = true;
  std::function<void()> on_close_;
};

class HttpServer {
 public:
  using Handler = std::function<void(std::shared_ptr<HttpConnection>, HttpRequest)>;
  // Takes a bound, listening Unix socket.
  HttpServer(boost::asio::io_context& io, common::UniqueFd listener, Handler handler);
  void start();
  void stop();

 private:
  void accept_next();
  boost::asio::local::stream_protocol::acceptor acceptor_;
  Handler handler_;
};

const char* http_reason(int status);

}  // namespace chl::control

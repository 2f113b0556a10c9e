#include "control/http_server.hpp"

#include <algorithm>
#include <cctype>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "common/log.hpp"

namespace chl::control {
namespace asio = boost::asio;
using Dispatch = std::function<void(std::shared_ptr<HttpConnection>, HttpRequest)>;

const char* http_reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Status";
  }
}

HttpConnection::HttpConnection(Socket socket) : socket_(std::move(socket)) {}

void HttpConnection::read_request(Dispatch dispatch) {
  auto self = shared_from_this();
  socket_.async_read_some(asio::buffer(buf_), [self, dispatch](boost::system::error_code ec, std::size_t n) {
    if (ec) {
      self->close();
      return;
    }
    self->on_read(n, dispatch);
  });
}

void HttpConnection::on_read(std::size_t n, Dispatch dispatch) {
  in_.append(buf_, n);
  if (in_.size() > kMaxRequest) {
    respond(413, "application/json", R"({"error":"request too large"})");
    return;
  }
  auto end = in_.find("\r\n\r\n");
  if (end == std::string::npos) {
    read_request(dispatch);
    return;
  }
  HttpRequest req;
  std::string head = in_.substr(0, end);
  auto line_end = head.find("\r\n");
  std::string request_line = head.substr(0, line_end);
  auto sp1 = request_line.find(' ');
  auto sp2 = request_line.find(' ', sp1 == std::string::npos ? 0 : sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos) {
    respond(400, "application/json", R"({"error":"malformed request line"})");
    return;
  }
  req.method = request_line.substr(0, sp1);
  req.target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
  while (pos < head.size()) {
    auto e = head.find("\r\n", pos);
    if (e == std::string::npos) e = head.size();
    std::string h = head.substr(pos, e - pos);
    if (auto colon = h.find(':'); colon != std::string::npos) {
      std::string name = h.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      std::string value = h.substr(colon + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      req.headers[name] = value;
    }
    pos = e + 2;
  }
  std::size_t length = 0;
  if (auto it = req.headers.find("content-length"); it != req.headers.end()) {
    try {
      length = std::stoul(it->second);
    } catch (...) {
      respond(400, "application/json", R"({"error":"bad Content-Length"})");
      return;
    }
  }
  if (length > kMaxRequest) {
    respond(413, "application/json", R"({"error":"request too large"})");
    return;
  }
  if (in_.size() < end + 4 + length) {
    read_request(dispatch);
    return;
  }
  req.body = in_.substr(end + 4, length);
  in_.clear();
  watch_peer();
  dispatch(shared_from_this(), std::move(req));
}

// After the request, keep one read pending: it completes when the peer closes (or sends junk),
// which is how a streaming client's departure is noticed without any timer.
void HttpConnection::watch_peer() {
  auto self = shared_from_this();
  socket_.async_read_some(asio::buffer(buf_), [self](boost::system::error_code ec, std::size_t) {
    if (ec) {
      self->close();
      return;
    }
    self->watch_peer();  // ignore anything sent after the request
  });
}

void HttpConnection::respond(int status, const std::string& content_type, const std::string& body) {
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + http_reason(status) + "\r\n";
  if (!body.empty()) head += "Content-Type: " + content_type + "\r\n";
  head += "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  queue(head + body, true);
}

void HttpConnection::start_stream() {
  streaming_ = true;
  queue("HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n\r\n", false);
}

bool HttpConnection::send_line(const std::string& line) {
  if (!open_) return false;
  if (queued_ + line.size() + 1 > kMaxQueuedBytes) {
    CHL_LOG_WARN("command socket: dropping a stream client that stopped reading ({} bytes queued)", queued_);
    close();
    return false;
  }
  queue(line + "\n", false);
  return true;
}

void HttpConnection::queue(std::string data, bool close_after) {
  if (!open_) return;
  queued_ += data.size();
  out_.push_back(std::move(data));
  if (close_after) close_after_write_ = true;
  if (!writing_) write_next();
}

void HttpConnection::write_next() {
  if (out_.empty()) {
    writing_ = false;
    if (close_after_write_) close();
    return;
  }
  writing_ = true;
  auto self = shared_from_this();
  asio::async_write(socket_, asio::buffer(out_.front()), [self](boost::system::error_code ec, std::size_t) {
    if (ec) {
      self->close();
      return;
    }
    self->queued_ -= self->out_.front().size();
    self->out_.pop_front();
    self->write_next();
  });
}

void HttpConnection::finish() {
  if (!open_) return;
  close_after_write_ = true;
  if (!writing_) close();
}

void HttpConnection::close() {
  if (!open_) return;
  open_ = false;
  boost::system::error_code ec;
  socket_.shutdown(Socket::shutdown_both, ec);
  socket_.close(ec);
  out_.clear();
  queued_ = 0;
  if (auto cb = std::move(on_close_)) cb();
}

HttpServer::HttpServer(asio::io_context& io, common::UniqueFd listener, Handler handler)
    : acceptor_(io, asio::local::stream_protocol(), listener.release()), handler_(std::move(handler)) {}

void HttpServer::start() { accept_next(); }

void HttpServer::stop() {
  boost::system::error_code ec;
  acceptor_.close(ec);
}

void HttpServer::accept_next() {
  acceptor_.async_accept([this](boost::system::error_code ec, HttpConnection::Socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      auto conn = std::make_shared<HttpConnection>(std::move(socket));
      conn->read_request(handler_);
    }
    accept_next();
  });
}

}  // namespace chl::control

#include "webhook/server.hpp"

#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <charconv>
#include <list>

#include "common/log.hpp"
#include "webhook/admission.hpp"
#include "webhook/http_request.hpp"

namespace chl::webhook {
namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;

class Connection;

struct Server::State {
  State(asio::io_context& io_, TlsFiles& tls_, ServerOptions options_)
      : io(io_), acceptor(io_), tls(tls_), options(std::move(options_)) {}
  asio::io_context& io;
  tcp::acceptor acceptor;
  TlsFiles& tls;
  ServerOptions options;
  ServerCounters counters;
  std::list<std::weak_ptr<Connection>> open;
  bool stopped = false;
};

namespace {

const char* reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 431:
      return "Request Header Fields Too Large";
    case 501:
      return "Not Implemented";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Error";
  }
}

std::string response(int status, const std::string& body, bool keep_alive,
                     const char* type = "application/json") {
  std::string r = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) +
                  "\r\nContent-Type: " + type +
                  "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  r += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return r + body;
}

std::string error_body(const std::string& why) {
  return R"({"error":")" + common::log::json_escape(why) + "\"}";
}

}  // namespace

// One TLS peer: handshake, then requests one at a time (a pipelined one waits in the parser),
// one write in flight, one timer that closes the peer when the current phase's deadline passes.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<Server::State> server, tcp::socket socket,
             std::shared_ptr<ssl::context> ctx)
      : server_(std::move(server)),
        ctx_(std::move(ctx)),
        stream_(std::move(socket), *ctx_),
        timer_(server_->io) {}

  void start() {
    auto self = shared_from_this();
    arm(server_->options.handshake_timeout);
    stream_.async_handshake(ssl::stream_base::server, [self](boost::system::error_code ec) {
      if (ec) {
        if (!self->closed_) ++self->server_->counters.handshake_failures;
        CHL_LOG_DEBUG("webhook: TLS handshake failed: {}", ec.message());
        self->close();
        return;
      }
      self->next_request();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    timer_.cancel();
    boost::system::error_code ec;
    stream_.lowest_layer().shutdown(tcp::socket::shutdown_both, ec);
    stream_.lowest_layer().close(ec);
    --server_->counters.connections;
  }

 private:
  // Close the peer when `d` passes without the timer being re-armed or cancelled.
  void arm(std::chrono::milliseconds d) {
    timer_.expires_after(d);
    timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->closed_) return;
      ++self->server_->counters.timeouts;
      CHL_LOG_DEBUG("webhook: dropping a peer past its deadline");
      self->close();
    });
  }

  void next_request() {
    if (closed_) return;
    if (parser_.state() == RequestParser::State::complete ||
        parser_.state() == RequestParser::State::error) {
      handle();
      return;
    }
    if (parser_.idle()) {
      arm(server_->options.idle_timeout);
      in_request_ = false;
    } else if (!in_request_) {
      arm(server_->options.request_timeout);
      in_request_ = true;
    }
    auto self = shared_from_this();
    stream_.async_read_some(asio::buffer(buf_),
                            [self](boost::system::error_code ec, std::size_t n) {
                              if (ec) {
                                self->close();
                                return;
                              }
                              const bool was_idle = self->parser_.idle();
                              self->parser_.feed(std::string_view(self->buf_, n));
                              if (was_idle && !self->parser_.idle() && !self->in_request_) {
                                // The first bytes of a request: its deadline runs from here to the
                                // end of the response.
                                self->arm(self->server_->options.request_timeout);
                                self->in_request_ = true;
                              }
                              self->next_request();
                            });
  }

  void handle() {
    auto& counters = server_->counters;
    if (parser_.state() == RequestParser::State::error) {
      ++counters.bad_requests;
      CHL_LOG_WARN("webhook: bad HTTP request: {}", parser_.error());
      write(response(parser_.error_status(), error_body(parser_.error()), false), false);
      return;
    }
    ++counters.requests;
    HttpRequest req = parser_.take();
    const bool keep = req.keep_alive;
    if (req.path == "/healthz") {
      write(response(req.method == "GET" ? 200 : 405,
                     req.method == "GET" ? "ok" : error_body("GET only"), keep, "text/plain"),
            keep);
      return;
    }
    if (req.path != "/mutate") {
      ++counters.bad_requests;
      write(response(404, error_body("no such path: " + req.path), keep), keep);
      return;
    }
    if (req.method != "POST") {
      ++counters.bad_requests;
      write(response(405, error_body("POST an AdmissionReview to /mutate"), keep), keep);
      return;
    }
    const AdmissionReply r = admit(req.body, server_->options.patch);
    if (r.outcome == Outcome::malformed || r.outcome == Outcome::refused) {
      if (r.outcome == Outcome::malformed) ++counters.bad_requests;
      CHL_LOG_WARN("webhook: admission {} uid {} pod {}: {}", outcome_name(r.outcome), r.uid, r.pod,
                   r.message);
    } else if (r.outcome == Outcome::patched) {
      CHL_LOG_INFO(
          "webhook: admission patched uid {} pod {}: runs Cloud Hypervisor from the launcher "
          "bundle",
          r.uid, r.pod);
    } else {
      CHL_LOG_DEBUG("webhook: admission {} uid {} pod {}", outcome_name(r.outcome), r.uid, r.pod);
    }
    write(response(r.http_status, r.body, keep), keep);
  }

  void write(std::string data, bool keep_alive) {
    out_ = std::move(data);
    arm(server_->options.request_timeout);  // a peer that does not read its answer is dropped too
    auto self = shared_from_this();
    asio::async_write(stream_, asio::buffer(out_),
                      [self, keep_alive](boost::system::error_code ec, std::size_t) {
                        if (ec || !keep_alive) {
                          self->close();
                          return;
                        }
                        self->out_.clear();
                        self->in_request_ = false;
                        self->next_request();
                      });
  }

  std::shared_ptr<Server::State> server_;
  std::shared_ptr<ssl::context> ctx_;  // the certificate this peer's handshake used
  ssl::stream<tcp::socket> stream_;
  asio::steady_timer timer_;
  RequestParser parser_;
  char buf_[16384];
  std::string out_;
  bool in_request_ = false;
  bool closed_ = false;
};

Server::Server(asio::io_context& io, TlsFiles& tls, ServerOptions options)
    : state_(std::make_shared<State>(io, tls, std::move(options))) {}

Server::~Server() { stop(); }

common::Status Server::listen(const tcp::endpoint& at) {
  boost::system::error_code ec;
  auto& a = state_->acceptor;
  if (a.open(at.protocol(), ec); ec) return common::fail(ec, "socket");
  if (a.set_option(tcp::acceptor::reuse_address(true), ec); ec)
    return common::fail(ec, "SO_REUSEADDR");
  if (a.bind(at, ec); ec)
    return common::fail(ec,
                        "binding " + at.address().to_string() + ":" + std::to_string(at.port()));
  if (a.listen(asio::socket_base::max_listen_connections, ec); ec)
    return common::fail(ec, "listen");
  return {};
}

unsigned short Server::port() const {
  boost::system::error_code ec;
  return state_->acceptor.local_endpoint(ec).port();
}

const ServerCounters& Server::counters() const { return state_->counters; }

void Server::start() { accept_next(); }

void Server::stop() {
  if (state_->stopped) return;
  state_->stopped = true;
  boost::system::error_code ec;
  state_->acceptor.close(ec);
  for (auto& w : state_->open)
    if (auto c = w.lock()) c->close();
  state_->open.clear();
}

void Server::accept_next() {
  auto st = state_;
  st->acceptor.async_accept([st, this](boost::system::error_code ec, tcp::socket socket) {
    if (st->stopped || ec == asio::error::operation_aborted) return;
    if (!ec) {
      st->open.remove_if([](const std::weak_ptr<Connection>& w) { return w.expired(); });
      if (st->counters.connections >= st->options.max_connections) {
        ++st->counters.rejected;
        CHL_LOG_WARN("webhook: {} connections open: closing a new one", st->counters.connections);
        boost::system::error_code ignored;
        socket.close(ignored);
      } else {
        ++st->counters.accepted;
        ++st->counters.connections;
        auto conn = std::make_shared<Connection>(st, std::move(socket), st->tls.current());
        st->open.push_back(conn);
        conn->start();
      }
    } else {
      CHL_LOG_WARN("webhook: accept: {}", ec.message());
    }
    accept_next();
  });
}

common::Result<tcp::endpoint> parse_listen_address(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos)
    return common::fail(std::errc::invalid_argument, "'" + text + "' is not HOST:PORT");
  std::string host = text.substr(0, colon);
  const std::string port_text = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "0.0.0.0";
  unsigned port = 0;
  auto [p, perr] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || perr != std::errc() || p != port_text.data() + port_text.size() ||
      port > 65535)
    return common::fail(std::errc::invalid_argument, "'" + port_text + "' is not a port");
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  if (ec) return common::fail(std::errc::invalid_argument, "'" + host + "' is not an IP address");
  return tcp::endpoint(addr, static_cast<unsigned short>(port));
}

}  // namespace chl::webhook

#include "guest_agent/connector.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

#include "common/unix_socket.hpp"

namespace chl::guest_agent {
namespace {

using boost::system::error_code;
using Endpoint = boost::asio::local::stream_protocol::endpoint;

common::Result<Endpoint> endpoint_of(const std::filesystem::path& path) {
  if (auto a = common::unix_address(path); !a) return tl::unexpected(a.error());
  return Endpoint(path.string());
}

// One attempt's state, shared by its handlers (a cancelled attempt's handlers still run).
struct Attempt {
  explicit Attempt(boost::asio::io_context& io) : socket(io), timer(io) {}
  Socket socket;
  boost::asio::steady_timer timer;
  boost::asio::streambuf line{256};
  std::string request;
  bool finished = false;
  Connector::Done done;

  void finish(common::Result<Connection> r) {
    if (finished) return;
    finished = true;
    timer.cancel();
    if (!r) {
      error_code ignored;
      socket.close(ignored);
    }
    done(std::move(r));
  }
  void fail(std::errc code, std::string what) { finish(common::fail(code, std::move(what))); }
  void fail(const error_code& ec, std::string what) { finish(common::fail(ec, std::move(what))); }
};

class UnixConnector final : public Connector {
 public:
  explicit UnixConnector(std::filesystem::path path) : path_(std::move(path)) {}
  void async_connect(boost::asio::io_context& io, Done done) override {
    auto a = std::make_shared<Attempt>(io);
    a->done = std::move(done);
    current_ = a;
    auto ep = endpoint_of(path_);
    if (!ep) {
      boost::asio::post(io, [a, e = ep.error().wrap(describe())] { a->finish(tl::unexpected(e)); });
      return;
    }
    a->socket.async_connect(*ep, [a, what = describe()](const error_code& ec) {
      if (ec) return a->fail(ec, "connecting to " + what);
      a->finish(Connection{std::move(a->socket), {}});
    });
  }
  void cancel() override {
    if (auto a = current_.lock()) a->fail(std::errc::operation_canceled, "connecting cancelled");
  }
  std::string describe() const override { return "unix socket " + path_.string(); }

 private:
  std::filesystem::path path_;
  std::weak_ptr<Attempt> current_;
};

class HybridVsockConnector final : public Connector {
 public:
  HybridVsockConnector(std::filesystem::path path, std::uint32_t port,
                       std::chrono::milliseconds timeout)
      : path_(std::move(path)), port_(port), timeout_(timeout) {}

  void async_connect(boost::asio::io_context& io, Done done) override {
    auto a = std::make_shared<Attempt>(io);
    a->done = std::move(done);
    current_ = a;
    const std::string what = describe();
    auto ep = endpoint_of(path_);
    if (!ep) {
      boost::asio::post(io, [a, e = ep.error().wrap(what)] { a->finish(tl::unexpected(e)); });
      return;
    }
    // The whole handshake is bounded: a VMM that accepts but never answers is given up.
    a->timer.expires_after(timeout_);
    a->timer.async_wait([a, what, t = timeout_](const error_code& ec) {
      if (ec) return;
      a->fail(std::errc::timed_out,
              what + ": no answer to CONNECT within " + std::to_string(t.count()) + " ms");
    });
    a->socket.async_connect(*ep, [a, what, port = port_](const error_code& ec) {
      if (a->finished) return;
      if (ec) return a->fail(ec, "connecting to the vsock socket of " + what);
      a->request = "CONNECT " + std::to_string(port) + "\n";
      boost::asio::async_write(
          a->socket, boost::asio::buffer(a->request),
          [a, what](const error_code& wec, std::size_t) {
            if (a->finished) return;
            if (wec) return a->fail(wec, what + ": writing CONNECT");
            boost::asio::async_read_until(
                a->socket, a->line, '\n', [a, what](const error_code& rec, std::size_t n) {
                  if (a->finished) return;
                  if (rec == boost::asio::error::eof || rec == boost::asio::error::connection_reset)
                    return a->fail(std::errc::connection_refused,
                                   what +
                                       ": the VMM closed the stream: nothing listens on that "
                                       "port in the guest (no agent)");
                  if (rec) return a->fail(rec, what + ": reading the answer to CONNECT");
                  const auto* data = static_cast<const char*>(a->line.data().data());
                  const std::string reply(data, n);
                  a->line.consume(n);
                  if (reply.rfind("OK ", 0) != 0)
                    return a->fail(std::errc::protocol_error,
                                   what + ": unexpected answer to CONNECT: '" +
                                       reply.substr(0, reply.size() - 1) + "'");
                  std::string rest(static_cast<const char*>(a->line.data().data()), a->line.size());
                  a->finish(Connection{std::move(a->socket), std::move(rest)});
                });
          });
    });
  }
  void cancel() override {
    if (auto a = current_.lock()) a->fail(std::errc::operation_canceled, "connecting cancelled");
  }
  std::string describe() const override {
    return "vsock port " + std::to_string(port_) + " via " + path_.string();
  }

 private:
  std::filesystem::path path_;
  std::uint32_t port_;
  std::chrono::milliseconds timeout_;
  std::weak_ptr<Attempt> current_;
};

}  // namespace

std::unique_ptr<Connector> unix_connector(std::filesystem::path path) {
  return std::make_unique<UnixConnector>(std::move(path));
}

std::unique_ptr<Connector> hybrid_vsock_connector(std::filesystem::path path, std::uint32_t port,
                                                  std::chrono::milliseconds handshake_timeout) {
  return std::make_unique<HybridVsockConnector>(std::move(path), port, handshake_timeout);
}

}  // namespace chl::guest_agent

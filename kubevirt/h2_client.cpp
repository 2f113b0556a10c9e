#include "kubevirt/h2_client.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <optional>

#include "common/unix_socket.hpp"
#include "kubevirt/h2_io.hpp"

namespace chl::kubevirt {

namespace {

// The call in flight (one at a time).
struct Call {
  std::int32_t stream = -1;
  std::string request;  // framed
  std::size_t request_off = 0;
  int http_status = 0;
  std::optional<int> grpc_status;
  std::string grpc_message;
  MessageReader reader;
  bool closed = false;
  std::uint32_t reset_code = 0;
};

ssize_t read_request(nghttp2_session*, std::int32_t, std::uint8_t* buf, std::size_t length,
                     std::uint32_t* flags, nghttp2_data_source* source, void*) {
  auto* c = static_cast<Call*>(source->ptr);
  const std::size_t n = std::min(length, c->request.size() - c->request_off);
  std::memcpy(buf, c->request.data() + c->request_off, n);
  c->request_off += n;
  if (c->request_off == c->request.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;  // END_STREAM
  return static_cast<ssize_t>(n);
}

GrpcReply unavailable(std::string message) {
  return {GrpcCode::Unavailable, std::move(message), {}};
}

}  // namespace

struct RpcChannel::Connection {
  common::UniqueFd fd;
  nghttp2_session* session = nullptr;
  H2Io io;
  Call* call = nullptr;
  ~Connection() {
    if (session) nghttp2_session_del(session);
  }

  Call* active(std::int32_t id) { return call && call->stream == id ? call : nullptr; }

  static int on_header(nghttp2_session*, const nghttp2_frame* f, const std::uint8_t* name,
                       std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                       std::uint8_t, void* user) {
    Call* c = static_cast<Connection*>(user)->active(f->hd.stream_id);
    if (!c) return 0;
    const auto n = h2_view(name, namelen);
    const auto v = h2_view(value, valuelen);
    int number = 0;
    if (n == ":status" || n == "grpc-status") {
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), number);
      if (ec != std::errc() || end != v.data() + v.size()) number = -1;
      if (n == ":status")
        c->http_status = number;
      else
        c->grpc_status = number < 0 ? static_cast<int>(GrpcCode::Unknown) : number;
    }
    if (n == "grpc-message") c->grpc_message = percent_decode(v);
    return 0;
  }
  static int on_data(nghttp2_session*, std::uint8_t, std::int32_t id, const std::uint8_t* data,
                     std::size_t len, void* user) {
    if (Call* c = static_cast<Connection*>(user)->active(id)) c->reader.append(h2_view(data, len));
    return 0;
  }
  static int on_stream_close(nghttp2_session*, std::int32_t id, std::uint32_t code, void* user) {
    if (Call* c = static_cast<Connection*>(user)->active(id)) {
      c->closed = true;
      c->reset_code = code;
    }
    return 0;
  }

  // Whether the connection can take a call: the server neither closed it nor said GOAWAY.
  bool usable() {
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) > 0 && !io.pump_in(session, fd.get())) return false;
    return nghttp2_session_check_request_allowed(session) != 0 && io.pump_out(session, fd.get());
  }
};

RpcChannel::RpcChannel(std::string socket_path)
    : socket_path_(std::move(socket_path)), cancel_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

RpcChannel::~RpcChannel() = default;

void RpcChannel::cancel() {
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(cancel_fd_.get(), &one, sizeof one);
}

void RpcChannel::disconnect() { conn_.reset(); }

bool RpcChannel::connected() const { return conn_ != nullptr; }

GrpcReply RpcChannel::connect() {
  auto fd = common::connect_unix(socket_path_);
  if (!fd) return unavailable("connecting to " + socket_path_ + ": " + fd.error().message());
  const int flags = ::fcntl(fd->get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd->get(), F_SETFL, flags | O_NONBLOCK) != 0)
    return unavailable("connecting to " + socket_path_ + ": " + std::strerror(errno));
  auto c = std::make_unique<Connection>();
  c->fd = std::move(*fd);
  nghttp2_session_callbacks* cb = nullptr;
  if (nghttp2_session_callbacks_new(&cb) != 0) return unavailable("nghttp2: out of memory");
  nghttp2_session_callbacks_set_on_header_callback(cb, Connection::on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, Connection::on_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, Connection::on_stream_close);
  const int rv = nghttp2_session_client_new(&c->session, cb, c.get());
  nghttp2_session_callbacks_del(cb);
  if (rv != 0) return unavailable("nghttp2: out of memory");
  const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                             {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1024 * 1024}};
  nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, settings, 2);
  conn_ = std::move(c);
  ++connects_;
  return {};
}

GrpcReply RpcChannel::call(std::string_view path, std::string_view request,
                           std::chrono::steady_clock::time_point deadline) {
  pollfd cancelled{cancel_fd_.get(), POLLIN, 0};
  if (::poll(&cancelled, 1, 0) > 0) return {GrpcCode::Cancelled, "cancelled", {}};
  if (conn_ && !conn_->usable()) conn_.reset();  // closed or GOAWAY while idle: dial again
  if (!conn_)
    if (auto r = connect(); r.code != GrpcCode::Ok) return r;
  Connection& c = *conn_;

  Call call;
  call.request = frame_message(request);
  const auto now = std::chrono::steady_clock::now();
  const std::string timeout = format_grpc_timeout(
      std::chrono::ceil<std::chrono::milliseconds>(std::max(deadline - now, now - now)));
  const nghttp2_nv headers[] = {h2_header(":method", "POST"),
                                h2_header(":scheme", "http"),
                                h2_header(":path", path),
                                h2_header(":authority", "localhost"),
                                h2_header("content-type", "application/grpc"),
                                h2_header("te", "trailers"),
                                h2_header("grpc-timeout", timeout),
                                h2_header("user-agent", "ch-launcher")};
  nghttp2_data_provider body{};
  body.source.ptr = &call;
  body.read_callback = read_request;
  call.stream = nghttp2_submit_request(c.session, nullptr, headers, 8, &body, nullptr);
  if (call.stream < 0) {
    conn_.reset();
    return unavailable(std::string("nghttp2: ") + nghttp2_strerror(call.stream));
  }
  c.call = &call;
  struct Detach {  // the connection forgets the call, unless it was dropped meanwhile
    std::unique_ptr<Connection>& conn;
    ~Detach() {
      if (conn) conn->call = nullptr;
    }
  } detach{conn_};

  // Abandon the call: RST_STREAM(CANCEL), sent if the socket takes it now.
  auto abandon = [&](GrpcCode code, std::string message) {
    nghttp2_submit_rst_stream(c.session, NGHTTP2_FLAG_NONE, call.stream, NGHTTP2_CANCEL);
    c.io.pump_out(c.session, c.fd.get());
    return GrpcReply{code, std::move(message), {}};
  };
  while (!call.closed) {
    if (!c.io.pump_out(c.session, c.fd.get())) {
      conn_.reset();
      return unavailable("writing to " + socket_path_ + ": " + std::strerror(errno));
    }
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero())
      return abandon(GrpcCode::DeadlineExceeded, "deadline exceeded");
    pollfd fds[] = {{c.fd.get(), static_cast<short>(POLLIN | (c.io.blocked() ? POLLOUT : 0)), 0},
                    {cancel_fd_.get(), POLLIN, 0}};
    const int timeout_ms =
        static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
    if (::poll(fds, 2, timeout_ms) < 0) continue;
    if (fds[1].revents) return abandon(GrpcCode::Cancelled, "cancelled");
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) && !c.io.pump_in(c.session, c.fd.get())) {
      if (call.closed) break;
      conn_.reset();
      return unavailable("connection to " + socket_path_ + " closed");
    }
    if (!call.closed && !nghttp2_session_want_read(c.session)) {
      conn_.reset();
      return unavailable("connection to " + socket_path_ + " ended");
    }
  }

  if (call.grpc_status) {
    GrpcReply r{static_cast<GrpcCode>(*call.grpc_status), std::move(call.grpc_message), {}};
    if (r.code != GrpcCode::Ok) return r;
    auto message = call.reader.finish();
    if (!message) return {GrpcCode::Internal, "answer: " + call.reader.error(), {}};
    r.body = std::move(*message);
    return r;
  }
  if (call.reset_code == NGHTTP2_REFUSED_STREAM) return unavailable("stream refused");
  if (call.reset_code == NGHTTP2_CANCEL) return {GrpcCode::Cancelled, "stream cancelled", {}};
  if (call.reset_code != 0)
    return {GrpcCode::Internal,
            "stream reset (HTTP/2 error " + std::to_string(call.reset_code) + ")",
            {}};
  if (call.http_status != 200)
    return {code_of_http_status(call.http_status),
            "HTTP status " + std::to_string(call.http_status),
            {}};
  return {GrpcCode::Internal, "answer without grpc-status", {}};
}

}  // namespace chl::kubevirt

#include "kubevirt/h2_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.hpp"
#include "kubevirt/h2_io.hpp"

namespace chl::kubevirt {

namespace {

struct Stream {
  std::string method;  // :method
  std::string path;    // :path
  std::string content_type;
  MessageReader reader;
  std::string out;  // the framed answer, sent from out_off by the data source
  std::size_t out_off = 0;
  GrpcReply reply;  // its status goes in the trailers
};

struct Conn {
  RpcServer::Impl* server = nullptr;
  std::uint64_t id = 0;
  common::UniqueFd fd;
  nghttp2_session* session = nullptr;
  H2Io io;
  std::map<std::int32_t, Stream> streams;
  std::size_t in_flight = 0;  // calls handed to the workers, not answered yet
  ~Conn() {
    if (session) nghttp2_session_del(session);
  }
};

struct Job {
  std::uint64_t conn = 0;
  std::int32_t stream = 0;
  const RpcMethod* method = nullptr;
  std::string request;
};
struct Done {
  std::uint64_t conn = 0;
  std::int32_t stream = 0;
  GrpcReply reply;
};

GrpcReply run_method(const RpcMethod& m, const std::string& request) {
  try {
    return m.call(request);
  } catch (const std::exception& e) {
    return {GrpcCode::Internal, std::string("internal error: ") + e.what(), {}};
  }
}

}  // namespace

struct RpcServer::Impl {
  common::UniqueFd listener;
  common::UniqueFd wake;  // eventfd: a worker finished, or stop() was called
  std::map<std::string, RpcMethod> methods;
  RpcServerOptions options;
  std::map<std::uint64_t, std::unique_ptr<Conn>> conns;
  std::uint64_t next_conn = 1;
  nghttp2_session_callbacks* callbacks = nullptr;
  std::thread io;

  std::mutex mu;
  std::condition_variable work_cv;
  std::deque<Job> jobs;
  std::deque<Done> done;
  std::vector<std::thread> workers;
  std::size_t idle_workers = 0;
  bool stopping_workers = false;
  bool stop_requested = false;
  std::chrono::milliseconds grace{1000};

  ~Impl() {
    if (callbacks) nghttp2_session_callbacks_del(callbacks);
  }

  void signal() {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake.get(), &one, sizeof one);
  }

  // ---- the workers ----
  void enqueue(Job job) {
    std::lock_guard lock(mu);
    jobs.push_back(std::move(job));
    // A worker counted idle may be about to take an earlier job: spawn unless every queued job
    // has an idle worker, so that no call waits behind a slow one while below max_workers.
    if (jobs.size() > idle_workers && workers.size() < options.max_workers)
      workers.emplace_back([this] { work(); });
    work_cv.notify_one();
  }
  void work() {
    std::unique_lock lock(mu);
    for (;;) {
      ++idle_workers;
      work_cv.wait(lock, [&] { return stopping_workers || !jobs.empty(); });
      --idle_workers;
      if (stopping_workers) return;
      Job job = std::move(jobs.front());
      jobs.pop_front();
      lock.unlock();
      GrpcReply reply = run_method(*job.method, job.request);
      lock.lock();
      done.push_back({job.conn, job.stream, std::move(reply)});
      signal();
    }
  }

  // ---- answers ----
  static ssize_t read_body(nghttp2_session* session, std::int32_t stream_id, std::uint8_t* buf,
                           std::size_t length, std::uint32_t* flags, nghttp2_data_source* source,
                           void*) {
    auto* s = static_cast<Stream*>(source->ptr);
    const std::size_t n = std::min(length, s->out.size() - s->out_off);
    std::memcpy(buf, s->out.data() + s->out_off, n);
    s->out_off += n;
    if (s->out_off == s->out.size()) {
      *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
      const std::string status = std::to_string(static_cast<int>(s->reply.code));
      nghttp2_nv trailers[] = {h2_header("grpc-status", status)};
      if (nghttp2_submit_trailer(session, stream_id, trailers, 1) != 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return static_cast<ssize_t>(n);
  }

  static void answer(Conn& c, std::int32_t id, Stream& s, GrpcReply reply) {
    s.reply = std::move(reply);
    if (s.reply.code == GrpcCode::Ok) {
      s.out = frame_message(s.reply.body);
      s.reply.body.clear();
      const nghttp2_nv headers[] = {h2_header(":status", "200"),
                                    h2_header("content-type", "application/grpc")};
      nghttp2_data_provider body{};
      body.source.ptr = &s;
      body.read_callback = read_body;
      nghttp2_submit_response(c.session, id, headers, 2, &body);
      return;
    }
    // Trailers-Only: one HEADERS frame ending the stream.
    const std::string status = std::to_string(static_cast<int>(s.reply.code));
    const std::string message = percent_encode(s.reply.message);
    const nghttp2_nv headers[] = {
        h2_header(":status", "200"), h2_header("content-type", "application/grpc"),
        h2_header("grpc-status", status), h2_header("grpc-message", message)};
    nghttp2_submit_response(c.session, id, headers, 4, nullptr);
  }

  static void answer_http(Conn& c, std::int32_t id, const char* status) {
    const nghttp2_nv headers[] = {h2_header(":status", status)};
    nghttp2_submit_response(c.session, id, headers, 1, nullptr);
  }

  // A whole request arrived on `id`.
  void dispatch(Conn& c, std::int32_t id, Stream& s) {
    if (s.method != "POST") return answer_http(c, id, "405");
    if (s.content_type.rfind("application/grpc", 0) != 0) return answer_http(c, id, "415");
    auto m = methods.find(s.path);
    if (m == methods.end())
      return answer(c, id, s, {GrpcCode::Unimplemented, "unknown method " + s.path, {}});
    auto request = s.reader.finish();
    if (!request) return answer(c, id, s, {s.reader.error_code(), s.reader.error(), {}});
    if (!m->second.may_block) return answer(c, id, s, run_method(m->second, *request));
    ++c.in_flight;
    enqueue({c.id, id, &m->second, std::move(*request)});
  }

  // ---- nghttp2 callbacks (user_data is the Conn) ----
  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* f, void* user) {
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST)
      static_cast<Conn*>(user)->streams.try_emplace(f->hd.stream_id);
    return 0;
  }
  static int on_header(nghttp2_session*, const nghttp2_frame* f, const std::uint8_t* name,
                       std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                       std::uint8_t, void* user) {
    auto& streams = static_cast<Conn*>(user)->streams;
    auto s = streams.find(f->hd.stream_id);
    if (s == streams.end() || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    const auto n = h2_view(name, namelen);
    const auto v = h2_view(value, valuelen);
    if (n == ":method") s->second.method = v;
    if (n == ":path") s->second.path = v;
    if (n == "content-type") s->second.content_type = v;
    return 0;
  }
  static int on_data(nghttp2_session*, std::uint8_t, std::int32_t id, const std::uint8_t* data,
                     std::size_t len, void* user) {
    auto& streams = static_cast<Conn*>(user)->streams;
    if (auto s = streams.find(id); s != streams.end()) s->second.reader.append(h2_view(data, len));
    return 0;
  }
  static int on_frame(nghttp2_session* session, const nghttp2_frame* f, void* user) {
    auto* c = static_cast<Conn*>(user);
    if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
        !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
      return 0;
    auto s = c->streams.find(f->hd.stream_id);
    if (s != c->streams.end()) c->server->dispatch(*c, s->first, s->second);
    (void)session;
    return 0;
  }
  static int on_stream_close(nghttp2_session*, std::int32_t id, std::uint32_t, void* user) {
    static_cast<Conn*>(user)->streams.erase(id);  // a worker's answer for it is dropped
    return 0;
  }

  // ---- the I/O thread ----
  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      common::UniqueFd owned(fd);
      if (conns.size() >= options.max_connections) {
        CHL_LOG_WARN("rpc: {} connections already, refusing one more", conns.size());
        continue;
      }
      auto c = std::make_unique<Conn>();
      c->server = this;
      c->id = next_conn++;
      c->fd = std::move(owned);
      if (nghttp2_session_server_new(&c->session, callbacks, c.get()) != 0) continue;
      const nghttp2_settings_entry settings[] = {
          {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, options.max_streams},
          {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1024 * 1024},
      };
      nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, settings, 2);
      nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0, 4 * 1024 * 1024);
      if (stop_requested) goaway(*c);
      const auto id = c->id;
      conns.emplace(id, std::move(c));
      flush(id);
    }
  }

  static void goaway(Conn& c) {
    nghttp2_submit_goaway(c.session, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(c.session), NGHTTP2_NO_ERROR,
                          nullptr, 0);
  }

  // Send what the connection has to send; close it when it is done or broken.
  void flush(std::uint64_t id) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    Conn& c = *it->second;
    const bool ok = c.io.pump_out(c.session, c.fd.get());
    const bool done = !nghttp2_session_want_read(c.session) &&
                      !nghttp2_session_want_write(c.session) && !c.io.blocked();
    if (!ok || done) conns.erase(it);
  }

  void take_answers() {
    std::uint64_t n = 0;
    [[maybe_unused]] auto r = ::read(wake.get(), &n, sizeof n);
    std::deque<Done> ready;
    {
      std::lock_guard lock(mu);
      ready.swap(done);
    }
    for (auto& d : ready) {
      auto c = conns.find(d.conn);
      if (c == conns.end()) continue;  // the client left
      --c->second->in_flight;
      auto s = c->second->streams.find(d.stream);
      if (s != c->second->streams.end())  // else: cancelled by the client (RST_STREAM)
        answer(*c->second, d.stream, s->second, std::move(d.reply));
      flush(d.conn);
    }
  }

  bool calls_in_flight() const {
    for (const auto& [id, c] : conns)
      if (c->in_flight > 0 || c->io.blocked()) return true;
    return false;
  }

  void run() {
    std::vector<pollfd> fds;
    std::vector<std::uint64_t> ids;
    std::chrono::steady_clock::time_point stop_deadline{};
    bool stopping = false;
    for (;;) {
      if (!stopping) {
        std::lock_guard lock(mu);
        if (stop_requested) {
          stopping = true;
          stop_deadline = std::chrono::steady_clock::now() + grace;
          listener.reset();
          for (auto& [id, c] : conns) goaway(*c);
          std::vector<std::uint64_t> all;
          for (auto& [id, c] : conns) all.push_back(id);
          for (auto id : all) flush(id);
        }
      }
      if (stopping && (!calls_in_flight() || std::chrono::steady_clock::now() >= stop_deadline))
        break;
      fds.clear();
      ids.clear();
      fds.push_back({wake.get(), POLLIN, 0});
      if (listener) fds.push_back({listener.get(), POLLIN, 0});
      for (auto& [id, c] : conns) {
        fds.push_back(
            {c->fd.get(), static_cast<short>(POLLIN | (c->io.blocked() ? POLLOUT : 0)), 0});
        ids.push_back(id);
      }
      int timeout = -1;  // idle: no wake-up at all
      if (stopping)
        timeout = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(
                                       stop_deadline - std::chrono::steady_clock::now())
                                       .count());
      if (::poll(fds.data(), fds.size(), std::max(timeout, stopping ? 0 : -1)) < 0) continue;
      if (fds[0].revents) take_answers();
      std::size_t first = 1;
      if (listener) {
        if (fds[1].revents) accept_all();
        first = 2;
      }
      for (std::size_t i = first; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        auto c = conns.find(ids[i - first]);
        if (c == conns.end()) continue;
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) &&
            !c->second->io.pump_in(c->second->session, c->second->fd.get())) {
          conns.erase(c);  // the client left: its calls in flight answer nobody
          continue;
        }
        flush(ids[i - first]);
      }
    }
    conns.clear();
  }
};

RpcServer::RpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

common::Result<std::unique_ptr<RpcServer>> RpcServer::start(
    common::UniqueFd listener, std::map<std::string, RpcMethod> methods, RpcServerOptions options) {
  auto impl = std::make_unique<Impl>();
  const int flags = ::fcntl(listener.get(), F_GETFL);
  if (flags < 0 || ::fcntl(listener.get(), F_SETFL, flags | O_NONBLOCK) != 0)
    return common::fail_errno("rpc server: listener");
  impl->listener = std::move(listener);
  impl->wake = common::UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!impl->wake) return common::fail_errno("rpc server: eventfd");
  impl->methods = std::move(methods);
  impl->options = options;
  if (nghttp2_session_callbacks_new(&impl->callbacks) != 0)
    return common::fail(std::errc::not_enough_memory, "rpc server: nghttp2 callbacks");
  auto* cb = impl->callbacks;
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, Impl::on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb, Impl::on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, Impl::on_data);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, Impl::on_frame);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, Impl::on_stream_close);
  Impl* raw = impl.get();
  raw->io = std::thread([raw] { raw->run(); });
  return std::unique_ptr<RpcServer>(new RpcServer(std::move(impl)));
}

void RpcServer::stop(std::chrono::milliseconds grace) {
  if (!impl_->io.joinable()) return;
  {
    std::lock_guard lock(impl_->mu);
    impl_->stop_requested = true;
    impl_->grace = grace;
  }
  impl_->signal();
  impl_->io.join();
  std::vector<std::thread> workers;
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping_workers = true;
    impl_->jobs.clear();
    workers.swap(impl_->workers);
  }
  impl_->work_cv.notify_all();
  for (auto& w : workers) w.join();
}

RpcServer::~RpcServer() { stop(std::chrono::seconds(1)); }

}  // namespace chl::kubevirt

#include "guest_agent/agent_client.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "common/log.hpp"

namespace chl::guest_agent {

using boost::system::error_code;
using common::fail;
using Json = nlohmann::json;

const char* to_string(AgentState s) {
  switch (s) {
    case AgentState::Disconnected:
      return "disconnected";
    case AgentState::Connecting:
      return "connecting";
    case AgentState::Syncing:
      return "syncing";
    case AgentState::Connected:
      return "connected";
  }
  return "?";
}

std::shared_ptr<AgentClient> AgentClient::create(boost::asio::io_context& io,
                                                 std::unique_ptr<Connector> connector,
                                                 ClientOptions options) {
  return std::shared_ptr<AgentClient>(new AgentClient(io, std::move(connector), nullptr, options));
}

std::shared_ptr<AgentClient> AgentClient::create(boost::asio::io_context& io,
                                                 std::shared_ptr<CommandTransport> transport,
                                                 ClientOptions options) {
  return std::shared_ptr<AgentClient>(new AgentClient(io, nullptr, std::move(transport), options));
}

AgentClient::AgentClient(boost::asio::io_context& io, std::unique_ptr<Connector> connector,
                         std::shared_ptr<CommandTransport> transport, ClientOptions options)
    : io_(io),
      connector_(std::move(connector)),
      transport_(std::move(transport)),
      opts_(options),
      parser_(options.max_frame),
      rbuf_(options.read_chunk),
      timer_(io),
      reconnect_(io),
      backoff_({options.backoff_min, options.backoff_max, options.backoff_patience,
                options.backoff_idle_max},
               std::chrono::steady_clock::now()),
      // Distinct ids per launcher, so a reply to an earlier launcher's sync is not ours.
      sync_id_(static_cast<std::int64_t>(
          std::chrono::steady_clock::now().time_since_epoch().count() % 1000000000)) {}

AgentClient::~AgentClient() {
  stopped_ = true;
  if (connector_) connector_->cancel();
  if (transport_) transport_->watch(nullptr);
}

void AgentClient::start() {
  if (started_ || stopped_) return;
  started_ = true;
  if (transport_) {
    transport_->watch([self = weak_from_this()](bool up) {
      if (auto me = self.lock()) me->on_transport_state(up);
    });
    return;
  }
  connect();
}

void AgentClient::stop() {
  if (stopped_) return;
  stopped_ = true;
  reconnect_.cancel();
  if (connector_) connector_->cancel();
  if (transport_) transport_->watch(nullptr);
  drop("the agent client was stopped");
}

// ---- command mode: the transport holds the channel and says when the agent is there ----

void AgentClient::on_transport_state(bool up) {
  if (stopped_) return;
  if (!up) {
    // The command in flight is the transport's until it answers (or its timer here fires): a
    // guest-shutdown that works takes the agent down before libvirt's virDomainReboot returns.
    // What waits behind it fails now, and nothing new is sent until the agent is back.
    while (!queue_.empty()) {
      fail_later(std::move(queue_.front().reply),
                 fail(std::errc::connection_aborted, queue_.front().command +
                                                         ": the guest agent disconnected (" +
                                                         transport_->describe() + ")")
                     .value());
      queue_.pop_front();
    }
    return set_state(AgentState::Disconnected);
  }
  if (state_ == AgentState::Connected) return;
  ++stats_.connects;
  set_state(AgentState::Connected);
  pump();
}

void AgentClient::send_through_transport() {
  const auto gen = conn_gen_;
  TransportCommand c{in_flight_->command, in_flight_->arguments, in_flight_->wire,
                     in_flight_->timeout, in_flight_->expect_reply};
  transport_->async_command(
      std::move(c), [self = weak_from_this(), gen](common::Result<std::string> r) {
        auto me = self.lock();
        if (!me || me->conn_gen_ != gen || !me->in_flight_) {
          if (me) ++me->stats_.stray_replies;  // answered after its timeout or a disconnect
          return;
        }
        if (!r) return me->complete(tl::unexpected(r.error().wrap(me->in_flight_->command)));
        if (!me->in_flight_->expect_reply) return me->complete(Json());
        const Json j = Json::parse(*r, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
          me->stats_.garbage_bytes += r->size();
          return me->complete(fail(std::errc::protocol_error,
                                   me->in_flight_->command + ": not a JSON object: " + *r));
        }
        me->on_reply(j);
        if (me->in_flight_)  // neither "return" nor "error": no answer will come
          me->complete(fail(std::errc::protocol_error,
                            me->in_flight_->command + ": an answer without return or error"));
      });
}

void AgentClient::set_state(AgentState s) {
  if (state_ == s) return;
  const bool before = state_ == AgentState::Connected;
  state_ = s;
  const bool now = state_ == AgentState::Connected;
  if (before != now) {
    CHL_LOG_INFO("guest agent: {} ({})", now ? "connected" : "disconnected", describe());
    if (on_state_) on_state_(now);
  }
}

void AgentClient::connect() {
  if (stopped_) return;
  set_state(AgentState::Connecting);
  connector_->async_connect(io_, [self = weak_from_this()](common::Result<Connection> r) {
    auto me = self.lock();
    if (!me || me->stopped_) return;
    if (!r) {
      ++me->stats_.failed_connects;
      CHL_LOG_DEBUG("guest agent: {}", r.error().message());
      me->set_state(AgentState::Disconnected);
      me->schedule_reconnect();
      return;
    }
    me->on_connected(std::move(*r));
  });
}

void AgentClient::schedule_reconnect() {
  if (stopped_) return;
  reconnect_.expires_after(backoff_.next(std::chrono::steady_clock::now()));
  reconnect_.async_wait([self = weak_from_this()](const error_code& ec) {
    auto me = self.lock();
    if (ec || !me || me->stopped_) return;
    me->connect();
  });
}

void AgentClient::on_connected(Connection c) {
  socket_.emplace(std::move(c.socket));
  ++conn_gen_;
  parser_.reset();
  set_state(AgentState::Syncing);
  read();
  if (!c.leftover.empty()) {  // bytes that came with the handshake: before anything else
    std::vector<FrameEvent> evs;
    parser_.feed(c.leftover, evs);
    for (const auto& e : evs)
      if (e.kind == FrameEvent::Kind::Frame) ++stats_.stray_replies;
  }
  begin_sync();
}

void AgentClient::begin_sync() {
  need_sync_ = false;
  ++sync_id_;
  // 0xFF first: qemu-ga drops whatever partial input it holds (qga/qapi-schema.json,
  // guest-sync-delimited); its reply is preceded by 0xFF too, which resets our parser.
  std::string wire = "\xff";
  wire += Json{{"execute", "guest-sync-delimited"}, {"arguments", {{"id", sync_id_}}}}.dump();
  wire += "\n";
  syncing_ = true;
  const auto gen = conn_gen_;
  timer_.expires_after(opts_.sync_timeout);
  timer_.async_wait([self = weak_from_this(), gen](const error_code& ec) {
    auto me = self.lock();
    if (ec || !me || me->conn_gen_ != gen || !me->syncing_) return;
    me->drop("no answer to guest-sync-delimited within " +
             std::to_string(me->opts_.sync_timeout.count()) + " ms");
  });
  write(std::move(wire), nullptr);
}

void AgentClient::execute(std::string command, Json arguments, std::chrono::milliseconds timeout,
                          Reply reply, bool expect_reply) {
  if (stopped_ || state_ != AgentState::Connected)
    return fail_later(
        std::move(reply),
        fail(std::errc::not_connected, command + ": the guest agent is not connected").value());
  if (queue_.size() >= opts_.max_queue)
    return fail_later(std::move(reply),
                      fail(std::errc::resource_unavailable_try_again,
                           command + ": the guest agent is busy (" + std::to_string(queue_.size()) +
                               " commands waiting)")
                          .value());
  Json j = {{"execute", command}};
  if (!arguments.is_null()) j["arguments"] = std::move(arguments);
  std::string wire = j.dump() + "\n";
  queue_.push_back(Pending{std::move(command), std::move(wire), timeout, std::move(reply),
                           expect_reply, j.contains("arguments") ? j["arguments"] : Json()});
  boost::asio::post(io_, [self = weak_from_this()] {
    if (auto me = self.lock()) me->pump();
  });
}

void AgentClient::fail_later(Reply reply, common::Error e) {
  boost::asio::post(io_,
                    [reply = std::move(reply), e = std::move(e)] { reply(tl::unexpected(e)); });
}

void AgentClient::pump() {
  if (state_ != AgentState::Connected || syncing_ || in_flight_ || writing_) return;
  if (need_sync_) return begin_sync();
  if (queue_.empty()) return;
  in_flight_ = std::move(queue_.front());
  queue_.pop_front();
  const auto gen = conn_gen_;
  timer_.expires_after(in_flight_->timeout);
  timer_.async_wait([self = weak_from_this(), gen](const error_code& ec) {
    auto me = self.lock();
    if (ec || !me || me->conn_gen_ != gen || !me->in_flight_) return;
    ++me->stats_.timeouts;
    const std::string cmd = me->in_flight_->command;
    const auto t = me->in_flight_->timeout;
    // Its reply may still come: the next command resyncs first (a transport resyncs itself).
    me->need_sync_ = !me->transport_;
    me->complete(fail(std::errc::timed_out, cmd + ": the guest agent did not answer within " +
                                                std::to_string(t.count()) + " ms"));
    if (me->writing_) me->drop("the guest agent does not read its channel");
  });
  if (transport_) return send_through_transport();
  std::string wire = in_flight_->wire;
  const bool expect = in_flight_->expect_reply;
  write(
      std::move(wire), expect ? std::function<void()>() : [this] { complete(Json()); });
}

void AgentClient::write(std::string bytes, std::function<void()> written) {
  wbuf_ = std::move(bytes);
  writing_ = true;
  const auto gen = conn_gen_;
  boost::asio::async_write(*socket_, boost::asio::buffer(wbuf_),
                           [self = weak_from_this(), gen, written = std::move(written)](
                               const error_code& ec, std::size_t) {
                             auto me = self.lock();
                             if (!me || me->conn_gen_ != gen) return;
                             me->writing_ = false;
                             if (ec) return me->drop("writing to the guest agent: " + ec.message());
                             if (written) written();
                             me->pump();
                           });
}

void AgentClient::read() {
  const auto gen = conn_gen_;
  socket_->async_read_some(boost::asio::buffer(rbuf_), [self = weak_from_this(), gen](
                                                           const error_code& ec, std::size_t n) {
    auto me = self.lock();
    if (!me || me->conn_gen_ != gen) return;
    if (ec == boost::asio::error::eof) return me->drop("the guest agent closed the connection");
    if (ec) return me->drop("reading from the guest agent: " + ec.message());
    std::vector<FrameEvent> evs;
    const std::size_t garbage_before = me->parser_.garbage_bytes();
    me->parser_.feed(std::string_view(me->rbuf_.data(), n), evs);
    me->stats_.garbage_bytes += me->parser_.garbage_bytes() - garbage_before;
    for (const auto& e : evs) {
      if (me->conn_gen_ != gen) return;  // a reply's handler dropped or stopped us
      if (e.kind == FrameEvent::Kind::Overflow)
        return me->drop("the guest agent sent a reply longer than " +
                        std::to_string(me->opts_.max_frame) + " bytes");
      if (e.kind == FrameEvent::Kind::Frame) me->on_frame(e.text);
    }
    if (me->conn_gen_ == gen) me->read();
  });
}

void AgentClient::on_frame(const std::string& text) {
  const Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    stats_.garbage_bytes += text.size();
    return;
  }
  if (syncing_) {
    // Only our id ends the sync; anything else is a late reply (or the agent's complaint about
    // the 0xFF we sent) and is dropped.
    if (j.contains("return") && j["return"] == sync_id_) {
      syncing_ = false;
      timer_.cancel();
      if (state_ == AgentState::Syncing) {
        ++stats_.connects;
        backoff_.answered();
        set_state(AgentState::Connected);
      }
      pump();
    } else {
      ++stats_.stray_replies;
    }
    return;
  }
  if (!in_flight_ || !in_flight_->expect_reply) {
    ++stats_.stray_replies;
    return;
  }
  on_reply(j);
}

void AgentClient::on_reply(const Json& j) {
  if (j.contains("return")) return complete(j["return"]);
  if (j.contains("error")) {
    const Json& e = j["error"];
    std::string cls = "GenericError", desc;
    if (e.is_object()) {
      if (e.contains("class") && e["class"].is_string()) cls = e["class"].get<std::string>();
      if (e.contains("desc") && e["desc"].is_string()) desc = e["desc"].get<std::string>();
    }
    return complete(
        fail(std::errc::protocol_error, in_flight_->command + ": " + cls + ": " + desc));
  }
  ++stats_.stray_replies;  // neither: not an answer
}

void AgentClient::complete(common::Result<Json> r) {
  if (!in_flight_) return;
  Pending p = std::move(*in_flight_);
  in_flight_.reset();
  timer_.cancel();
  p.reply(std::move(r));
  boost::asio::post(io_, [self = weak_from_this()] {
    if (auto me = self.lock()) me->pump();
  });
}

void AgentClient::drop(const std::string& why) {
  const bool had_connection = socket_.has_value();
  if (had_connection) {
    error_code ignored;
    socket_->close(ignored);
    socket_.reset();
    CHL_LOG_INFO("guest agent: connection dropped: {}", why);
  }
  ++conn_gen_;
  parser_.reset();
  timer_.cancel();
  writing_ = false;
  syncing_ = false;
  need_sync_ = false;
  const auto lost = [&] {
    return fail(std::errc::connection_aborted, "the guest agent connection was lost: " + why)
        .value();
  };
  if (in_flight_) {
    Pending p = std::move(*in_flight_);
    in_flight_.reset();
    fail_later(std::move(p.reply), common::Error(lost()).wrap(p.command));
  }
  while (!queue_.empty()) {
    fail_later(std::move(queue_.front().reply), common::Error(lost()).wrap(queue_.front().command));
    queue_.pop_front();
  }
  const bool reached = state_ == AgentState::Connected;
  set_state(AgentState::Disconnected);
  if (reached) backoff_.lost(std::chrono::steady_clock::now());
  if (had_connection && !stopped_) schedule_reconnect();
}

}  // namespace chl::guest_agent

#pragma once
// One client of the guest's qemu-ga, on the launcher's event loop (Boost.Asio): it keeps one
// connection (through a Connector), resynchronises it with guest-sync-delimited, runs one command
// at a time with its own timeout, and reconnects with backoff. Nothing here blocks: a guest that
// stops answering, floods the channel or sends garbage costs a timeout or a reconnect, never the
// loop (docs/guest-agent.md).
//
// States: Disconnected -> Connecting -> Syncing -> Connected. "Connected" means the agent answered
// a guest-sync-delimited with our id, so the next reply on the stream is the next command's.
// A command that times out leaves its reply possibly still to come: the next command is preceded
// by a fresh sync that discards it (what libvirt does before every command, qemu_agent.c
// qemuAgentGuestSync). A sync that times out, EOF, a read or write error, or an over-long frame
// drop the connection; the client reconnects after a backoff (backoff.hpp: min doubling to max
// while the agent is expected, up to idle_max once it has not answered for a while).
//
// Commands are refused at once while not Connected (KubeVirt answers "agent not connected" too),
// and when the queue is full.
//
// Over a CommandTransport (command_transport.hpp: libvirt's agent API on the QEMU path) the same
// client keeps the queue, the one command in flight, the timeouts and the reply's reading; the
// transport frames and syncs, and its state reports are Connected/Disconnected (no reconnect of
// ours: libvirt holds the channel). A disconnect fails the queued commands; the one in flight is
// completed by the transport's answer or its own timeout (a guest-shutdown takes the agent down
// before libvirt's call returns).
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "guest_agent/backoff.hpp"
#include "guest_agent/command_transport.hpp"
#include "guest_agent/connector.hpp"
#include "guest_agent/framing.hpp"

namespace chl::guest_agent {

struct ClientOptions {
  std::chrono::milliseconds sync_timeout{5000};
  // The reconnect schedule (backoff.hpp): min doubling to max while the agent is expected, on to
  // idle_max once it has not answered for backoff_patience.
  std::chrono::milliseconds backoff_min{1000};
  std::chrono::milliseconds backoff_max{10000};
  std::chrono::milliseconds backoff_patience{300000};
  std::chrono::milliseconds backoff_idle_max{60000};
  std::size_t max_queue = 32;        // commands waiting behind the one in flight
  std::size_t max_frame = 4u << 20;  // a longer reply is a protocol error
  std::size_t read_chunk = 64u << 10;
};

enum class AgentState { Disconnected, Connecting, Syncing, Connected };
const char* to_string(AgentState s);

struct ClientStats {
  std::uint64_t connects = 0;  // connections that reached Connected
  std::uint64_t failed_connects = 0;
  std::uint64_t timeouts = 0;       // commands that timed out
  std::uint64_t stray_replies = 0;  // replies nobody waited for (late, or unsolicited)
  std::uint64_t garbage_bytes = 0;  // bytes outside any JSON object
};

class AgentClient : public std::enable_shared_from_this<AgentClient> {
 public:
  // The command's "return" value, or its error: the agent's {"error":{"class","desc"}} as
  // "<command>: <class>: <desc>" (errc::protocol_error), a timeout (errc::timed_out), the
  // connection lost (errc::connection_aborted), not connected (errc::not_connected), the
  // queue full (errc::resource_unavailable_try_again).
  using Reply = std::function<void(common::Result<nlohmann::json>)>;
  using StateHandler = std::function<void(bool connected)>;

  static std::shared_ptr<AgentClient> create(boost::asio::io_context& io,
                                             std::unique_ptr<Connector> connector,
                                             ClientOptions options = {});
  static std::shared_ptr<AgentClient> create(boost::asio::io_context& io,
                                             std::shared_ptr<CommandTransport> transport,
                                             ClientOptions options = {});
  ~AgentClient();
  AgentClient(const AgentClient&) = delete;
  AgentClient& operator=(const AgentClient&) = delete;

  // Called on every change between connected and not (io thread). Set before start().
  void set_state_handler(StateHandler h) { on_state_ = std::move(h); }
  void start();
  // Close for good: the command in flight and the queued ones fail, no reconnect.
  void stop();

  // Queue `command` (with `arguments` unless null); `reply` runs exactly once, on the io thread,
  // never from inside this call. `expect_reply` false: the command answers nothing on success
  // (guest-shutdown, guest-suspend-*): it completes once written.
  void execute(std::string command, nlohmann::json arguments, std::chrono::milliseconds timeout,
               Reply reply, bool expect_reply = true);

  [[nodiscard]] AgentState state() const { return state_; }
  [[nodiscard]] bool connected() const { return state_ == AgentState::Connected; }
  [[nodiscard]] const ClientStats& stats() const { return stats_; }
  [[nodiscard]] std::string describe() const {
    return transport_ ? transport_->describe() : connector_->describe();
  }

 private:
  struct Pending {
    std::string command;
    std::string wire;  // the bytes to write
    std::chrono::milliseconds timeout;
    Reply reply;
    bool expect_reply;
    nlohmann::json arguments;  // for a CommandTransport, which may map the command to its own API
  };

  AgentClient(boost::asio::io_context& io, std::unique_ptr<Connector> connector,
              std::shared_ptr<CommandTransport> transport, ClientOptions options);
  void connect();
  void on_connected(Connection c);
  void begin_sync();
  void pump();
  void write(std::string bytes, std::function<void()> written);
  void read();
  void on_frame(const std::string& text);
  void on_reply(const nlohmann::json& j);  // the in-flight command's answer
  void send_through_transport();           // command_transport mode's pump
  void on_transport_state(bool up);
  void complete(common::Result<nlohmann::json> r);
  void drop(const std::string& why);
  void schedule_reconnect();
  void set_state(AgentState s);
  void fail_later(Reply reply, common::Error e);

  boost::asio::io_context& io_;
  std::unique_ptr<Connector> connector_;         // stream mode
  std::shared_ptr<CommandTransport> transport_;  // command mode (one of the two)
  ClientOptions opts_;
  std::optional<Socket> socket_;
  std::uint64_t conn_gen_ = 0;  // bumps per connection: stale handlers compare and leave
  FrameParser parser_;
  std::vector<char> rbuf_;
  std::string wbuf_;
  bool writing_ = false;
  boost::asio::steady_timer timer_;      // the sync or command in flight
  boost::asio::steady_timer reconnect_;  // backoff
  ReconnectBackoff backoff_;
  AgentState state_ = AgentState::Disconnected;
  bool was_connected_ = false;
  bool stopped_ = false;
  bool started_ = false;
  bool need_sync_ = false;
  bool syncing_ = false;  // a guest-sync-delimited is in flight
  std::int64_t sync_id_ = 0;
  std::optional<Pending> in_flight_;
  std::deque<Pending> queue_;
  StateHandler on_state_;
  ClientStats stats_;
};

}  // namespace chl::guest_agent

#pragma once
// One connected console client, output side: a bounded queue of guest output with one write
// in flight. Output is written at once when nothing is queued (no extra wakeup on the fast
// path); otherwise queued and sent with gathered writes when the socket is writable. A client
// whose queue would pass its bound has stopped reading: it is dropped, nobody waits for it.
// The bridge drives the input side (reads on socket(), with backpressure from the PTY).
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include <boost/asio/local/stream_protocol.hpp>

namespace chl::console_bridge {

class ClientSession : public std::enable_shared_from_this<ClientSession> {
 public:
  using Socket = boost::asio::local::stream_protocol::socket;
  // Called once when the session closes; `dropped` is true when it overflowed.
  using ClosedHandler = std::function<void(ClientSession&, const std::string& reason, bool dropped)>;

  ClientSession(Socket socket, std::size_t max_queued, std::uint64_t id);
  ClientSession(const ClientSession&) = delete;
  ClientSession& operator=(const ClientSession&) = delete;

  void set_on_closed(ClosedHandler h) { on_closed_ = std::move(h); }

  // Queue output for the client. Returns false if the session is (now) closed.
  bool send(std::span<const char> data);
  // Write a short line now if the socket takes it (never waits), then close.
  void close_with_notice(std::string_view notice, const std::string& reason);
  void close(const std::string& reason, bool dropped = false);

  [[nodiscard]] bool is_open() const { return open_; }
  // True when the peer has closed its end (POLLHUP/POLLERR) even if the bridge has not read
  // the EOF yet: a client that disconnected a moment ago must not block the next one.
  [[nodiscard]] bool peer_hung_up();
  [[nodiscard]] std::size_t queued() const { return queued_; }
  [[nodiscard]] std::uint64_t id() const { return id_; }
  Socket& socket() { return socket_; }

  bool reading = false;  // an input read is armed (owned by the bridge)

 private:
  // Send as much of the queue as the socket takes now; arms a writability wait for the rest.
  void flush();
  void on_writable(const boost::system::error_code& ec);
  // One non-blocking send; returns bytes sent, 0 on EAGAIN, -1 on error (errno set).
  long send_now(const char* data, std::size_t len);

  Socket socket_;
  std::size_t max_queued_;
  std::uint64_t id_;
  std::deque<std::string> queue_;
  std::size_t front_offset_ = 0;  // bytes of queue_.front() already sent
  std::size_t queued_ = 0;        // bytes waiting in queue_
  bool write_waiting_ = false;    // the one write in flight
  bool open_ = true;
  ClosedHandler on_closed_;
};

}  // namespace chl::console_bridge

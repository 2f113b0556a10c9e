#pragma once
// The console bridge: relays a guest's serial PTY to the `virt-serial0` Unix socket that
// `virtctl console` (through virt-handler) and `ch-launcher console` connect to.
//
//  - Guest output is never lost for lack of a listener: it is appended to the console log
//    (size-capped, one rotation) and kept in a bounded scrollback that a new client receives
//    first, before live output.
//  - One interactive client at a time; another connection gets a one-line notice and is
//    closed, or takes the session over when `take_over` is set.
//  - The event loop never blocks: one write in flight per peer, bounded buffers, a client that
//    stops reading is dropped (the guest keeps running and logging), client input waits while
//    the PTY is full (the client is not read meanwhile).
//  - A hangup of the PTY (read gives EIO or end of file) releases it from the event loop and a
//    timer checks every `reopen_interval` whether it is back — no spinning. Client input typed
//    meanwhile is held (the client is not read). A new PTY can be attached at any time.
//    On a master fd the kernel stops reporting the hangup once the old slave is released,
//    without saying whether a new one is open: the bridge reads again then, and holds client
//    input until the guest side writes something.
//    On a slave path the hung-up fd is kept open until the next attach or stop(): it pins the
//    /dev/pts/N number, which the kernel would otherwise hand to the next terminal opened on the
//    machine. The path is reopened only while it still leads to that same PTY (a vhangup with
//    the master still open); once the master is gone the VMM's next PTY has another number and
//    comes through attach_pty_path(). (Reopening the bare path after closing the old fd attached
//    the bridge to unrelated terminals and read their input: the "stalls and wrong bytes" of
//    issue 5 were another test's bridge doing that. See docs/console.md.)
//
// It knows nothing of the VMM: give it a socket path and a PTY (path or fd). It runs on an
// io_context the caller owns and runs; call its methods from that io_context's thread (or
// before the loop runs). stats() may be read from any thread.
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>

#include <boost/asio/io_context.hpp>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace chl::console_bridge {

struct BridgeOptions {
  std::filesystem::path socket_path;  // e.g. "<state-dir>/virt-serial0"; required
  std::filesystem::path log_path;     // empty: socket_path + "-log" ("virt-serial0-log")
  bool write_log = true;              // false: no log file (KubeVirt's logSerialConsole: false)
  std::uint64_t log_max_bytes = 4 * 1024 * 1024;  // per file; one rotation to "<log>.1"
  std::size_t scrollback_bytes = 16 * 1024;       // replayed to a newly connected client
  // Output queued for a client that does not read before it is dropped (at least the scrollback).
  std::size_t client_buffer_bytes = 1024 * 1024;
  bool take_over = false;             // a new connection replaces the active one
  std::optional<gid_t> socket_group;  // set: socket mode 0660 with this group; else 0600
  std::chrono::milliseconds reopen_interval{250};  // how often a hung-up PTY is checked
  bool raw_pty = true;  // attach_pty_path(): put the opened terminal in raw mode
};

struct BridgeStats {
  std::uint64_t bytes_from_pty = 0;  // guest output read
  std::uint64_t bytes_to_pty = 0;    // client input written
  std::uint64_t clients_accepted = 0;
  std::uint64_t clients_refused = 0;
  std::uint64_t clients_dropped = 0;     // stopped reading, buffer full
  std::uint64_t clients_taken_over = 0;  // replaced by a newer connection (take_over)
  std::uint64_t pty_hangups = 0;
  std::uint64_t pty_returns = 0;  // PTY usable again after a hangup or a new attach
  std::uint64_t pty_wakeups = 0;  // readiness callbacks + hangup checks (to see it never spins)
  std::uint64_t log_errors = 0;
  bool pty_up = false;
  bool client_connected = false;
};

class Bridge {
 public:
  Bridge(boost::asio::io_context& io, BridgeOptions options);
  ~Bridge();  // stop()
  Bridge(const Bridge&) = delete;
  Bridge& operator=(const Bridge&) = delete;

  // Open the console log and listen on the socket. Clients may connect before a PTY is
  // attached (they get the scrollback and then output once it flows).
  common::Status start();
  // Open a PTY by path (Cloud Hypervisor's `config.serial.file`, a /dev/pts/N) and relay it.
  // After a hangup the path is reopened only while it is the same PTY (see above); a PTY whose
  // master closed is gone for good. Replaces any attached PTY.
  common::Status attach_pty_path(const std::filesystem::path& path);
  // Relay an already open PTY end (master or slave). After a hangup the same fd is watched
  // until the other side is back. Replaces any attached PTY. Sets O_NONBLOCK on it.
  common::Status attach_pty_fd(common::UniqueFd fd);
  // Close the socket (and remove it), the client and the PTY; flushes nothing further.
  // Idempotent. Pending handlers complete as cancelled.
  void stop();

  [[nodiscard]] BridgeStats stats() const;
  [[nodiscard]] const BridgeOptions& options() const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace chl::console_bridge

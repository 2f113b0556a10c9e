#pragma once
// The client a person (or a script) uses: `ch-launcher console`. Connects to the bridge's
// socket and relays stdin → socket and socket → stdout.
//  - stdin a terminal: raw mode for the session, `Ctrl+]` (escape) leaves, a banner on stderr
//    says so; the terminal settings are restored on every way out (escape, connection closed,
//    SIGINT/SIGTERM/SIGHUP/SIGQUIT, errors).
//  - stdin not a terminal (pipe mode, scripts): no raw mode, no escape byte; when stdin ends the
//    client keeps printing output for `linger`, then exits.
// It leaves when the bridge closes the connection (the VM ended, or another session took over).
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "common/error.hpp"

namespace chl::console_bridge {

struct ClientOptions {
  std::filesystem::path socket_path;
  int in_fd = STDIN_FILENO;
  int out_fd = STDOUT_FILENO;
  int err_fd = STDERR_FILENO;          // banner and closing notes
  unsigned char escape = 0x1d;         // Ctrl+]
  std::chrono::milliseconds linger{500};  // pipe mode: output still relayed after stdin ends
};

enum class ClientEnd {
  escaped,        // Ctrl+] typed
  remote_closed,  // the bridge closed the connection (VM ended, taken over)
  refused,        // another console session is active
  input_ended,    // pipe mode: stdin ended (after the linger time)
  signalled,      // SIGINT/SIGTERM/SIGHUP/SIGQUIT
};

struct ClientResult {
  ClientEnd end = ClientEnd::remote_closed;
  int signal = 0;
  // 0, except refused (1) and signalled (128 + signal).
  [[nodiscard]] int exit_code() const;
};

class ConsoleClient {
 public:
  explicit ConsoleClient(ClientOptions options) : opts_(std::move(options)) {}
  // Connect and relay until one of the ends above. Errors: connecting, terminal setup, I/O.
  common::Result<ClientResult> run();

 private:
  ClientOptions opts_;
};

}  // namespace chl::console_bridge

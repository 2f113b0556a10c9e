#pragma once
// Puts a terminal in raw mode and restores the saved settings when destroyed (move-only).
#include <termios.h>

#include "common/error.hpp"

namespace chl::console_bridge {

class RawTerminal {
 public:
  // Save `fd`'s settings and switch it to raw mode (cfmakeraw: no echo, no line editing, no
  // signals from ^C/^Z, no output processing).
  static common::Result<RawTerminal> enter(int fd);

  RawTerminal(RawTerminal&& o) noexcept : fd_(o.fd_), saved_(o.saved_) { o.fd_ = -1; }
  RawTerminal& operator=(RawTerminal&&) = delete;
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;
  ~RawTerminal() { (void)restore(); }

  // Put the saved settings back (once). Also done by the destructor.
  common::Status restore();

 private:
  RawTerminal(int fd, const termios& saved) : fd_(fd), saved_(saved) {}
  int fd_ = -1;
  termios saved_{};
};

}  // namespace chl::console_bridge

#include "console_bridge/raw_terminal.hpp"

#include <unistd.h>

#include "common/syscall.hpp"

namespace chl::console_bridge {

using common::fail_errno;

common::Result<RawTerminal> RawTerminal::enter(int fd) {
  termios saved{};
  if (::tcgetattr(fd, &saved) != 0) return fail_errno("reading terminal settings");
  termios raw = saved;
  ::cfmakeraw(&raw);
  if (common::retry_eintr([&] { return ::tcsetattr(fd, TCSADRAIN, &raw); }) != 0) {
    return fail_errno("switching the terminal to raw mode");
  }
  return RawTerminal(fd, saved);
}

common::Status RawTerminal::restore() {
  if (fd_ < 0) return {};
  int fd = fd_;
  fd_ = -1;
  if (common::retry_eintr([&] { return ::tcsetattr(fd, TCSADRAIN, &saved_); }) != 0) {
    return fail_errno("restoring the terminal settings");
  }
  return {};
}

}  // namespace chl::console_bridge

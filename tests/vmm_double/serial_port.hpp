#pragma once
// The guest's serial line as Cloud Hypervisor wires it, by mode: Pty (a new PTY whose slave
// path goes into config.serial.file; CH keeps the slave open itself so a client may come and
// go), Tty (the VMM's own stdin/stdout), File (output appended to a file), Off/Null (nothing).
// Socket mode is accepted but carries nothing in the double. Output never blocks: bytes wait
// in a bounded buffer and are dropped when nobody drains the PTY (as a UART overruns).
#include <string>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace chl::vmm_double {

class SerialPort {
 public:
  enum class Mode { Off, Null, Pty, Tty, File, Socket };
  static Mode parse_mode(const std::string& s);

  // Create the device. For Pty returns the slave path in `path()`.
  static common::Result<SerialPort> open(Mode mode, const std::string& file);

  [[nodiscard]] Mode mode() const { return mode_; }
  [[nodiscard]] const std::string& path() const { return path_; }
  // Where guest input comes from (-1: none) and where output goes.
  [[nodiscard]] int input_fd() const;
  [[nodiscard]] int output_fd() const;
  [[nodiscard]] bool output_pending() const { return !out_.empty() && output_fd() >= 0; }

  void write(const std::string& bytes);
  void flush();
  // Read what is there (non-blocking); false on hangup/EOF.
  bool read(std::string& into);

 private:
  Mode mode_ = Mode::Null;
  std::string path_;
  common::UniqueFd master_;  // Pty: master; File: the file
  common::UniqueFd slave_;   // Pty: kept open so the master never sees EIO
  std::string out_;
  static constexpr std::size_t kMaxOut = 256 * 1024;
};

}  // namespace chl::vmm_double

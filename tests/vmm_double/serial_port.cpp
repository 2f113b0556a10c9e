#include "tests/vmm_double/serial_port.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>

#include "common/syscall.hpp"

namespace chl::vmm_double {

SerialPort::Mode SerialPort::parse_mode(const std::string& s) {
  if (s == "Off") return Mode::Off;
  if (s == "Pty") return Mode::Pty;
  if (s == "Tty") return Mode::Tty;
  if (s == "File") return Mode::File;
  if (s == "Socket") return Mode::Socket;
  return Mode::Null;
}

common::Result<SerialPort> SerialPort::open(Mode mode, const std::string& file) {
  SerialPort p;
  p.mode_ = mode;
  if (mode == Mode::Pty) {
    // CH v52's create_pty (vmm/src/console_devices.rs): /dev/pts/ptmx, else /dev/ptmx
    // (O_RDWR | O_NONBLOCK), TIOCSPTLCK 0, the peer from TIOCGPTPEER (never opened by its path,
    // which another mount namespace may not see), its name read back from /proc/self/fd.
    common::UniqueFd master(::open("/dev/pts/ptmx", O_RDWR | O_NONBLOCK | O_CLOEXEC));
    if (!master) master = common::UniqueFd(::open("/dev/ptmx", O_RDWR | O_NONBLOCK | O_CLOEXEC));
    if (!master) return common::fail_errno("open /dev/ptmx");
    int unlock = 0;
    (void)::ioctl(master.get(), TIOCSPTLCK, &unlock);
    common::UniqueFd slave(::ioctl(master.get(), TIOCGPTPEER, O_NOCTTY | O_RDWR | O_CLOEXEC));
    if (!slave) return common::fail_errno("TIOCGPTPEER");
    char name[256];
    const std::string link = "/proc/self/fd/" + std::to_string(slave.get());
    const ssize_t n = ::readlink(link.c_str(), name, sizeof name - 1);
    if (n <= 0) return common::fail_errno("readlink " + link);
    name[n] = '\0';
    termios t{};
    if (::tcgetattr(slave.get(), &t) == 0) {
      ::cfmakeraw(&t);
      (void)::tcsetattr(slave.get(), TCSANOW, &t);
    }
    p.path_ = name;
    p.master_ = std::move(master);
    p.slave_ = std::move(slave);
  } else if (mode == Mode::Tty) {
    // The guest must never stall the loop on a slow terminal or pipe.
    const int fl = ::fcntl(STDOUT_FILENO, F_GETFL);
    if (fl >= 0) (void)::fcntl(STDOUT_FILENO, F_SETFL, fl | O_NONBLOCK);
  } else if (mode == Mode::File) {
    common::UniqueFd f(
        ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK | O_CLOEXEC, 0640));
    if (!f) return common::fail_errno("open serial file " + file);
    p.master_ = std::move(f);
    p.path_ = file;
  }
  return p;
}

int SerialPort::input_fd() const {
  switch (mode_) {
    case Mode::Pty:
      return master_.get();
    case Mode::Tty:
      return STDIN_FILENO;
    default:
      return -1;
  }
}

int SerialPort::output_fd() const {
  switch (mode_) {
    case Mode::Pty:
    case Mode::File:
      return master_.get();
    case Mode::Tty:
      return STDOUT_FILENO;
    default:
      return -1;
  }
}

void SerialPort::write(const std::string& bytes) {
  if (output_fd() < 0) return;
  if (out_.size() + bytes.size() > kMaxOut) return;  // overrun: nobody reads the line
  out_ += bytes;
  flush();
}

void SerialPort::flush() {
  const int fd = output_fd();
  while (fd >= 0 && !out_.empty()) {
    const ssize_t n = common::retry_eintr([&] { return ::write(fd, out_.data(), out_.size()); });
    if (n > 0) {
      out_.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    out_.clear();
    return;
  }
}

bool SerialPort::read(std::string& into) {
  const int fd = input_fd();
  if (fd < 0) return true;
  char buf[4096];
  for (;;) {
    const ssize_t n = common::retry_eintr([&] { return ::read(fd, buf, sizeof buf); });
    if (n > 0) {
      into.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;  // EOF, or EIO on a PTY master: hangup
  }
}

}  // namespace chl::vmm_double

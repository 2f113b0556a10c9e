#pragma once
// A child process (QEMU with `-serial stdio`, in the guest tests) whose stdin/stdout is a guest's
// serial console: start it, read what it prints, type into it, wait for it to exit. The child is
// killed and reaped on destruction.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/child_process.hpp"
#include "common/unique_fd.hpp"

namespace chl::test {

class SerialChild {
 public:
  // Start argv (argv[0] a full path) with a clean PATH; false (and the reason in output()) on error.
  bool start(std::vector<std::string> argv) {
    ::signal(SIGPIPE, SIG_IGN);  // a write after the child exited must fail, not kill the test
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0) return false;
    if (::pipe2(out, O_CLOEXEC) != 0) {
      ::close(in[0]);
      ::close(in[1]);
      return false;
    }
    in_.reset(in[1]);
    out_.reset(out[0]);
    common::SpawnOptions o;
    o.argv = std::move(argv);
    o.env = {"PATH=/usr/bin:/bin"};
    o.stdin_fd = in[0];
    o.stdout_fd = out[1];
    o.stderr_fd = out[1];
    auto child = common::ChildProcess::spawn(o);
    ::close(in[0]);
    ::close(out[1]);
    if (!child) {
      output_ = child.error().message();
      return false;
    }
    child_ = std::move(*child);
    return true;
  }

  // Read what is available within `ms`.
  void pump(int ms) {
    pollfd p{out_.get(), POLLIN, 0};
    if (::poll(&p, 1, ms) <= 0) return;
    char buf[4096];
    ssize_t n = ::read(out_.get(), buf, sizeof buf);
    if (n > 0) output_.append(buf, static_cast<std::size_t>(n));
  }

  // Wait until `what` appears in the output (at or after `from`).
  bool wait_output(const std::string& what, std::chrono::milliseconds timeout, std::size_t from = 0) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (output_.find(what, from) == std::string::npos) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      pump(50);
    }
    return true;
  }

  // Wait for the child to exit, draining its output meanwhile.
  std::optional<common::ExitStatus> wait_exit(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      pump(50);
      auto st = child_.try_wait();
      if (st && *st) {
        for (int i = 0; i < 5; ++i) pump(10);
        return *st;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    }
  }

  void send(const std::string& s) {
    std::size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::write(in_.get(), s.data() + off, s.size() - off);
      if (n <= 0) break;
      off += static_cast<std::size_t>(n);
    }
  }

  [[nodiscard]] std::size_t count(const std::string& what) const {
    std::size_t n = 0;
    for (auto pos = output_.find(what); pos != std::string::npos; pos = output_.find(what, pos + 1)) ++n;
    return n;
  }
  [[nodiscard]] const std::string& output() const { return output_; }
  // The output with the tty's CRLF turned back into LF.
  [[nodiscard]] std::string text() const {
    std::string t;
    t.reserve(output_.size());
    for (std::size_t i = 0; i < output_.size(); ++i) {
      if (output_[i] == '\r' && i + 1 < output_.size() && output_[i + 1] == '\n') continue;
      t += output_[i];
    }
    return t;
  }

 private:
  common::ChildProcess child_;
  common::UniqueFd in_, out_;
  std::string output_;
};

}  // namespace chl::test

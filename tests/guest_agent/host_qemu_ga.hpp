#pragma once
// A REAL qemu-ga (Debian's qemu-guest-agent) started on the HOST in unix-listen mode, for the
// tests that need the real agent's answers without a guest. A qemu-ga on the host acts on the
// host, so every command that would change it is blocked (--block-rpcs): freezing / or /work
// would hang the machine; shutdown, suspend, time, users' passwords and SSH keys, files, vCPUs
// and memory blocks likewise. Tests exec only harmless programs (true, false, echo). Freeze and
// SSH keys are tested only inside a guest VM, never here.
#include <filesystem>
#include <optional>
#include <string>

#include "common/child_process.hpp"
#include "tests/support/test_support.hpp"

namespace chl::test {

inline const char* kHostAgentBlockedRpcs =
    "guest-set-time,guest-shutdown,guest-file-open,guest-file-close,guest-file-read,"
    "guest-file-write,guest-file-seek,guest-file-flush,guest-fsfreeze-freeze,"
    "guest-fsfreeze-freeze-list,guest-fsfreeze-thaw,guest-fstrim,guest-suspend-disk,"
    "guest-suspend-ram,guest-suspend-hybrid,guest-set-vcpus,guest-set-user-password,"
    "guest-set-memory-blocks,guest-ssh-add-authorized-keys,guest-ssh-remove-authorized-keys";

class HostQemuGa {
 public:
  // Starts qemu-ga listening on `socket` (state, pid file and log under `dir`); nullopt with the
  // reason in `why` when qemu-ga is not installed or does not come up.
  static std::optional<HostQemuGa> start(const std::filesystem::path& dir,
                                         const std::filesystem::path& socket, std::string& why) {
    std::string bin;
    for (const char* p : {"/usr/sbin/qemu-ga", "/usr/bin/qemu-ga"})
      if (std::filesystem::exists(p)) bin = p;
    if (bin.empty()) {
      why = "qemu-ga is not installed (Debian package qemu-guest-agent; scripts/setup.sh)";
      return std::nullopt;
    }
    std::filesystem::create_directories(dir / "state");
    common::SpawnOptions o;
    o.argv = {bin,
              "-m",
              "unix-listen",
              "-p",
              socket.string(),
              "-f",
              (dir / "qemu-ga.pid").string(),
              "-t",
              (dir / "state").string(),
              "-l",
              (dir / "qemu-ga.log").string(),
              "--block-rpcs=" + std::string(kHostAgentBlockedRpcs)};
    o.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
    auto child = common::ChildProcess::spawn(o);
    if (!child) {
      why = "qemu-ga did not start: " + child.error().message();
      return std::nullopt;
    }
    if (!wait_until(std::chrono::milliseconds(5000),
                    [&] { return std::filesystem::exists(socket); })) {
      why = "qemu-ga did not create " + socket.string() + ": " + read_file(dir / "qemu-ga.log");
      return std::nullopt;
    }
    return HostQemuGa(std::move(*child), dir);
  }
  void kill() { (void)child_.kill_and_reap(); }
  std::string log() const { return read_file(dir_ / "qemu-ga.log"); }

 private:
  HostQemuGa(common::ChildProcess c, std::filesystem::path dir)
      : child_(std::move(c)), dir_(std::move(dir)) {}
  common::ChildProcess child_;
  std::filesystem::path dir_;
};

}  // namespace chl::test

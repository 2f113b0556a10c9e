#pragma once
// Debian's real virtiofsd, started by a test as KubeVirt's virtiofs container starts it
// (pkg/virt-controller/services/virtiofs.go: --socket-path=<dir>/<name>.sock --shared-dir=<volume>
// --sandbox=none --cache=auto). bookworm has no `virtiofsd` package (the Rust one came with
// trixie): its virtiofsd is QEMU 7.2's, in qemu-system-common (/usr/lib/qemu/virtiofsd), with
// the same socket and the same vhost-user protocol but its own flags (-o source=, -o cache=,
// -o sandbox=chroot, which needs root). The Rust one (/usr/libexec/virtiofsd) is used when there.
// Header-only, as linux_guest.hpp.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/child_process.hpp"
#include "tests/support/test_support.hpp"

namespace chl::test {

struct Virtiofsd {
  common::ChildProcess child;
  std::filesystem::path socket;
  std::filesystem::path log;

  // The daemon still runs (it exits once its one frontend hangs up).
  bool running() {
    auto st = child.try_wait();
    return st && !*st;
  }
};

// Which virtiofsd, and whether it can run here; nullopt with the reason in *why.
inline std::optional<std::string> find_virtiofsd(std::string* why) {
  for (const char* p : {"/usr/libexec/virtiofsd", "/usr/lib/qemu/virtiofsd"}) {
    if (::access(p, X_OK) != 0) continue;
    if (std::string(p) == "/usr/lib/qemu/virtiofsd" && ::geteuid() != 0) {
      if (why) *why = "QEMU's virtiofsd (bookworm's) needs root for its chroot sandbox";
      return std::nullopt;
    }
    return std::string(p);
  }
  if (why)
    *why = "no virtiofsd (/usr/libexec/virtiofsd or qemu-system-common's /usr/lib/qemu/virtiofsd)";
  return std::nullopt;
}

// Start virtiofsd sharing `shared_dir` on `socket`, output to `log`; REQUIREs the spawn. With
// `wait`, returns once the socket is there (at most 10 s).
inline Virtiofsd start_virtiofsd(const std::string& binary, const std::filesystem::path& socket,
                                 const std::filesystem::path& shared_dir,
                                 const std::filesystem::path& log, bool wait = true) {
  std::vector<std::string> argv{binary, "--socket-path=" + socket.string()};
  if (binary == "/usr/libexec/virtiofsd") {
    argv.insert(argv.end(),
                {"--shared-dir=" + shared_dir.string(), "--sandbox=none", "--cache=auto"});
  } else {
    argv.insert(argv.end(), {"-o", "source=" + shared_dir.string(), "-o", "cache=auto", "-o",
                             "sandbox=chroot"});
  }
  common::SpawnOptions so;
  so.argv = argv;
  int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  so.stdout_fd = out;
  so.stderr_fd = out;
  auto c = common::ChildProcess::spawn(so);
  ::close(out);
  REQUIRE_MESSAGE(c, "spawning " << binary);
  Virtiofsd d{std::move(*c), socket, log};
  if (wait) {
    const bool up = wait_until(
        std::chrono::seconds(10), [&] { return std::filesystem::exists(socket); },
        std::chrono::milliseconds(10));
    REQUIRE_MESSAGE(up, "virtiofsd did not create " << socket << ": " << read_file(log));
  }
  return d;
}

}  // namespace chl::test

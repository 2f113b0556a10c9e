// Which libvirt daemon the launcher uses for its uid (daemon.hpp, daemon_options_for_user):
// root → qemu:///system; any other uid (KubeVirt's non-root launcher, 107) → libvirt's session
// daemon under $XDG_RUNTIME_DIR, or a clear error. The non-root cases run in a forked child that
// became another uid (root needed; skipped, saying so, without). The session daemon itself,
// with QEMU and a real guest, is driven in tests/kubevirt/test_virt_launcher_network.cpp.
#include <doctest/doctest.h>
#include <pwd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "drivers/libvirt/daemon.hpp"
#include "tests/support/test_support.hpp"

namespace {

using chl::libvirt::connect_uri;
using chl::libvirt::daemon_options_for_user;
using chl::libvirt::qemu_pid_dir;

// What daemon_options_for_user says as uid `uid` with XDG_RUNTIME_DIR `xdg` (nullptr: unset),
// in a child: "error: <message>" or "uri=… pid_dir=… run_dir=… env=…".
std::string as_uid(uid_t uid, const char* xdg) {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(p[0]);
    std::string out;
    if (::setresgid(uid, uid, uid) != 0 || ::setresuid(uid, uid, uid) != 0) {
      out = "setresuid failed";
    } else {
      if (xdg != nullptr) ::setenv("XDG_RUNTIME_DIR", xdg, 1);
      else ::unsetenv("XDG_RUNTIME_DIR");
      ::unsetenv("XDG_CONFIG_HOME");
      ::unsetenv("XDG_CACHE_HOME");
      auto o = daemon_options_for_user();
      if (!o) {
        out = "error: " + o.error().message();
      } else {
        out = "session=" + std::to_string(o->session) + " uri=" + connect_uri(*o) + " pid_dir=" + qemu_pid_dir(*o).string() +
              " run_dir=" + o->run_dir.string() + " env=";
        for (const auto& e : o->session_env) out += e + ";";
      }
    }
    (void)!::write(p[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(p[1]);
  std::string got;
  char buf[512];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
  ::close(p[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return got;
}

}  // namespace

TEST_CASE("libvirt daemon for the launcher's uid: root uses qemu:///system, another uid libvirt's session daemon under XDG_RUNTIME_DIR, or says what is missing") {
  if (::geteuid() != 0) {
    chl::test::skip("needs root (to become other uids in a child)");
    return;
  }
  auto root = daemon_options_for_user();
  REQUIRE(root);
  CHECK_FALSE(root->session);
  CHECK(connect_uri(*root) == "qemu:///system");
  CHECK(qemu_pid_dir(*root) == "/run/libvirt/qemu");
  CHECK(root->libvirtd_socket == "/run/libvirt/libvirt-sock");

  // nobody (65534) has a user record on Debian.
  const passwd* nobody = ::getpwuid(65534);
  if (nobody == nullptr) {
    chl::test::skip("no user record for uid 65534 (nobody)");
    return;
  }
  chl::test::TempDir dir("chl-session");
  REQUIRE(::chown(dir.path().c_str(), 65534, 65534) == 0);
  const std::string d = dir.path().string();
  CHECK(as_uid(65534, d.c_str()) ==
        "session=1 uri=qemu+unix:///session?socket=" + d + "/libvirt/libvirt-sock pid_dir=" + d +
            "/libvirt/qemu/run run_dir=" + d + "/ch-launcher/libvirt env=XDG_RUNTIME_DIR=" + d + ";XDG_CONFIG_HOME=" + d +
            "/ch-launcher/libvirt/config;XDG_CACHE_HOME=" + d + "/ch-launcher/libvirt/cache;" +
            (std::getenv("HOME") ? std::string("HOME=") + std::getenv("HOME") + ";" : std::string()));
  CHECK(as_uid(65534, nullptr) ==
        "error: running as uid 65534 (not root), libvirt's session daemon needs XDG_RUNTIME_DIR (KubeVirt's non-root "
        "pod sets /var/run), and it is not set");
  CHECK(as_uid(65534, "/nonexistent-chl") ==
        "error: running as uid 65534 (not root), libvirt's session daemon needs XDG_RUNTIME_DIR, and /nonexistent-chl is "
        "not a directory");
  // A uid without a user record: libvirt's session daemon would refuse the connection.
  if (::getpwuid(64999) == nullptr)
    CHECK(as_uid(64999, d.c_str()) ==
          "error: running as uid 64999 (not root), libvirt's session daemon needs a user record for uid 64999 "
          "(/etc/passwd; KubeVirt's launcher image has qemu:107), and there is none");
}

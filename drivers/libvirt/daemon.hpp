#pragma once
// The libvirt daemon the QEMU driver talks to (qemu:///system). When one answers on its socket
// it is used as is. When none does, the launcher starts its own — `virtlogd -d` first, then
// `libvirtd -d`, both with pid files under `run_dir` — the way KubeVirt's virt-launcher runs
// a daemon inside its pod, and stops them when the last launcher using them goes.
//
// Our libvirtd runs in a private mount namespace in which `run_dir/qemu.conf` is bind-mounted
// over /etc/libvirt/qemu.conf (the host's file is never edited): QEMU runs as root there, so
// libvirt's check "is /dev/kvm usable by the QEMU user" agrees with its capability probe and
// the probe is cached instead of re-run (~48-60 s) on every domain start (docs/qemu/daemon.md).
//
// Lifetime: the daemons a launcher starts run with --timeout (idle_exit below): each launcher
// using them holds a connection to both (the "keepers", opened in ensure() under the start
// lock), so they stay while any launcher lives, and end by themselves a few seconds after the
// last one is gone however it went — release() at a normal exit just does it at once.
//
// Sharing: several launchers on one node share one daemon. `run_dir/daemons.lock` is held
// shared by every launcher using a launcher-started daemon; the one that can take it
// exclusively at exit is the last, and stops the daemons. `run_dir/daemons.start.lock` is held
// exclusively, briefly, while a launcher chooses or starts the daemons and while a leaving one
// decides whether it is the last: a launcher never waits for another to finish its run. A daemon that was not started by a
// launcher (no live pid file of ours) is never stopped.
//
// Session mode (the launcher is not root: KubeVirt's non-root virt-launcher, uid 107, no
// capability): the daemons run as the launcher's user, in libvirt's session mode, under
// $XDG_RUNTIME_DIR/libvirt (KubeVirt's pod sets XDG_RUNTIME_DIR=/var/run, XDG_CONFIG_HOME and
// XDG_CACHE_HOME=/var/run/kubevirt-private: virt-controller's rendercontainer.go); QEMU runs as
// that user too, so there is no qemu.conf to bind-mount (no mount namespace either: that would
// need CAP_SYS_ADMIN). `daemon_options_for_user` picks the mode from the effective uid.
//
// Liveness is decided by connecting to the socket and by /proc/<pid>/stat (a killed daemon
// can linger as a zombie: kill(pid, 0) still succeeds on it), never by the socket file's
// existence or kill(pid, 0) alone.
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

struct _virConnect;

namespace chl::libvirt {

struct LibvirtDaemonOptions {
  std::filesystem::path run_dir = "/run/ch-launcher/libvirt";  // pid files, qemu.conf, lock
  std::filesystem::path libvirtd_socket = "/run/libvirt/libvirt-sock";
  std::filesystem::path virtlogd_socket = "/run/libvirt/virtlogd-sock";
  std::string libvirtd = "libvirtd";  // looked up in PATH (also /usr/sbin)
  std::string virtlogd = "virtlogd";
  std::chrono::seconds start_timeout{60};
  // The daemons we start end themselves once idle this long (libvirtd/virtlogd --timeout: no
  // client connected and, for libvirtd, no domain running; for virtlogd, no log open): so they
  // never outlive the launchers using them, even a launcher that was SIGKILLed (its connection
  // closes, libvirtd destroys its AUTODESTROY domain, and both daemons are then idle).
  std::chrono::seconds idle_exit{5};
  // Bind-mount our qemu.conf (QEMU as root) over the host's in libvirtd's mount namespace.
  bool private_qemu_conf = true;
  // libvirt's session daemon as the calling user (above); the paths above are then under
  // $XDG_RUNTIME_DIR.
  bool session = false;
  std::vector<std::string> session_env;  // XDG_* and HOME handed to the session daemons
};

// The options for the calling process: root gets the defaults (qemu:///system); any other uid
// gets session mode, its sockets in $XDG_RUNTIME_DIR/libvirt and our pid files and locks in
// $XDG_RUNTIME_DIR/ch-launcher/libvirt, or an error naming XDG_RUNTIME_DIR when it is unset
// or not a directory.
common::Result<LibvirtDaemonOptions> daemon_options_for_user();
// The URI the driver connects with: qemu:///system, or
// qemu+unix:///session?socket=<libvirtd_socket> in session mode (as KubeVirt's non-root
// virt-launcher connects).
std::string connect_uri(const LibvirtDaemonOptions& opts);
// Where libvirt writes <domain>.pid: /run/libvirt/qemu, or $XDG_RUNTIME_DIR/libvirt/qemu/run.
std::filesystem::path qemu_pid_dir(const LibvirtDaemonOptions& opts);

// True when something accepts a connection on the Unix socket `path`.
bool unix_socket_answers(const std::filesystem::path& path);
// The pid in `pid_file` when that process exists and is not a zombie.
std::optional<pid_t> live_pid_from_file(const std::filesystem::path& pid_file);
// A process exists and is not a zombie (/proc/<pid>/stat state != 'Z').
bool process_alive(pid_t pid);

// The pid of the process that listens on the Unix socket `path` (SO_PEERCRED).
common::Result<pid_t> unix_socket_peer(const std::filesystem::path& path);
// libvirtd opens managed='no' taps by name in its own network namespace: fails, naming the
// taps, when the daemon listening on `socket` is in another one than the calling thread (a
// shared or host libvirtd outside the pod would not see the pod's taps; KubeVirt runs one
// daemon per pod).
common::Status check_daemon_network_namespace(const std::filesystem::path& socket,
                                              const std::vector<std::string>& taps);

class LibvirtDaemons {
 public:
  // Make sure libvirtd answers: use the running one, or start ours. Blocks up to start_timeout.
  static common::Result<LibvirtDaemons> ensure(const LibvirtDaemonOptions& opts = {});

  LibvirtDaemons(LibvirtDaemons&&) noexcept = default;
  LibvirtDaemons& operator=(LibvirtDaemons&&) noexcept = default;
  ~LibvirtDaemons();  // release()

  // Launcher-started daemons (ours or another launcher's) rather than the host's own.
  [[nodiscard]] bool launcher_managed() const { return managed_; }
  // This launcher started them (now).
  [[nodiscard]] bool started_here() const { return started_here_; }
  [[nodiscard]] std::optional<pid_t> libvirtd_pid() const;
  [[nodiscard]] std::optional<pid_t> virtlogd_pid() const;
  // "host libvirtd (pid N)" / "ch-launcher's libvirtd (pid N, started now)"...
  [[nodiscard]] std::string describe() const;

  // Stop the daemons if they are launcher-managed and no other launcher uses them (and the
  // daemon runs no domain). Idempotent.
  void release();
  // libvirtd stopped answering: the keeper connection is dropped without a close call (which
  // would wait for its answer for ever); its socket closes with the process.
  void forget_connections();

 private:
  LibvirtDaemons() = default;
  LibvirtDaemonOptions opts_;
  common::UniqueFd lock_;
  // Held while the launcher lives: a libvirt connection to libvirtd and a plain connection to
  // virtlogd's socket keep the idle timers of launcher-started daemons from firing.
  std::shared_ptr<_virConnect> libvirtd_keeper_;
  common::UniqueFd virtlogd_keeper_;
  bool managed_ = false;
  bool started_here_ = false;
  bool released_ = false;
};

}  // namespace chl::libvirt

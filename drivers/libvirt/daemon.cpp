#include "drivers/libvirt/daemon.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "common/child_process.hpp"
#include "common/log.hpp"
#include "common/proc_stat.hpp"
#include "common/syscall.hpp"
#include "common/unix_socket.hpp"
#include "drivers/libvirt/event_loop.hpp"
#include "drivers/libvirt/handles.hpp"

namespace chl::libvirt {
namespace fs = std::filesystem;
using common::fail;
using common::Result;
using common::Status;

namespace {

constexpr const char* kPath = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";

// What our libvirtd's QEMU driver is configured with (bind-mounted over /etc/libvirt/qemu.conf
// in its own mount namespace). One comment per setting.
constexpr const char* kQemuConf =
    "# Written by ch-launcher for the libvirtd it starts (docs/qemu/daemon.md); the host's\n"
    "# /etc/libvirt/qemu.conf is untouched.\n"
    "# QEMU runs as root, like Cloud Hypervisor under the launcher: libvirt then finds /dev/kvm\n"
    "# usable by the QEMU user, as its capability probe did, and keeps the probe cached.\n"
    "user = \"root\"\n"
    "group = \"root\"\n"
    "# Files stay the launcher's: nothing is chowned to a QEMU user and back.\n"
    "dynamic_ownership = 0\n"
    "remember_owner = 0\n";

// Our libvirtd's own configuration (-f): no keepalive pings to clients, so an idle launcher's
// libvirt thread is never woken (a dead client is seen as a closed socket anyway).
constexpr const char* kLibvirtdConf =
    "# Written by ch-launcher for the libvirtd it starts (docs/qemu/daemon.md).\n"
    "keepalive_interval = -1\n";

// Write `text` to `path` through a temporary file and a rename.
Status write_config(const fs::path& path, const char* text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    if (!f.flush()) return fail(std::errc::io_error, "writing " + tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return fail(ec, "writing " + path.string());
  return {};
}

std::optional<std::string> find_daemon(const std::string& name) {
  if (auto p = common::find_program(name)) return p;
  for (const char* dir : {"/usr/sbin/", "/sbin/"}) {
    std::string p = std::string(dir) + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return std::nullopt;
}

bool wait_for(std::chrono::milliseconds timeout, const std::function<bool()>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Run `argv` (a daemon that forks into the background) and wait for its first process to exit 0.
Status run_daemonizing(const std::vector<std::string>& argv, const fs::path& log,
                       std::chrono::seconds timeout, const std::vector<std::string>& env = {}) {
  common::SpawnOptions so;
  so.argv = argv;
  so.env = {kPath, "LC_ALL=C"};
  so.env.insert(so.env.end(), env.begin(), env.end());
  common::UniqueFd out(
      ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
  so.stdout_fd = out.get();
  so.stderr_fd = out.get();
  so.die_with_parent = false;  // the daemon outlives this process by design
  CHL_TRY(auto child, common::ChildProcess::spawn(so));
  CHL_TRY(auto st, child.wait_for(timeout));
  if (!st)
    return fail(std::errc::timed_out, argv[0] + " did not go to the background within " +
                                          std::to_string(timeout.count()) + " s");
  if (!st->success()) {
    std::ifstream f(log);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (text.size() > 600) text = text.substr(text.size() - 600);
    return fail(std::errc::io_error,
                argv[0] + " " + st->describe() + (text.empty() ? "" : ": " + text));
  }
  return {};
}

Status stop_pid(pid_t pid, const char* what) {
  if (!process_alive(pid)) return {};
  CHL_LOG_INFO("stopping {} (pid {})", what, pid);
  if (::kill(pid, SIGTERM) != 0 && errno != ESRCH)
    return common::fail_errno(std::string("SIGTERM to ") + what);
  // libvirtd and virtlogd end within ~50 ms of SIGTERM here: 5 s is a daemon that hangs.
  if (wait_for(std::chrono::seconds(5), [pid] { return !process_alive(pid); })) return {};
  CHL_LOG_WARN("{} (pid {}) still running 5 s after SIGTERM: SIGKILL", what, pid);
  (void)::kill(pid, SIGKILL);
  if (!wait_for(std::chrono::seconds(5), [pid] { return !process_alive(pid); }))
    return fail(std::errc::timed_out, std::string(what) + " survived SIGKILL");
  return {};
}

// Domains the daemon runs: libvirt keeps `<domain>.pid` in `dir` for each running QEMU. Read
// from the files, not asked over RPC: a daemon that stopped answering (libvirt's client has no
// call timeout) must not hold the launcher's exit.
int running_domains(const fs::path& dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".pid" && live_pid_from_file(e.path())) ++n;
  return n;
}

}  // namespace

bool unix_socket_answers(const fs::path& path) { return common::unix_socket_answers(path); }

Result<pid_t> unix_socket_peer(const fs::path& path) {
  CHL_TRY(auto fd, common::connect_unix(path));
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return common::fail_errno("SO_PEERCRED on " + path.string());
  return cred.pid;
}

Status check_daemon_network_namespace(const fs::path& socket,
                                      const std::vector<std::string>& taps) {
  CHL_TRY(pid_t pid, common::wrap(unix_socket_peer(socket), "finding the libvirt daemon"));
  struct stat ours {};
  struct stat theirs {};
  if (::stat("/proc/thread-self/ns/net", &ours) != 0)
    return common::fail_errno("stat /proc/thread-self/ns/net");
  const std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
  if (::stat(path.c_str(), &theirs) != 0) return common::fail_errno("stat " + path);
  if (ours.st_dev == theirs.st_dev && ours.st_ino == theirs.st_ino) return {};
  std::string names;
  for (const auto& t : taps) names += (names.empty() ? "" : ", ") + t;
  return fail(std::errc::operation_not_supported,
              "the libvirt daemon on " + socket.string() + " (pid " + std::to_string(pid) +
                  ") runs in another network namespace than the launcher, so it cannot open the "
                  "pod's tap(s) " +
                  names +
                  " by name: run one libvirt daemon per pod, in the pod's "
                  "network namespace (as KubeVirt does)");
}

bool process_alive(pid_t pid) {
  if (pid <= 0) return false;
  auto st = common::ProcStat::read(pid);
  return st && st->state() != 'Z' && st->state() != 'X';
}

std::optional<pid_t> live_pid_from_file(const fs::path& pid_file) {
  std::ifstream f(pid_file);
  long pid = 0;
  if (!(f >> pid) || pid <= 0) return std::nullopt;
  if (!process_alive(static_cast<pid_t>(pid))) return std::nullopt;
  return static_cast<pid_t>(pid);
}

namespace {

// `path` opened (created 0600) and locked exclusively, blocking; unlocked when the fd closes.
Result<common::UniqueFd> lock_exclusive(const fs::path& path) {
  common::UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return common::fail_errno("opening " + path.string());
  if (common::retry_eintr([&] { return ::flock(fd.get(), LOCK_EX); }) != 0)
    return common::fail_errno("locking " + path.string());
  return fd;
}

}  // namespace

Result<LibvirtDaemonOptions> daemon_options_for_user() {
  LibvirtDaemonOptions o;
  const uid_t uid = ::geteuid();
  if (uid == 0) return o;
  const std::string who = "running as uid " + std::to_string(uid) + " (not root), libvirt's session daemon";
  const char* rt = std::getenv("XDG_RUNTIME_DIR");
  if (rt == nullptr || *rt == '\0')
    return fail(std::errc::invalid_argument,
                who + " needs XDG_RUNTIME_DIR (KubeVirt's non-root pod sets /var/run), and it is not set");
  std::error_code ec;
  if (!fs::is_directory(rt, ec))
    return fail(std::errc::not_a_directory, who + " needs XDG_RUNTIME_DIR, and " + rt + " is not a directory");
  // libvirt looks the user up (virGetUserName) and refuses a connection without a record:
  // "Failed to find user record for uid '107'". KubeVirt's launcher image has qemu:107.
  if (::getpwuid(uid) == nullptr)
    return fail(std::errc::invalid_argument,
                who + " needs a user record for uid " + std::to_string(uid) +
                    " (/etc/passwd; KubeVirt's launcher image has qemu:107), and there is none");
  const fs::path base = rt;
  o.session = true;
  o.private_qemu_conf = false;
  o.run_dir = base / "ch-launcher" / "libvirt";
  o.libvirtd_socket = base / "libvirt" / "libvirt-sock";
  o.virtlogd_socket = base / "libvirt" / "virtlogd-sock";
  o.session_env = {"XDG_RUNTIME_DIR=" + base.string()};
  // Where the session daemon keeps its configuration and logs: KubeVirt's pod sets both to
  // /var/run/kubevirt-private; left unset, beside our pid files rather than in a home
  // directory the pod may not have.
  const std::pair<const char*, const char*> homes[] = {{"XDG_CONFIG_HOME", "config"}, {"XDG_CACHE_HOME", "cache"}};
  for (const auto& [key, sub] : homes) {
    const char* v = std::getenv(key);
    o.session_env.push_back(std::string(key) + "=" + (v != nullptr && *v != '\0' ? v : (o.run_dir / sub).string()));
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    o.session_env.push_back(std::string("HOME=") + home);
  return o;
}

std::string connect_uri(const LibvirtDaemonOptions& opts) {
  if (!opts.session) return "qemu:///system";
  return "qemu+unix:///session?socket=" + opts.libvirtd_socket.string();
}

fs::path qemu_pid_dir(const LibvirtDaemonOptions& opts) {
  if (!opts.session) return "/run/libvirt/qemu";
  return opts.libvirtd_socket.parent_path() / "qemu" / "run";
}

Result<LibvirtDaemons> LibvirtDaemons::ensure(const LibvirtDaemonOptions& opts) {
  LibvirtDaemons d;
  d.opts_ = opts;
  std::error_code ec;
  fs::create_directories(opts.run_dir, ec);
  if (ec) return fail(ec, "creating " + opts.run_dir.string());
  ::chmod(opts.run_dir.c_str(), 0700);
  d.lock_.reset(::open((opts.run_dir / "daemons.lock").c_str(),
                       O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!d.lock_) return common::fail_errno("opening " + (opts.run_dir / "daemons.lock").string());
  // The start lock, exclusive while deciding and starting, so two launchers never start two
  // daemons and a last user never stops them under a launcher that just chose them. Not
  // daemons.lock itself: the users hold that one shared for their whole run.
  CHL_TRY(auto start_lock, lock_exclusive(opts.run_dir / "daemons.start.lock"));

  const fs::path libvirtd_pid = opts.run_dir / "libvirtd.pid";
  const fs::path virtlogd_pid = opts.run_dir / "virtlogd.pid";
  if (unix_socket_answers(opts.libvirtd_socket)) {
    d.managed_ = live_pid_from_file(libvirtd_pid).has_value();
  } else {
    if (!opts.session && ::geteuid() != 0)
      return fail(std::errc::permission_denied,
                  "no libvirt daemon answers on " + opts.libvirtd_socket.string() +
                      " and starting one for qemu:///system needs root");
    auto libvirtd = find_daemon(opts.libvirtd);
    auto virtlogd = find_daemon(opts.virtlogd);
    if (!libvirtd || !virtlogd)
      return fail(std::errc::no_such_file_or_directory,
                  "no libvirt daemon answers on " + opts.libvirtd_socket.string() +
                      " and libvirtd/virtlogd are not installed (scripts/setup.sh installs "
                      "libvirt-daemon-system)");
    const fs::path log = opts.run_dir / "daemons.log";
    // Idle exit (LibvirtDaemonOptions::idle_exit): the keepers below hold them while we live.
    const std::string idle = std::to_string(opts.idle_exit.count());
    // virtlogd first: libvirtd hands it QEMU's output.
    if (!unix_socket_answers(opts.virtlogd_socket)) {
      CHL_LOG_INFO("libvirt: no virtlogd answers on {}: starting {} -d",
                   opts.virtlogd_socket.string(), *virtlogd);
      ::unlink(virtlogd_pid.c_str());
      CHL_TRY_VOID(
          common::wrap(run_daemonizing({*virtlogd, "-d", "-t", idle, "-p", virtlogd_pid.string()},
                                       log, opts.start_timeout, opts.session_env),
                       "starting virtlogd"));
      if (!wait_for(opts.start_timeout, [&] { return unix_socket_answers(opts.virtlogd_socket); }))
        return fail(std::errc::timed_out,
                    "starting virtlogd: " + opts.virtlogd_socket.string() + " does not answer");
    }
    CHL_LOG_INFO("libvirt: no libvirtd answers on {}: starting {} -d",
                 opts.libvirtd_socket.string(), *libvirtd);
    ::unlink(libvirtd_pid.c_str());
    std::vector<std::string> argv;
    auto unshare = common::find_program("unshare");
    const fs::path daemon_conf = opts.run_dir / "libvirtd.conf";
    // A host UUID of its own: libvirt tells hosts apart by it in a migration and refuses one
    // to "the same host" (qemu_migration_cookie.c). KubeVirt runs one daemon per pod, and two
    // pods of one machine (a test's source and target) must not look like one host; left
    // unset it would come from the machine's SMBIOS, the same for every pod.
    std::string conf = kLibvirtdConf;
    {
      std::ifstream u("/proc/sys/kernel/random/uuid");
      std::string uuid;
      if (u >> uuid)
        conf +=
            "# This daemon's own host UUID (migration between pods of one machine).\nhost_uuid = "
            "\"" +
            uuid + "\"\n";
    }
    CHL_TRY_VOID(write_config(daemon_conf, conf.c_str()));
    if (opts.session) {
      // QEMU runs as the launcher's user: no qemu.conf of ours, no mount namespace.
      argv = {*libvirtd, "-d", "-t", idle, "-f", daemon_conf.string(), "-p", libvirtd_pid.string()};
    } else if (opts.private_qemu_conf && unshare) {
      const fs::path conf = opts.run_dir / "qemu.conf";
      CHL_TRY_VOID(write_config(conf, kQemuConf));
      // Positional parameters, no interpolation: paths never become shell code.
      argv = {*unshare,
              "--mount",
              "--propagation",
              "private",
              "--",
              "/bin/sh",
              "-c",
              "mount --bind \"$1\" /etc/libvirt/qemu.conf && exec \"$2\" -d -t \"$5\" -f \"$4\" -p "
              "\"$3\"",
              "sh",
              conf.string(),
              *libvirtd,
              libvirtd_pid.string(),
              daemon_conf.string(),
              idle};
    } else {
      CHL_LOG_WARN(
          "libvirt: starting libvirtd with the host's qemu.conf ({}): with /dev/kvm root-only, "
          "libvirt "
          "re-probes QEMU on every domain start",
          unshare ? "private qemu.conf disabled" : "no unshare(1)");
      argv = {*libvirtd, "-d", "-t", idle, "-f", daemon_conf.string(), "-p", libvirtd_pid.string()};
    }
    CHL_TRY_VOID(common::wrap(run_daemonizing(argv, log, opts.start_timeout, opts.session_env),
                              "starting libvirtd"));
    if (!wait_for(opts.start_timeout, [&] { return unix_socket_answers(opts.libvirtd_socket); }))
      return fail(std::errc::timed_out, "starting libvirtd: " + opts.libvirtd_socket.string() +
                                            " does not answer within " +
                                            std::to_string(opts.start_timeout.count()) +
                                            " s (log: " + log.string() + ")");
    d.managed_ = true;
    d.started_here_ = true;
  }
  if (d.managed_) {
    // Still under the start lock, so a last user cannot stop them now: connect to both, which
    // keeps their idle timers off while this launcher lives (the daemon's own --timeout ends
    // them once every launcher is gone, however it went).
    CHL_TRY_VOID(register_libvirt_event_impl());
    d.libvirtd_keeper_.reset(virConnectOpen(connect_uri(opts).c_str()), [](virConnectPtr c) {
      if (c) (void)virConnectClose(c);
    });
    if (!d.libvirtd_keeper_)
      return libvirt_fail("connecting to the launcher-started libvirtd on " +
                          opts.libvirtd_socket.string());
    auto logd = common::connect_unix(opts.virtlogd_socket);
    if (!logd)
      return tl::unexpected(logd.error().wrap("connecting to the launcher-started virtlogd"));
    d.virtlogd_keeper_ = std::move(*logd);
  }
  if (common::retry_eintr([&] { return ::flock(d.lock_.get(), LOCK_SH); }) != 0)
    return common::fail_errno("locking " + (opts.run_dir / "daemons.lock").string() + " shared");
  CHL_LOG_INFO("libvirt: using {}", d.describe());
  return d;
}

LibvirtDaemons::~LibvirtDaemons() { release(); }

void LibvirtDaemons::forget_connections() {
  if (!libvirtd_keeper_) return;
  // Leaked on purpose: a second owner that never lets go, so no virConnectClose is called.
  static auto* leaked = new std::vector<std::shared_ptr<_virConnect>>();
  leaked->push_back(std::move(libvirtd_keeper_));
}

std::optional<pid_t> LibvirtDaemons::libvirtd_pid() const {
  if (managed_) return live_pid_from_file(opts_.run_dir / "libvirtd.pid");
  // A session daemon writes its pid file beside its socket ($XDG_RUNTIME_DIR/libvirt).
  if (opts_.session) return live_pid_from_file(opts_.libvirtd_socket.parent_path() / "libvirtd.pid");
  return live_pid_from_file("/run/libvirtd.pid");
}

std::optional<pid_t> LibvirtDaemons::virtlogd_pid() const {
  if (auto p = live_pid_from_file(opts_.run_dir / "virtlogd.pid")) return p;
  if (opts_.session) return live_pid_from_file(opts_.virtlogd_socket.parent_path() / "virtlogd.pid");
  return live_pid_from_file("/run/virtlogd.pid");
}

std::string LibvirtDaemons::describe() const {
  auto pid = libvirtd_pid();
  std::string who = managed_ ? "ch-launcher's libvirtd" : "the host's libvirtd";
  if (opts_.session) who = (managed_ ? "ch-launcher's session libvirtd" : "a session libvirtd") + std::string(" as uid ") + std::to_string(::geteuid());
  std::string s = who + " (pid " + (pid ? std::to_string(*pid) : "?");
  if (started_here_) s += ", started by this launcher";
  return s + ")";
}

void LibvirtDaemons::release() {
  if (released_ || !lock_) return;
  released_ = true;
  if (!managed_) return;
  // No launcher is choosing the daemons while we decide (ensure holds the start lock).
  auto start_lock = lock_exclusive(opts_.run_dir / "daemons.start.lock");
  if (!start_lock) {
    CHL_LOG_WARN("libvirt: {}; leaving the daemons running", start_lock.error().message());
    return;
  }
  // The last user stops them: exclusive means no other launcher holds its shared lock.
  if (::flock(lock_.get(), LOCK_EX | LOCK_NB) != 0) {
    CHL_LOG_INFO("libvirt: other launchers use the daemons; leaving them running");
    return;
  }
  const auto libvirtd = live_pid_from_file(opts_.run_dir / "libvirtd.pid");
  // A libvirtd that died (killed) runs nothing: its virtlogd is still ours to stop.
  // Our own connection goes first: the daemons are idle once no launcher holds one.
  libvirtd_keeper_.reset();
  virtlogd_keeper_.reset();
  if (int n = libvirtd ? running_domains(qemu_pid_dir(opts_)) : 0; n != 0) {
    CHL_LOG_INFO(
        "libvirt: libvirtd runs {} other domain(s); leaving it running (it ends by itself once "
        "idle)",
        n);
    return;
  }
  if (libvirtd) {
    if (auto st = stop_pid(*libvirtd, "libvirtd"); !st)
      CHL_LOG_WARN("libvirt: {}", st.error().message());
  }
  if (auto pid = live_pid_from_file(opts_.run_dir / "virtlogd.pid")) {
    if (auto st = stop_pid(*pid, "virtlogd"); !st)
      CHL_LOG_WARN("libvirt: {}", st.error().message());
  }
  ::unlink((opts_.run_dir / "libvirtd.pid").c_str());
  ::unlink((opts_.run_dir / "virtlogd.pid").c_str());
  lock_.reset();
}

}  // namespace chl::libvirt

#include "launcher/state_dir.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/log.hpp"
#include "common/proc_stat.hpp"
#include "disks/atomic_file.hpp"
#include "common/syscall.hpp"

namespace chl::launcher {
namespace fs = std::filesystem;
using common::fail;
using common::fail_errno;
using common::Result;
using common::Status;

namespace {

// Files a launcher creates at run time; removed on clean exit and on recovery. virt-vnc is the
// VNC socket QEMU listens on (domain XML, qemu-kvm with a graphics device); QEMU leaves it
// behind when it exits.
const char* const kRuntimeFiles[] = {"launcher.sock", "virt-serial0", "ch-api.sock",
                                     "vmm.pid",       "virt-vnc",     "agent.vsock"};

// An ancestor that exists may be a symbolic link to a directory (Debian's /var/run -> /run, in
// the container image too); the state directory itself may not be one.
Status mkdir_0700(const fs::path& p, bool last) {
  if (::mkdir(p.c_str(), 0700) == 0) return {};
  if (errno != EEXIST) return fail_errno("mkdir " + p.string());
  struct stat st {};
  if ((last ? ::lstat(p.c_str(), &st) : ::stat(p.c_str(), &st)) != 0) return fail_errno("stat " + p.string());
  if (!S_ISDIR(st.st_mode)) return fail(std::errc::not_a_directory, p.string() + " exists and is not a directory");
  return {};
}

Status make_dirs(const fs::path& dir) {
  fs::path cur;
  fs::path target = dir.lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // a trailing separator
  for (const auto& part : target) {
    cur /= part;
    if (cur == "/") continue;
    CHL_TRY_VOID(mkdir_0700(cur, cur == target));
  }
  return {};
}

Result<std::string> read_small(const fs::path& p) {
  common::UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return fail_errno("open " + p.string());
  char buf[256];
  ssize_t n = common::retry_eintr([&] { return ::read(fd.get(), buf, sizeof buf); });
  if (n < 0) return fail_errno("read " + p.string());
  return std::string(buf, static_cast<std::size_t>(n));
}

Status write_small(const fs::path& p, const std::string& text) {
  fs::path tmp = p;
  tmp += ".tmp";
  ::unlink(tmp.c_str());
  common::UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return fail_errno("create " + tmp.string());
  if (common::retry_eintr([&] { return ::write(fd.get(), text.data(), text.size()); }) !=
      static_cast<ssize_t>(text.size()))
    return fail_errno("write " + tmp.string());
  fd.reset();
  if (::rename(tmp.c_str(), p.c_str()) != 0) return fail_errno("rename " + tmp.string());
  return {};
}

}  // namespace

fs::path default_state_dir(const std::string& ns, const std::string& name) {
  fs::path root;
  if (::geteuid() == 0) {
    root = "/run/ch-launcher";
  } else if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && *xdg) {
    root = fs::path(xdg) / "ch-launcher";
  } else {
    root = "/tmp/ch-launcher-" + std::to_string(::geteuid());
  }
  return root / (ns.empty() ? "default" : ns) / name;
}

std::optional<unsigned long long> process_start_time(pid_t pid) {
  auto st = common::ProcStat::read(pid);
  if (!st) return std::nullopt;
  return st->number(22);  // starttime
}

Result<StateDir> StateDir::open(const fs::path& dir, const std::string& vmi_uid) {
  if (!dir.is_absolute()) return fail(std::errc::invalid_argument, "state directory must be an absolute path: " + dir.string());
  CHL_TRY_VOID(common::wrap(make_dirs(dir), "creating state directory"));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return fail_errno("stat " + dir.string());
  if (!S_ISDIR(st.st_mode)) return fail(std::errc::not_a_directory, dir.string() + " is not a directory");
  if (st.st_uid != ::geteuid())
    return fail(std::errc::permission_denied, dir.string() + " is owned by uid " + std::to_string(st.st_uid) + ", not by us");
  if ((st.st_mode & 0077) != 0 && ::chmod(dir.c_str(), 0700) != 0) return fail_errno("chmod 0700 " + dir.string());

  StateDir sd;
  sd.dir_ = dir;
  fs::path lock = dir / "launcher.lock";
  sd.lock_fd_.reset(::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!sd.lock_fd_) return fail_errno("open " + lock.string());
  if (::flock(sd.lock_fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      auto holder = read_small(lock);
      std::string who = holder ? " (pid " + holder.value() + ")" : "";
      while (!who.empty() && (who.back() == '\n')) who.pop_back();
      return fail(std::errc::resource_unavailable_try_again,
                  "another launcher is already running for this VMI in " + dir.string() + who);
    }
    return fail_errno("lock " + lock.string());
  }
  std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(sd.lock_fd_.get(), 0) != 0 ||
      ::pwrite(sd.lock_fd_.get(), me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()))
    return fail_errno("write " + lock.string());

  // Recovery: anything left by a launcher that died without cleaning up.
  for (const char* f : kRuntimeFiles) {
    if (fs::exists(fs::symlink_status(dir / f))) sd.recovery_.stale = true;
  }
  if (auto text = read_small(dir / "vmm.pid")) {
    std::istringstream in(*text);
    long pid = 0;
    unsigned long long start = 0;
    if (in >> pid >> start && pid > 1) {
      auto now = process_start_time(static_cast<pid_t>(pid));
      if (now && *now == start) {
        // The VMM of a dead launcher is still alive: it must not be silently reused.
        CHL_LOG_WARN("state directory {}: VMM pid {} of a previous launcher still alive, killing it", dir.string(), pid);
        ::kill(static_cast<pid_t>(pid), SIGKILL);
        for (int i = 0; i < 200 && process_start_time(static_cast<pid_t>(pid)) == start; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        sd.recovery_.killed_vmm = static_cast<pid_t>(pid);
      }
    }
  }
  if (sd.recovery_.stale) sd.remove_runtime_files();
  // Disks and media are written in the directory and its subdirectories (container-disks/ ...)
  // through disks::AtomicFile: where it had to use a named temporary file, a SIGKILL mid-write
  // left that name behind.
  {
    std::size_t removed = disks::remove_stale_temporaries(dir);
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->is_directory(ec) && !it->is_symlink(ec))
        removed += disks::remove_stale_temporaries(it->path());
    }
    sd.recovery_.removed_temporaries = removed;
    if (removed > 0) sd.recovery_.stale = true;
  }

  // The directory belongs to one VMI uid: another uid's state (its disks) goes.
  if (auto old = read_small(dir / "vmi.uid"); old && *old != vmi_uid) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().filename() == "launcher.lock") continue;
      fs::remove_all(entry.path(), ec);
    }
    sd.recovery_.wiped_other_vmi = true;
  }
  CHL_TRY_VOID(write_small(dir / "vmi.uid", vmi_uid));
  return sd;
}

StateDir::~StateDir() {
  // The lock goes with the fd; the lock file itself stays (removing it would race a newcomer).
}

Status StateDir::record_vmm(pid_t pid) {
  auto start = process_start_time(pid);
  if (!start) return fail(std::errc::no_such_process, "VMM pid " + std::to_string(pid) + " vanished");
  return write_small(dir_ / "vmm.pid", std::to_string(pid) + " " + std::to_string(*start) + "\n");
}

void StateDir::clear_vmm() { ::unlink((dir_ / "vmm.pid").c_str()); }

void StateDir::remove_runtime_files() {
  for (const char* f : kRuntimeFiles) ::unlink((dir_ / f).c_str());
}

bool state_dir_in_use(const std::filesystem::path& dir) {
  common::UniqueFd fd(::open((dir / "launcher.lock").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return false;
  // A shared lock is refused while a launcher holds its exclusive one; ours goes with the fd.
  return common::retry_eintr([&] { return ::flock(fd.get(), LOCK_SH | LOCK_NB); }) != 0 &&
         errno == EWOULDBLOCK;
}

}  // namespace chl::launcher

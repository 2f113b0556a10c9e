#pragma once
// The VM's own state directory: created 0700, locked for one launcher at a time, and recovered
// when a killed launcher left it behind (a VMM still alive in it is killed, never reused).
//
// Layout (default mode): <root>/<namespace>/<name>/
//   launcher.lock   flock held while a launcher runs; holds its pid
//   vmi.uid         the uid of the VMI the directory belongs to
//   vmm.pid         "<pid> <starttime>" of the VMM the launcher started
//   launcher.sock   command socket        virt-serial0   console socket
//   ch-api.sock     CH API socket         events.log     CH event stream copy
//   disks/          generated disks (emptyDisk, converted containerDisk, cloud-init media)
#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace chl::launcher {

struct StateDirPaths {
  std::filesystem::path dir;           // the VM's state directory
  std::filesystem::path launcher_sock; // command socket
  std::filesystem::path console_sock;  // virt-serial0
};

// Default directory for a VMI: /run/ch-launcher/<ns>/<name> as root, else
// $XDG_RUNTIME_DIR/ch-launcher/<ns>/<name> (or /tmp/ch-launcher-<uid>/<ns>/<name>).
std::filesystem::path default_state_dir(const std::string& ns, const std::string& name);

// What recovery found and did, for the log.
struct Recovery {
  bool stale = false;              // a previous launcher left files behind
  std::optional<pid_t> killed_vmm; // a VMM from that launcher was still alive and was killed
  bool wiped_other_vmi = false;    // the directory belonged to another VMI uid: its state went
  std::size_t removed_temporaries = 0;  // half-written disk files of a launcher killed mid-write
};

class StateDir {
 public:
  // Create (0700, parents too), check it is a real directory owned by us, take the lock
  // (refuses when another launcher holds it), and recover what a dead launcher left.
  static common::Result<StateDir> open(const std::filesystem::path& dir, const std::string& vmi_uid);

  StateDir(StateDir&&) = default;
  StateDir& operator=(StateDir&&) = default;
  ~StateDir();

  [[nodiscard]] const std::filesystem::path& path() const { return dir_; }
  [[nodiscard]] std::filesystem::path file(const std::string& name) const { return dir_ / name; }
  [[nodiscard]] const Recovery& recovery() const { return recovery_; }

  // Record the VMM we started so a later launcher can find it if we die.
  common::Status record_vmm(pid_t pid);
  void clear_vmm();
  // Remove the run-time files (sockets, pid files) — not disks — at a clean exit.
  void remove_runtime_files();

 private:
  StateDir() = default;
  std::filesystem::path dir_;
  common::UniqueFd lock_fd_;
  Recovery recovery_;
};

// A launcher holds `dir`'s lock now (its launcher.lock is locked). False when the directory or
// its lock file does not exist. Never takes the lock for longer than the probe.
bool state_dir_in_use(const std::filesystem::path& dir);

// Start time of a process (field 22 of /proc/PID/stat), to tell a pid from a recycled one.
std::optional<unsigned long long> process_start_time(pid_t pid);

}  // namespace chl::launcher

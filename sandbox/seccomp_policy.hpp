#pragma once
// The launcher's seccomp allow-list, as data: what the launcher may still do once its VMM is
// running (relay the console, talk to the VMM's API, serve the command socket, watch the VMM,
// clean its state directory up). Everything else is refused with EPERM (or kills the process,
// for the few calls that would only ever mean the launcher was subverted).
// The table is in seccomp_policy.cpp, one row per syscall with why it is there.
#include <cstdint>
#include <span>
#include <string_view>

namespace chl::sandbox {

enum class ArgCheck : std::uint8_t {
  None,           // any arguments
  UnixSocketOnly, // socket(2): domain must be AF_UNIX
  IoctlList,      // ioctl(2): request must be one of kAllowedIoctls
  ThreadsOnly,    // clone(2): thread creation only (CLONE_THREAD set), never a new process
  AnswerEnosys,   // not allowed, answered ENOSYS so that glibc falls back to an older call
};

struct SyscallRule {
  std::string_view name;  // as libseccomp resolves it for the native architecture
  ArgCheck check;
  std::string_view why;
};

struct IoctlRule {
  unsigned long request;
  std::string_view name;
  std::string_view why;
};

// The allow-list.
std::span<const SyscallRule> launcher_allow_list();
// The ioctl requests allowed (everything else: EPERM).
std::span<const IoctlRule> allowed_ioctls();
// Calls that kill the launcher at once instead of answering EPERM: no launcher code path makes
// them after the VMM started, so one of them means something is very wrong.
std::span<const std::string_view> kill_list();

}  // namespace chl::sandbox

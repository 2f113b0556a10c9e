#pragma once
// The launcher's seccomp allow-list, as data: what the launcher may still do once its VMM is
// running (relay the console, talk to the VMM's API, serve the command socket, watch the VMM,
// clean its state directory up). Everything else is refused with EPERM (or kills the process,
// for the few calls that would only ever mean the launcher was subverted).
// The table is in seccomp_policy.cpp, one row per syscall with why it is there: a common part
// (every driver; the whole list on the Cloud Hypervisor path) and, apart, the rows only the
// qemu-kvm path (libvirt's client library in the launcher process) adds.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

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

// Which VMM driver the launcher runs: the filter is built for it.
enum class DriverKind : std::uint8_t {
  CloudHypervisor,  // the common list alone
  Libvirt,          // the common list plus libvirt_additions()
};
[[nodiscard]] std::string_view to_string(DriverKind k);

// The common allow-list (every driver).
std::span<const SyscallRule> launcher_allow_list();
// What the qemu-kvm path (libvirt driver) needs beyond the common list, never allowed on the
// Cloud Hypervisor path.
std::span<const SyscallRule> libvirt_additions();
// The syscalls allowed for `kind`: the common list, then its additions.
std::vector<SyscallRule> allow_list_for(DriverKind kind);
// The ioctl requests allowed (everything else: EPERM).
std::span<const IoctlRule> allowed_ioctls();
// Calls that kill the launcher at once instead of answering EPERM: no launcher code path makes
// them after the VMM started, so one of them means something is very wrong.
std::span<const std::string_view> kill_list();

}  // namespace chl::sandbox

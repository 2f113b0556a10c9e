#include "sandbox/seccomp_policy.hpp"

#include <sys/ioctl.h>
#include <termios.h>

#include <array>
#include <iterator>

// Sanitizer builds (scripts/sanitize.sh) run code the launcher's own strace never showed.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CHL_SANITIZER_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CHL_SANITIZER_BUILD 1
#endif
#endif

namespace chl::sandbox {

namespace {

// The common list: every driver needs these; on the Cloud Hypervisor path it is the whole list.
// Read off `strace -f` of a full lifecycle (run, status, events, console, pause, resume,
// snapshot, reboot with a new PTY, stop) plus the paths that trace does not take (VMM crash and
// kill, console log rotation, teardown of the state directory, worker threads, abort).
constexpr SyscallRule kAllow[] = {
    // ---- memory, threads, time: the C++ runtime ----
    {"brk", ArgCheck::None, "malloc"},
    {"mmap", ArgCheck::None, "malloc, thread stacks"},
    {"munmap", ArgCheck::None, "free"},
    {"mremap", ArgCheck::None, "realloc of large blocks"},
    {"mprotect", ArgCheck::None, "thread stack guard pages"},
    {"madvise", ArgCheck::None, "malloc trimming, thread exit"},
    {"futex", ArgCheck::None, "mutexes, condition variables, std::thread join"},
    {"clone", ArgCheck::ThreadsOnly, "a new thread (never a process: the VMM is already started)"},
    {"clone3", ArgCheck::AnswerEnosys, "its flags sit in memory seccomp cannot read: ENOSYS makes glibc use clone(2)"},
    {"set_robust_list", ArgCheck::None, "new threads"},
    {"rseq", ArgCheck::None, "new threads (glibc registers restartable sequences)"},
    {"sched_yield", ArgCheck::None, "spin-then-sleep locks"},
    {"sched_getaffinity", ArgCheck::None, "std::thread::hardware_concurrency"},
    {"sched_setaffinity", ArgCheck::None,
     "isolateEmulatorThread: the VMM's non-vCPU threads kept on the emulator CPUs after boot and hotplug"},
    {"sched_setscheduler", ArgCheck::None,
     "realtime: the VMM's vCPU threads made SCHED_FIFO after boot (and put back if one cannot be)"},
    {"sched_getscheduler", ArgCheck::None, "realtime: each vCPU thread's policy, shown in status"},
    {"sched_getparam", ArgCheck::None, "realtime: each vCPU thread's priority, shown in status"},
    {"gettid", ArgCheck::None, "logging"},
    {"getpid", ArgCheck::None, "logging, temporary file names"},
    {"getuid", ArgCheck::None, "state directory checks"},
    {"geteuid", ArgCheck::None, "state directory checks"},
    {"getgid", ArgCheck::None, "socket group"},
    {"getegid", ArgCheck::None, "socket group"},
    {"clock_gettime", ArgCheck::None, "timers (when the vDSO is not used)"},
    {"clock_nanosleep", ArgCheck::None, "short back-offs"},
    {"nanosleep", ArgCheck::None, "short back-offs"},
    {"gettimeofday", ArgCheck::None, "log timestamps (when the vDSO is not used)"},
    {"getrandom", ArgCheck::None, "hash seeds, random names"},
    {"uname", ArgCheck::None, "glibc start-up paths reached lazily"},
    {"exit", ArgCheck::None, "a thread ends"},
    {"exit_group", ArgCheck::None, "the launcher ends"},
    {"restart_syscall", ArgCheck::None, "a sleep interrupted by a signal"},
    // ---- signals ----
    {"rt_sigaction", ArgCheck::None, "signal handlers (asio signal_set)"},
    {"rt_sigprocmask", ArgCheck::None, "thread signal masks"},
    {"rt_sigreturn", ArgCheck::None, "return from a signal handler"},
    {"tgkill", ArgCheck::None, "abort() on a bug (raise SIGABRT)"},
    {"tkill", ArgCheck::None, "abort() on a bug"},
    // ---- the event loop ----
    {"epoll_wait", ArgCheck::None, "asio's reactor"},
    {"epoll_pwait", ArgCheck::None, "asio's reactor"},
    {"epoll_ctl", ArgCheck::None, "asio's reactor"},
    {"epoll_create1", ArgCheck::None, "a short-lived io_context (command client paths)"},
    {"eventfd2", ArgCheck::None, "asio's interrupter"},
    {"timerfd_create", ArgCheck::None, "asio timers"},
    {"timerfd_settime", ArgCheck::None, "asio timers: grace period, VMM exit timeout"},
    {"poll", ArgCheck::None, "API calls with a deadline, the console's liveness check"},
    {"ppoll", ArgCheck::None, "as poll"},
    {"pipe2", ArgCheck::None, "asio's interrupter fallback"},
    // ---- file descriptors ----
    {"read", ArgCheck::None, "PTY, sockets, event monitor pipe"},
    {"write", ArgCheck::None, "PTY, sockets, console log, logs"},
    {"readv", ArgCheck::None, "gathered reads"},
    {"writev", ArgCheck::None, "gathered writes to console clients"},
    {"pread64", ArgCheck::None, "reading state files"},
    {"pwrite64", ArgCheck::None, "writing state files"},
    {"lseek", ArgCheck::None, "console log size"},
    {"close", ArgCheck::None, "every fd"},
    {"fcntl", ArgCheck::None, "O_NONBLOCK, FD_CLOEXEC, F_DUPFD_CLOEXEC"},
    {"dup", ArgCheck::None, "handing an fd to asio"},
    {"dup3", ArgCheck::None, "handing an fd to asio"},
    {"ioctl", ArgCheck::IoctlList, "FIONBIO for asio, termios on the PTY: see kIoctls"},
    {"fstat", ArgCheck::None, "file sizes"},
    {"newfstatat", ArgCheck::None, "stat of state files and the PTY path"},
    {"statx", ArgCheck::None, "std::filesystem"},
    {"openat", ArgCheck::None, "the new PTY after a reboot, /proc/<vmm>/stat, state files; the mount namespace and file modes confine it"},
    {"ftruncate", ArgCheck::None, "console log rotation"},
    {"fsync", ArgCheck::None, "state files"},
    {"fdatasync", ArgCheck::None, "state files"},
    {"rename", ArgCheck::None, "atomic state files (tmp then rename), console log rotation"},
    {"renameat", ArgCheck::None, "as rename"},
    {"renameat2", ArgCheck::None, "as rename"},
    {"unlink", ArgCheck::None, "sockets and state files at teardown"},
    {"unlinkat", ArgCheck::None, "std::filesystem::remove_all of the state directory"},
    {"rmdir", ArgCheck::None, "teardown"},
    {"mkdir", ArgCheck::None, "snapshot directories"},
    {"mkdirat", ArgCheck::None, "snapshot directories"},
    {"getdents64", ArgCheck::None, "listing the state directory at teardown"},
    {"readlink", ArgCheck::None, "std::filesystem canonical paths"},
    {"inotify_init1", ArgCheck::None, "watching the access-credential Secrets (kubevirt/access_credentials.cpp)"},
    {"inotify_add_watch", ArgCheck::None, "as inotify_init1: a Secret directory (re)appearing"},
    {"inotify_rm_watch", ArgCheck::None, "as inotify_init1"},
    {"access", ArgCheck::None, "existence checks"},
    {"faccessat", ArgCheck::None, "existence checks"},
    {"faccessat2", ArgCheck::None, "existence checks"},
    {"umask", ArgCheck::None, "socket modes"},
    {"chmod", ArgCheck::None, "socket modes"},
    {"fchmod", ArgCheck::None, "socket and file modes"},
    {"fchown", ArgCheck::None, "console socket group"},
    {"flock", ArgCheck::None, "the state directory's lock"},
    // ---- sockets (Unix only) ----
    {"socket", ArgCheck::UnixSocketOnly, "a connection to the VMM's API socket"},
    {"socketpair", ArgCheck::None, "asio internals"},
    {"connect", ArgCheck::None, "the VMM's API socket"},
    {"accept", ArgCheck::None, "command socket and virt-serial0 clients"},
    {"accept4", ArgCheck::None, "as accept"},
    {"bind", ArgCheck::None, "re-binding virt-serial0 if the console restarts"},
    {"listen", ArgCheck::None, "as bind"},
    {"shutdown", ArgCheck::None, "closing clients"},
    {"sendto", ArgCheck::None, "HTTP to the VMM and to command clients"},
    {"recvfrom", ArgCheck::None, "HTTP from the VMM and command clients"},
    {"sendmsg", ArgCheck::None, "fd passing to the VMM (vm.add-net)"},
    {"recvmsg", ArgCheck::None, "asio reads"},
    {"getsockopt", ArgCheck::None, "SO_ERROR after a non-blocking connect, SO_PEERCRED"},
    {"setsockopt", ArgCheck::None, "buffer sizes"},
    {"getsockname", ArgCheck::None, "asio"},
    {"getpeername", ArgCheck::None, "asio"},
    // ---- the VMM process ----
    {"wait4", ArgCheck::None, "reaping the VMM"},
    {"waitid", ArgCheck::None, "reaping the VMM by pidfd"},
    {"pidfd_open", ArgCheck::None, "watching the VMM"},
    {"pidfd_send_signal", ArgCheck::None, "killing the VMM without pid reuse races"},
    {"kill", ArgCheck::None, "killing the VMM (SIGKILL when it does not exit)"},
    {"prctl", ArgCheck::None, "thread names"},
#ifdef CHL_SANITIZER_BUILD
    // ---- sanitizer builds only ----
    {"sigaltstack", ArgCheck::None,
     "the sanitizer runtime (ASan at least) sets an alternate signal stack in each new thread and "
     "reads it on every noreturn call (_exit, throw): refused, it aborts"},
#endif
};

// ---- qemu-kvm (libvirt driver) additions: allowed only when the launcher runs the libvirt
// driver (libchl-libvirt.so, libvirt's client library), never on the Cloud Hypervisor path ----
//
// Measured with `strace -f` attached to the launcher (tests' CHL_LAUNCHER_WRAPPER) over every
// qemu-lane test: tests/drivers/libvirt/test_libvirt_lifecycle.cpp (console, status, pause,
// resume, reboot, power button, SIGTERM with and without a cooperative guest, kill, guest panic
// and power-off, QEMU killed), test_libvirt_faults.cpp (launcher SIGKILLed and restarted, EFI,
// a foreign domain) and tests/network/test_libvirt_network.cpp (DHCP, IPv6 RAs, multiqueue,
// restart, nftables teardown). What the launcher's threads call from the confinement point to
// exit, including libvirt's event-loop thread and the client RPC over
// /run/libvirt/libvirt-sock (socket(AF_UNIX), connect, sendto/recvfrom, poll, eventfd2,
// rt_sigprocmask around its poll), the console bridge on QEMU's PTY (openat of /dev/pts/N after
// a reboot, TCGETS/TCSETS, FIONBIO), killing QEMU (kill after reading /proc/<pid>/cmdline), and
// LibvirtDaemons::release at exit (flock of daemons.start.lock and daemons.lock, a fresh
// virConnectOpen reading /etc/libvirt/libvirt.conf, kill(SIGTERM) then polling
// /proc/<pid>/stat with clock_nanosleep, unlink of the pid files; the daemons are not our
// children, so no waitpid), is all in the common list, with its argument checks.
// The confinement point on qemu-kvm is after libvirtd answers and libvirt's event loop runs, before
// virConnectOpen and virDomainCreateXML (both measured, under the filter). What libvirt needs
// beyond the common list is done before: loading the module and its ~60 libraries (libselinux's
// statfs of /sys/fs/selinux), starting virtlogd and libvirtd (clone without CLONE_THREAD,
// execve, wait4).
// So the list below is empty, measured, not forgotten: a row goes here, with the path that
// needs it, when a qemu-kvm path is found to need a call the common list lacks.
constexpr std::array<SyscallRule, 0> kLibvirtAdditions{};

constexpr IoctlRule kIoctls[] = {
    {FIONBIO, "FIONBIO", "asio sets descriptors non-blocking"},
    {FIONREAD, "FIONREAD", "asio: bytes available"},
    {FIOCLEX, "FIOCLEX", "close-on-exec"},
    {TCGETS, "TCGETS", "isatty()/tcgetattr on the PTY"},
    {TCSETS, "TCSETS", "raw mode on the PTY"},
    {TCSETSW, "TCSETSW", "raw mode on the PTY"},
    {TCSETSF, "TCSETSF", "raw mode on the PTY"},
    {TIOCGWINSZ, "TIOCGWINSZ", "window size"},
    {TIOCSWINSZ, "TIOCSWINSZ", "window size"},
};

// Never made by the launcher once the VMM runs: starting programs, changing the mounts or the
// namespaces, loading code into the kernel, debugging other processes.
constexpr std::string_view kKill[] = {
    "execve", "execveat", "ptrace", "mount", "umount2", "pivot_root", "chroot", "setns", "unshare",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "bpf",
    "process_vm_readv", "process_vm_writev", "reboot", "swapon", "swapoff",
};

}  // namespace

std::string_view to_string(DriverKind k) {
  switch (k) {
    case DriverKind::CloudHypervisor: return "cloud-hypervisor";
    case DriverKind::Libvirt: return "libvirt";
  }
  return "?";
}

std::span<const SyscallRule> launcher_allow_list() { return kAllow; }
std::span<const SyscallRule> libvirt_additions() { return kLibvirtAdditions; }

std::vector<SyscallRule> allow_list_for(DriverKind kind) {
  std::vector<SyscallRule> rules(std::begin(kAllow), std::end(kAllow));
  if (kind == DriverKind::Libvirt) rules.insert(rules.end(), kLibvirtAdditions.begin(), kLibvirtAdditions.end());
  return rules;
}
std::span<const IoctlRule> allowed_ioctls() { return kIoctls; }
std::span<const std::string_view> kill_list() { return kKill; }

}  // namespace chl::sandbox

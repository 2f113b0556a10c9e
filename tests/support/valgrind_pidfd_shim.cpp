// LD_PRELOAD shim for running ch-launcher under valgrind memcheck (scripts/sanitize.sh valgrind).
//
// Debian bookworm's valgrind 3.19 does not implement pidfd_open (434) or pidfd_send_signal (424):
// both fail with ENOSYS under it, and the launcher (common/child_process.cpp) supervises its VMM
// through a pidfd, so it cannot start a VM under memcheck at all. This shim stands in for the two
// calls, only for the valgrind lane (never linked into the project):
// Each real call is tried first; only where it answers ENOSYS:
//   pidfd_open(pid)            -> an eventfd that becomes readable when `pid` has exited (a
//                                 detached thread waits with waitid(WNOWAIT), which leaves the
//                                 zombie for the launcher to reap, as with a real pidfd);
//   pidfd_send_signal(fd, sig) -> kill(pid, sig) for an fd this shim handed out, always (the pid cannot
//                                 be recycled before the launcher reaps it).
// Everything else goes to libc's syscall(). Built by scripts/sanitize.sh with
//   g++ -shared -fPIC -O1 -o valgrind_pidfd_shim.so valgrind_pidfd_shim.cpp -ldl
// valgrind keeps LD_PRELOAD for the program it runs; the launcher gives its VMM a clean
// environment, so the VMM never sees the shim.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdint>

namespace {

constexpr int kMaxFds = 4096;
// fd -> pid of the emulated pidfds (0: not ours). Written when an fd is handed out.
pid_t g_pid_of_fd[kMaxFds];
pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

using SyscallFn = long (*)(long, ...);

SyscallFn real_syscall() {
  static SyscallFn fn = reinterpret_cast<SyscallFn>(dlsym(RTLD_NEXT, "syscall"));
  return fn;
}

struct Waiter {
  pid_t pid;
  int fd;  // a dup of the eventfd, owned by the thread
};

void* wait_for_exit(void* arg) {
  Waiter* w = static_cast<Waiter*>(arg);
  siginfo_t si{};
  // Blocks until the child is a zombie; WNOWAIT leaves it to the launcher's waitpid. ECHILD
  // (already reaped) also means it exited.
  while (::waitid(P_PID, static_cast<id_t>(w->pid), &si, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
  }
  const std::uint64_t one = 1;
  (void)!::write(w->fd, &one, sizeof one);
  ::close(w->fd);
  delete w;
  return nullptr;
}

long emulate_pidfd_open(pid_t pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) {
    errno = ESRCH;
    return -1;
  }
  int efd = ::eventfd(0, EFD_CLOEXEC);
  if (efd < 0) return -1;
  if (efd >= kMaxFds) {
    ::close(efd);
    errno = EMFILE;
    return -1;
  }
  int mine = ::fcntl(efd, F_DUPFD_CLOEXEC, 0);
  if (mine < 0) {
    ::close(efd);
    return -1;
  }
  auto* w = new Waiter{pid, mine};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t t;
  int rc = pthread_create(&t, &attr, wait_for_exit, w);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    ::close(mine);
    ::close(efd);
    delete w;
    errno = rc;
    return -1;
  }
  pthread_mutex_lock(&g_lock);
  g_pid_of_fd[efd] = pid;
  pthread_mutex_unlock(&g_lock);
  return efd;
}

long emulate_pidfd_send_signal(int fd, int sig) {
  pid_t pid = 0;
  pthread_mutex_lock(&g_lock);
  if (fd >= 0 && fd < kMaxFds) pid = g_pid_of_fd[fd];
  pthread_mutex_unlock(&g_lock);
  if (pid <= 0) {
    errno = EBADF;
    return -1;
  }
  return ::kill(pid, sig);
}

}  // namespace

extern "C" long syscall(long nr, ...) {
  va_list ap;
  va_start(ap, nr);
  long a[6];
  for (long& x : a) x = va_arg(ap, long);
  va_end(ap);
  if (nr == SYS_pidfd_send_signal) {
    pthread_mutex_lock(&g_lock);
    const bool ours = a[0] >= 0 && a[0] < kMaxFds && g_pid_of_fd[a[0]] > 0;
    pthread_mutex_unlock(&g_lock);
    if (ours) return emulate_pidfd_send_signal(static_cast<int>(a[0]), static_cast<int>(a[1]));
  }
  long r = real_syscall()(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
  // Only where the real call is missing (valgrind 3.19 answers ENOSYS).
  if (r < 0 && errno == ENOSYS && nr == SYS_pidfd_open) return emulate_pidfd_open(static_cast<pid_t>(a[0]));
  return r;
}

#include "network/host_namespace.hpp"

#include <sys/stat.h>

#include <fstream>
#include <string>

namespace chl::network {
namespace {

// The inode of the initial PID namespace (the kernel's PROC_PID_INIT_INO).
constexpr ino_t kInitialPidNamespace = 0xEFFFFFFCU;

bool same_namespace(const char* a, const char* b, bool& readable) {
  struct stat x {}, y {};
  readable = ::stat(a, &x) == 0 && ::stat(b, &y) == 0;
  return readable && x.st_ino == y.st_ino && x.st_dev == y.st_dev;
}

}  // namespace

bool in_host_network_namespace() {
  struct stat pid_ns {};
  if (::stat("/proc/self/ns/pid", &pid_ns) == 0 && pid_ns.st_ino != kInitialPidNamespace) return false;
  // The host's namespace is the kernel's own: kthreadd (PID 2 in the initial PID namespace) and
  // every kernel thread live there. PID 1's is the same on a normal host, but a sandbox may hide
  // PID 1's namespaces while kthreadd's stay readable.
  bool readable = false;
  std::ifstream comm("/proc/2/comm");
  std::string name;
  if (std::getline(comm, name) && name == "kthreadd") {
    const bool same = same_namespace("/proc/self/ns/net", "/proc/2/ns/net", readable);
    if (readable) return same;
  }
  const bool same = same_namespace("/proc/self/ns/net", "/proc/1/ns/net", readable);
  return readable ? same : true;  // neither readable: assume the host's
}

}  // namespace chl::network

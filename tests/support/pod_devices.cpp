#include "tests/support/pod_devices.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tests/support/test_support.hpp"

namespace chl::test {

namespace {

// A node like `host` (same type, major, minor) at `at`, owned by uid:gid, mode 0660; "" when
// the machine has no `host` (then nothing is made), else an error.
std::string node_like(const std::filesystem::path& host, const std::filesystem::path& at, uid_t uid,
                      gid_t gid, bool* made) {
  *made = false;
  struct stat st {};
  if (::stat(host.c_str(), &st) != 0) return {};
  if (!S_ISCHR(st.st_mode)) return host.string() + " is not a character device";
  if (::mknod(at.c_str(), S_IFCHR | 0660, st.st_rdev) != 0 || ::chown(at.c_str(), uid, gid) != 0 ||
      ::chmod(at.c_str(), 0660) != 0)
    return "mknod " + at.string() + " like " + host.string() + ": " + std::strerror(errno);
  *made = true;
  return {};
}

}  // namespace

PodDevices pod_device_nodes(const std::filesystem::path& dir, uid_t uid, gid_t gid) {
  PodDevices d;
  const auto unshare = tool("unshare");
  if (::geteuid() != 0 || !unshare) {
    d.why = "the pod's own device nodes need root (mknod, mount) and unshare (util-linux)";
    return d;
  }
  bool kvm = false, tun = false;
  const auto kvm_node = dir / "pod-kvm", tun_node = dir / "pod-tun";
  if (auto e = node_like("/dev/kvm", kvm_node, uid, gid, &kvm); !e.empty()) {
    d.why = e;
    return d;
  }
  if (auto e = node_like("/dev/net/tun", tun_node, uid, gid, &tun); !e.empty()) {
    d.why = e;
    return d;
  }
  d.prefix = {*unshare,
              "--mount",
              "--propagation",
              "private",
              "--",
              "/bin/sh",
              "-c",
              "k=$1 t=$2; shift 2; { [ -z \"$k\" ] || mount --bind \"$k\" /dev/kvm; } && "
              "{ [ -z \"$t\" ] || mount --bind \"$t\" /dev/net/tun; } && exec \"$@\"",
              "chl-pod-devices",
              kvm ? kvm_node.string() : std::string(),
              tun ? tun_node.string() : std::string()};
  return d;
}

}  // namespace chl::test

#pragma once
// The device nodes a container runtime gives a KubeVirt pod's user: /dev/kvm and /dev/net/tun
// of its own (containerd's and CRI-O's device_ownership_from_security_context make the pod's
// nodes the pod user's, uid 107; ../shared/bin/README.md). This machine's nodes are root's 0600
// and are never changed: the pod's nodes are made beside the test (mknod, the same major:minor,
// owned by uid:gid, mode 0660) and bind-mounted over /dev/kvm and /dev/net/tun in a private
// mount namespace of the process started through the returned argv prefix only.
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace chl::test {

struct PodDevices {
  std::vector<std::string> prefix;  // argv before the program's: unshare --mount ... sh -c ...
  std::string why;                  // non-empty: the nodes could not be made (skip with it)
};

// Nodes in `dir` for /dev/kvm and /dev/net/tun (each only when the machine has it), owned by
// uid:gid. Needs root (mknod, mount) and util-linux's unshare.
PodDevices pod_device_nodes(const std::filesystem::path& dir, uid_t uid, gid_t gid);

}  // namespace chl::test

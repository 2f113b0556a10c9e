#pragma once
// Test-only: the container image started as KubeVirt starts the compute container of a VMI's pod
// (kubevirt/kubevirt, pkg/virt-controller/services: template.go renderLaunchManifest,
// rendercontainer.go, rendervolumes.go), with `docker run`:
//   - uid/gid 107 (util.NonRootUID), capabilities: drop ALL, add NET_BIND_SERVICE
//     (requiredCapabilities), no_new_privs (AllowPrivilegeEscalation: false);
//   - a read-only root filesystem, writable only where the pod mounts volumes (Mounts():
//     private, public, ephemeral-disks, libvirt-runtime, sockets, container-disks; hotplug-disks);
//   - /dev/kvm and /dev/net/tun, owned by 107 as the device plugins' nodes are under
//     device_ownership_from_security_context (the nodes here are made in the pod's directory);
//   - the command line template.go writes, flags we ignore included.
// The VMM is the image's own /usr/bin/cloud-hypervisor (the real Cloud Hypervisor the image lane
// builds in), unless PodOptions::vmm_over names one to mount over it.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/test_support.hpp"

namespace chl::test::image {

// The image under test: $CHL_IMAGE (scripts/image.sh builds it). nullopt and `why` when the lane
// cannot run here.
std::optional<std::string> image_under_test(std::string& why);

// docker ARGS..., output and exit code.
CommandResult docker(const std::vector<std::string>& args);

struct PodOptions {
  std::string vmi_uid;
  int grace_period_seconds = 10;  // the VMI's terminationGracePeriodSeconds
  bool kvm = true;                // /dev/kvm given to the container
  bool tun = true;
  bool share_dir = true;          // the "public" volume (/var/run/kubevirt) mounted
  std::string hypervisor = "kvm";  // what an unchanged KubeVirt writes (its default HypervisorConfiguration)
  // The compute container's command (template.go's, or the webhook's, tests/image/test_bundle.cpp).
  std::string entrypoint = "/usr/bin/virt-launcher-monitor";
  std::string vmm_over;           // a host file mounted over /usr/bin/cloud-hypervisor; "": the image's own
  std::vector<std::string> extra_run_args;  // more `docker run` options (volumes, env, sysctls)
  std::string name_prefix = "chl-pod-";     // the container's name: prefix + pid
};

class Pod {
 public:
  Pod(std::string image, PodOptions options);
  ~Pod();  // removes the container (and the netns name) if still there
  Pod(const Pod&) = delete;
  Pod& operator=(const Pod&) = delete;

  // The host directories behind the pod's volumes.
  std::filesystem::path share() const { return dir_.path() / "public"; }
  std::filesystem::path sockets() const { return dir_.path() / "sockets"; }
  std::filesystem::path priv() const { return dir_.path() / "private"; }
  std::filesystem::path ephemeral() const { return dir_.path() / "ephemeral-disks"; }
  std::filesystem::path container_disks() const { return dir_.path() / "container-disks"; }
  std::filesystem::path root() const { return dir_.path(); }
  const std::string& name() const { return name_; }

  // `docker run -d`: "" when the container runs, else docker's answer.
  std::string start();
  // The container's main process as the host sees it (its pid, for /proc and nsenter).
  int host_pid() const;
  // `ip netns attach` of the container's network namespace: its name (virt-handler's phase 1
  // is done in it, tests/network/kubevirt_phase1).
  std::string attach_netns();
  std::string logs() const;
  // docker stop -t (the pod's grace period: the VMI's + 15 s, as template.go pads it); the exit code.
  int stop();
  // docker wait, for a container that ends by itself.
  int wait();
  // The container's filesystem changes (docker diff): none outside the mounts.
  std::string diff() const;
  void remove();

 private:
  std::string image_;
  PodOptions options_;
  TempDir dir_{"chl-pod"};
  std::string name_;
  std::string netns_;
  bool running_ = false;
};

}  // namespace chl::test::image

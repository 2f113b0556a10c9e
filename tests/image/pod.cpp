#include "tests/image/pod.hpp"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>

namespace chl::test::image {

namespace fs = std::filesystem;

namespace {

constexpr unsigned kNonRootUid = 107;  // KubeVirt's util.NonRootUID

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// A node like `host` (same type, major, minor) at `at`, owned by 107 with mode 0660.
std::string device_node(const fs::path& host, const fs::path& at) {
  struct stat st {};
  if (::stat(host.c_str(), &st) != 0) return host.string() + ": missing on this host";
  if (::mknod(at.c_str(), S_IFCHR | 0660, st.st_rdev) != 0 || ::chown(at.c_str(), kNonRootUid, kNonRootUid) != 0)
    return "mknod " + at.string() + " failed (needs root, and a filesystem that allows device nodes)";
  return {};
}

}  // namespace

std::optional<std::string> image_under_test(std::string& why) {
  const char* image = std::getenv("CHL_IMAGE");
  if (!image || !*image) {
    why = "CHL_IMAGE is not set: the image lane (scripts/test.sh, LANES=image) builds the image and sets it";
    return std::nullopt;
  }
  if (::geteuid() != 0) {
    why = "needs root (device nodes for the pod, nsenter into its network namespace)";
    return std::nullopt;
  }
  if (!tool("docker")) {
    why = "no docker client";
    return std::nullopt;
  }
  auto r = docker({"image", "inspect", "-f", "{{.Id}}", image});
  if (r.exit_code != 0) {
    why = std::string("the image ") + image + " is not there (scripts/image.sh builds it): " + trim(r.output);
    return std::nullopt;
  }
  return std::string(image);
}

CommandResult docker(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"docker"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

Pod::Pod(std::string image, PodOptions options)
    : image_(std::move(image)), options_(std::move(options)), name_(options_.name_prefix + std::to_string(::getpid())) {
  for (const char* d : {"public", "sockets", "private", "ephemeral-disks", "libvirt-runtime", "container-disks",
                        "hotplug-disks", "dev"}) {
    fs::create_directories(dir_.path() / d);
    if (::chown((dir_.path() / d).c_str(), kNonRootUid, kNonRootUid) != 0) {
      // reported by start(): the container cannot write there
    }
  }
}

Pod::~Pod() { remove(); }

std::string Pod::start() {
  // The pod's grace period: the VMI's, padded by 15 s (template.go gracePeriodPaddingSeconds),
  // which virt-launcher also takes as --grace-period-seconds.
  const int grace = options_.grace_period_seconds + 15;
  std::vector<std::string> run = {
      "run", "-d", "--name", name_,
      "--user", "107:107", "--cap-drop", "ALL", "--cap-add", "NET_BIND_SERVICE",
      "--security-opt", "no-new-privileges", "--read-only",
      "--stop-timeout", std::to_string(grace),
      "--env", "POD_NAME=virt-launcher-testvm-x7k2p",
      "-v", (dir_.path() / "private").string() + ":/var/run/kubevirt-private",
      "-v", (dir_.path() / "ephemeral-disks").string() + ":/var/run/kubevirt-ephemeral-disks",
      "-v", (dir_.path() / "libvirt-runtime").string() + ":/var/run/libvirt",
      "-v", (dir_.path() / "container-disks").string() + ":/var/run/kubevirt/container-disks",
      "-v", (dir_.path() / "hotplug-disks").string() + ":/var/run/kubevirt/hotplug-disks"};
  if (!options_.vmm_over.empty()) run.insert(run.end(), {"-v", options_.vmm_over + ":/usr/bin/cloud-hypervisor:ro"});
  run.insert(run.end(), options_.extra_run_args.begin(), options_.extra_run_args.end());
  if (options_.share_dir) {
    run.insert(run.end(), {"-v", share().string() + ":/var/run/kubevirt", "-v",
                           sockets().string() + ":/var/run/kubevirt/sockets"});
  }
  if (options_.kvm) {
    if (auto e = device_node("/dev/kvm", dir_.path() / "dev" / "kvm"); !e.empty()) return e;
    run.insert(run.end(), {"--device", (dir_.path() / "dev" / "kvm").string() + ":/dev/kvm"});
  }
  if (options_.tun) {
    if (auto e = device_node("/dev/net/tun", dir_.path() / "dev" / "tun"); !e.empty()) return e;
    run.insert(run.end(), {"--device", (dir_.path() / "dev" / "tun").string() + ":/dev/net/tun"});
  }
  // template.go's compute container: command and args, in its order.
  run.insert(run.end(), {"--entrypoint", options_.entrypoint, image_,
                         "--qemu-timeout", "262s", "--name", "testvm", "--uid", options_.vmi_uid,
                         "--namespace", "default", "--kubevirt-share-dir", "/var/run/kubevirt",
                         "--ephemeral-disk-dir", "/var/run/kubevirt-ephemeral-disks",
                         "--container-disk-dir", "/var/run/kubevirt/container-disks",
                         "--grace-period-seconds", std::to_string(grace), "--hook-sidecars", "0",
                         "--ovmf-path", "/usr/share/OVMF", "--disk-memory-limit", "2097152000",
                         "--hypervisor", options_.hypervisor, "--run-as-nonroot"});
  auto r = docker(run);
  if (r.exit_code != 0) return "docker run: " + trim(r.output);
  running_ = true;
  return {};
}

int Pod::host_pid() const {
  auto r = docker({"inspect", "-f", "{{.State.Pid}}", name_});
  try {
    return std::stoi(r.output);
  } catch (const std::exception&) {
    return -1;
  }
}

std::string Pod::attach_netns() {
  netns_ = "chlpod" + std::to_string(::getpid());
  auto r = run_command({"ip", "netns", "attach", netns_, std::to_string(host_pid())});
  if (r.exit_code != 0) {
    netns_.clear();
    return {};
  }
  return netns_;
}

std::string Pod::logs() const { return docker({"logs", name_}).output; }

int Pod::stop() {
  auto r = docker({"stop", "-t", std::to_string(options_.grace_period_seconds + 15), name_});
  (void)r;
  return wait();
}

int Pod::wait() {
  auto r = docker({"wait", name_});
  try {
    return std::stoi(r.output);
  } catch (const std::exception&) {
    return -1;
  }
}

std::string Pod::diff() const { return trim(docker({"diff", name_}).output); }

void Pod::remove() {
  if (!netns_.empty()) {
    (void)run_command({"ip", "netns", "delete", netns_});
    netns_.clear();
  }
  if (running_) {
    (void)docker({"rm", "-f", name_});
    running_ = false;
  }
}

}  // namespace chl::test::image

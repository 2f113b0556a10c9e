#pragma once
// The launch plan: a validated VMI resolved against the launcher's inputs (volume files, the
// pod's CPU set, the VM's state directory) into everything a driver needs — disks in boot order
// with their files, NICs with tap names and MACs, the payload, CPU pinning, memory backing — and
// the list of what must be prepared before the VM is created (empty disks to create, container
// disks to convert, cloud-init media to write, firmware to find). The plan only describes the
// preparations; disks/ and firmware/ carry them out.
// Hypervisor-neutral: drivers/cloud_hypervisor/translate.hpp turns it into Cloud Hypervisor's VmConfig; the libvirt
// driver will turn it into domain XML.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tl/expected.hpp>
#include <vector>

#include "launcher/host_devices.hpp"
#include "launcher/numa.hpp"
#include "launcher/sriov_devices.hpp"
#include "vmi/hypervisor_capabilities.hpp"
#include "vmi/vmi.hpp"
#include "common/error.hpp"

namespace chl::launcher {

// KubeVirt's virtiofs socket directory (pkg/virtiofs/virtiofs.go VirtioFSContainersMountBaseDir).
inline constexpr const char* kKubevirtVirtiofsDir = "/var/run/kubevirt/virtiofs-containers";
// KubeVirt's socket for a filesystem: <dir>/<name>.sock (VirtioFSSocketPath).
inline std::string virtiofs_socket_path(std::string dir, const std::string& name) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir + "/" + name + ".sock";
}

struct PlanInputs {
  // --volume NAME=PATH: the file (or directory) behind a volume; "kernel-boot" names the
  // kernel-boot container's root directory.
  std::map<std::string, std::string> volume_paths;
  // KubeVirt's virt-launcher layout: container disks under /var/run/kubevirt/container-disks/,
  // PVCs under /var/run/kubevirt-private/vmi-disks/<name>/disk.img, ... (--volume still wins).
  bool pod_layout = false;
  // Where that layout is (virt-launcher's --container-disk-dir, and the private directory
  // holding vmi-disks/, secret/, config-map/, downwardapi/).
  std::string container_disk_dir = "/var/run/kubevirt/container-disks";
  std::string private_dir = "/var/run/kubevirt-private";
  // Where KubeVirt's virtiofs containers put their vhost-user sockets: <dir>/<filesystem>.sock
  // (pkg/virtiofs/virtiofs.go: VirtShareDir + "/virtiofs-containers", an emptyDir shared with
  // the compute container). The launcher never runs virtiofsd: it waits for the socket.
  std::string virtiofs_dir = kKubevirtVirtiofsDir;
  // The VM's state directory; "" = /run/ch-launcher/<namespace>/<name>.
  std::string state_dir;
  // The pod's CPU set (cpuset.cpus.effective), needed for dedicatedCpuPlacement.
  std::optional<std::vector<std::uint32_t>> cpu_set;
  // A firmware file to use as is; "" = found by the firmware preparer into the state dir.
  std::string firmware_path;
  // KubeVirt's device-plugin variables (PCI_RESOURCE_*, MDEV_PCI_RESOURCE_*: host_devices.hpp).
  std::map<std::string, std::string> device_env;
  // The text of KubeVirt's network-info file (sriov_devices.hpp); "" when there is none.
  std::string network_info;
  // The launcher's RLIMIT_MEMLOCK (bytes; nullopt = unlimited or not known): VFIO locks all guest
  // memory, and KubeVirt's virt-handler raises the limit only for QEMU.
  std::optional<std::uint64_t> memlock_limit;
  // The host's NUMA nodes (numa.hpp read_host_numa), for numa.guestMappingPassthrough; nullopt =
  // none known, and then, as in KubeVirt, no guest NUMA nodes are made.
  std::optional<std::vector<HostNumaNode>> host_numa;
};

enum class PreparationKind {
  CreateEmptyDisk,       // sparse raw file of size_bytes at target
  ConvertContainerDisk,  // source image (raw/qcow2) -> writable raw copy at target
  CreateOverlay,         // qcow2 at target backed by source (ephemeral volumes)
  CreateHostDisk,        // sparse raw file at target if it does not exist (hostDisk DiskOrCreate)
  WriteCloudInit,        // ISO at target with the cloud-init data (NoCloud or ConfigDrive)
  WriteConfigDisk,       // ISO at target with the files of the source directory
  FindFirmware,          // put the firmware `firmware` at target
  WaitVirtiofsSocket,    // wait (bounded) for the virtiofs container's socket at target
};
const char* to_string(PreparationKind k);

struct Preparation {
  PreparationKind kind = PreparationKind::CreateEmptyDisk;
  std::string volume;  // the volume it serves ("" for firmware)
  std::string source;  // input file or directory
  std::string target;  // what to produce
  std::int64_t size_bytes = 0;
  std::string format;        // raw, qcow2, iso9660
  std::string volume_label;  // ISO label: cidata, config-2, ...
  // Cloud-init: the data (decoded), or files holding it (from a secret).
  std::string datasource;  // nocloud, configdrive
  std::string user_data;
  std::string network_data;
  std::string user_data_file;
  std::string network_data_file;
  std::string instance_id;  // meta-data instance-id
  std::string hostname;     // meta-data local-hostname
  std::string uuid;         // config drive meta_data.json uuid
  std::string firmware;     // FindFirmware: the file name wanted (CLOUDHV.fd, hypervisor-fw)
};

struct PlannedDisk {
  std::string name;  // disk = volume name (the CH device id)
  std::string path;
  bool readonly = false;
  bool direct = false;  // cache: none
  std::string serial;
  std::uint32_t num_queues = 0;  // 0 = hypervisor default
  bool qcow2_overlay = false;    // a qcow2 with a backing file
  bool preallocated = false;     // keep it allocated: no discard (Sync's preallocatedVolumes)
  std::size_t spec_index = 0;    // index in spec.domain.devices.disks
};

struct PlannedNic {
  std::string name;  // interface = network name (the CH device id)
  vmi::Binding binding = vmi::Binding::None;
  vmi::NetworkKind network = vmi::NetworkKind::None;
  std::string pod_interface;  // eth0, net1...: the pod-side interface it is connected to
  std::string tap;            // tap0, tap1...
  std::string mac;            // lowercase, colon separated
  bool mac_generated = false;
  std::uint32_t num_queues = 0;  // 0 = hypervisor default; RX+TX (2 per queue pair), as CH counts
  std::uint32_t mtu = 0;         // 0 = not known (render); run: the pod interface's, once wired
};

struct PlannedFilesystem {
  std::string name;        // tag and device id
  std::string socket;      // the virtiofs container's vhost-user socket
  std::string shared_dir;  // what that container shares (its mount point; informational)
  std::string volume_kind;  // persistentVolumeClaim, configMap, ...
  std::uint32_t num_queues = 1;     // request queues (CH FsConfig default; libvirt: one)
  std::uint32_t queue_size = 1024;  // KubeVirt's <driver queue='1024'>, CH's default
};

struct Payload {
  std::string firmware;  // firmware file, or "" with kernel boot
  // QEMU UEFI: the variable-store template that goes with `firmware` (found beside it); "" = the
  // domain XML's default.
  std::string firmware_vars;
  std::string kernel;
  std::string initramfs;
  std::string cmdline;
};

struct PlannedCpus {
  std::uint32_t boot_vcpus = 1;
  std::uint32_t max_vcpus = 1;
  vmi::CpuTopology topology;                // packages = max sockets
  std::vector<std::uint32_t> pinning;  // vCPU i -> host CPU pinning[i]; empty = not pinned
  // isolateEmulatorThread: the host CPUs of every thread that is not a vCPU (the VMM's, its
  // devices', the launcher's); empty = not isolated.
  std::vector<std::uint32_t> emulator_cpus;
  // realtime: the vCPUs (of realtime.mask) whose threads are made SCHED_FIFO at
  // realtime_priority after boot (KubeVirt: priority 1, pkg/hypervisor/kvm/realtime.go).
  bool realtime = false;
  std::vector<std::uint32_t> realtime_vcpus;
  int realtime_priority = 1;
  bool kvm_hyperv = false;
};

struct PlannedMemory {
  std::int64_t size = 0;
  std::int64_t hotplug_size = 0;
  bool shared = false;
  std::int64_t hugepage_size = 0;  // 0 = no hugepages
  // numa.guestMappingPassthrough: the guest NUMA nodes, each with its memory (numa.hpp); empty =
  // one memory of `size`.
  std::vector<GuestNumaNode> numa;
};

// The guest agent's channel (docs/guest-agent.md). On Cloud Hypervisor, whose console has one
// port and no virtio-serial channels, a hybrid vsock device on every VM: CH binds `vsock_socket`
// (a runtime file of the state directory), the guest is CID `cid`, and its qemu-ga listens on
// vsock port `port`. On QEMU the channel is virtio-serial org.qemu.guest_agent.0 (domain XML).
struct AgentChannel {
  std::string vsock_socket;
  std::uint32_t cid = 3;      // the first CID a guest may have (0-2 are reserved)
  std::uint32_t port = 1024;  // where the guest's `qemu-ga -m vsock-listen -p 3:1024` listens
};

struct LaunchPlan {
  std::string hypervisor;  // caps name
  std::string name;        // namespace/name of the VMI
  std::string uid;
  std::string state_dir;
  std::vector<Preparation> preparations;  // in the order they should run
  Payload payload;
  PlannedCpus cpus;
  PlannedMemory memory;
  std::vector<PlannedDisk> disks;  // boot order first, then spec order
  std::vector<PlannedNic> nics;
  std::vector<PlannedFilesystem> filesystems;
  std::vector<PlannedHostDevice> host_devices;  // VFIO: hostDevices, then gpus
  bool serial_console = true;
  bool rng = false;
  bool pvpanic = true;
  std::string platform_uuid;
  std::string platform_serial;
  AgentChannel agent;
};

// Resolve a validated VMI. Fails with every input problem (a volume without a file, a CPU set
// too small for dedicated CPUs, a kernel path escaping its directory...).
tl::expected<LaunchPlan, vmi::Violations> plan_launch(const vmi::Vmi& vmi, const vmi::HypervisorCapabilities& caps,
                                                 const PlanInputs& inputs);

// A MAC for `interface_name` derived from the VMI's uid (or namespace/name): stable across
// restarts, locally administered, unicast.
std::string generated_mac(const vmi::Vmi& vmi, const std::string& interface_name);

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; nullopt on a malformed list.
std::optional<std::vector<std::uint32_t>> parse_cpu_list(std::string_view text);

// The pod's CPU set from cgroup v2 (`path` = cpuset.cpus.effective).
common::Result<std::vector<std::uint32_t>> read_cgroup_cpu_set(
    const std::string& path = "/sys/fs/cgroup/cpuset.cpus.effective");

// The plan's preparations as JSON (for `render --plan` and the preparers' logs).
nlohmann::json preparations_json(const LaunchPlan& plan);

}  // namespace chl::launcher

#pragma once
// What `ch-launcher run` is told. Exit codes of `run` (also in docs/launcher.md):
//   0  the guest went down cleanly (Shutoff/Shutdown)
//   1  the VM could not be started (the error names the step and what the VMM answered)
//   2  bad input (the VMI or the command line)
//   3  the VM crashed (guest panic, the VMM died under it, or it was ended as Shutoff/Failed
//      because the launcher lost the VMM's event monitor)
//   4  the VM was forced off (grace period expired, or `kill`)
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace chl::launcher {

enum ExitCode : int {
  kExitClean = 0,
  kExitLaunchFailed = 1,
  kExitInvalidInput = 2,
  kExitCrashed = 3,
  kExitForcedOff = 4,
};

// The guest's SMBIOS system information, as virt-handler passes KubeVirt's cluster setting
// (VirtualMachineOptions.VirtualMachineSMBios). Empty fields keep the defaults.
struct SmbiosSystem {
  std::string manufacturer, product, version, sku, family;
};

struct LaunchOptions {
  std::filesystem::path vmi_path;
  std::optional<std::filesystem::path> state_dir;   // default: default_state_dir(ns, name)
  std::map<std::string, std::string> volumes;        // --volume NAME=PATH
  std::string vmm_binary;                            // default: cloud-hypervisor on PATH
  std::string default_hypervisor = "cloud-hypervisor";
  std::optional<int> grace_period_seconds;           // default: the VMI's, else 30
  bool pod_layout = false;                           // KubeVirt's socket and volume paths
  // Pod network phase 1 (bridge, tap, addresses, nftables: network/wire.hpp) is the
  // launcher's own (`run`); false in virt-launcher mode, where virt-handler did it and the
  // launcher does phase 2 only (network/phase2.hpp), reading its caches under private_dir.
  bool network_phase1 = true;
  // Cloud Hypervisor: hand the VMM each pod tap by name instead of as fds (virt-launcher mode:
  // a live migration's target must open its own taps; network/vmm_handoff.hpp).
  bool ch_taps_by_name = false;
  // Wire the pod network even in the host's own network namespace (--allow-host-network).
  bool allow_host_network = false;
  // KubeVirt's pod directories (virt-launcher's flags), used with pod_layout.
  std::string container_disk_dir = "/var/run/kubevirt/container-disks";
  std::string private_dir = "/var/run/kubevirt-private";
  // Where the virtiofs containers' sockets are (KubeVirt's share dir + /virtiofs-containers), and
  // how long to wait for each (plan.hpp, prepare.hpp).
  std::string virtiofs_dir = "/var/run/kubevirt/virtiofs-containers";
  // KubeVirt's network-info (the SR-IOV VFs' PCI addresses: launcher/sriov_devices.hpp),
  // `--network-info`; a missing file gives no VF.
  std::string network_info_path = "/etc/podinfo/network-info";
  // The pod's CPU set for dedicatedCpuPlacement (`--cpu-set`); nullopt = read from
  // /sys/fs/cgroup/cpuset.cpus.effective.
  std::optional<std::vector<std::uint32_t>> cpu_set;
  int virtiofs_wait_ms = 60000;
  // Override where the command socket and virt-serial0 are (virt-launcher mode: launcher-sock
  // is KubeVirt's gRPC server, so ours moves into the state directory).
  std::optional<std::filesystem::path> command_socket;
  std::optional<std::filesystem::path> console_socket;
  // The guest's console log (ServiceOptions::console_log): nullopt = <state dir>/virt-serial0-log,
  // an empty path = none.
  std::optional<std::filesystem::path> console_log;
  // Where firmware is found; "" = the hypervisor's default (/usr/share/cloud-hypervisor for
  // cloud-hypervisor, /usr/share/OVMF for qemu-kvm).
  std::filesystem::path firmware_dir;
  bool console_take_over = false;
  int vmm_verbosity = 0;
  bool vmm_seccomp = true;
  // qemu-kvm: "auto" (probe: accel_probe.hpp), "kvm" or "tcg".
  std::string accel = "auto";
  // Start the VM from this snapshot directory instead of creating and booting it.
  std::optional<std::filesystem::path> restore_from;
  // Receive the VM from a live migration on this URL ("unix:<path>") instead of creating it.
  std::optional<std::string> incoming_migration;
  // qemu-kvm: the VMI may live migrate (KubeVirt's LiveMigratable condition): its domain is
  // created without libvirt's auto-destroy, which libvirt refuses to migrate.
  bool migratable = false;
  // The launcher's own seccomp filter: "enforce", "log" or "off" (sandbox/seccomp_filter.hpp).
  std::string seccomp = "enforce";
  // Deadline of one VMM API call; default 5 s for quick calls, 30 s for create/boot/shutdown.
  std::optional<int> api_timeout_ms;
  // SMBIOS system fields for the guest (virt-launcher mode: from Sync's options). The libvirt
  // path writes them into the domain's sysinfo; Cloud Hypervisor has no such fields.
  std::optional<SmbiosSystem> smbios;
  // Sync's options.preallocatedVolumes: volumes CDI preallocated, kept allocated (no discard:
  // Cloud Hypervisor's sparse=false, libvirt without discard='unmap'), as KubeVirt does.
  std::vector<std::string> preallocated_volumes;
  // Sync's options.memBalloonStatsPeriod (seconds, 0 = none): the libvirt balloon's <stats
  // period>; Cloud Hypervisor's path attaches no balloon.
  std::uint32_t mem_balloon_stats_period = 0;
};

}  // namespace chl::launcher

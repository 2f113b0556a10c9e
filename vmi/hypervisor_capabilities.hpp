#pragma once
// What each hypervisor can do, as data: one static description per hypervisor (Cloud Hypervisor,
// QEMU/KVM). It answers what the design asks of a hypervisor (ISO/CD-ROM, disk driver, boot
// order, ballooning, device resource, privilege, vCPU thread names, per-process memory
// overheads) and lists every VMI feature with whether it is served and, if not, why.
// The validator reads only this table: adding a hypervisor is adding one description (and a
// driver), never editing the checks.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace chl::vmi {

// VMI features a hypervisor may or may not serve. Each has a row in every description.
enum class Feature {
  DiskDevice,    // devices.disks[].disk
  CdromDevice,   // devices.disks[].cdrom
  LunDevice,     // devices.disks[].lun
  FloppyDevice,  // devices.disks[].floppy
  DiskBusVirtio,
  DiskBusSata,
  DiskBusScsi,
  DiskBusUsb,
  DiskPciAddress,
  DiskCustomBlockSize,       // blockSize.custom
  DiskBlockSizeMatchVolume,  // blockSize.matchVolume
  DiskShareable,
  NicModelVirtio,
  NicModelOther,  // e1000, e1000e, rtl8139, ne2k_pci, pcnet...
  NicPciAddress,
  NicBootOrder,  // PXE boot from a NIC
  BindingBridge,
  BindingMasquerade,
  BindingSriov,
  BindingSlirp,
  BindingPasst,
  BindingMacvtap,
  BindingPlugin,
  NetworkMultus,
  Graphics,  // autoattachGraphicsDevice true (VNC)
  InputDevices,
  Sound,
  UsbRedirection,  // clientPassthrough
  Watchdog,
  Tpm,
  DownwardMetrics,
  VirtioTransitional,
  HostDevices,
  Gpus,
  Virtiofs,
  CpuModelHostPassthrough,
  CpuModelHostModel,  // also "absent": KubeVirt's default
  CpuModelNamed,      // Haswell, Skylake-Server...
  CpuFeatureFlags,    // cpu.features
  CpuHotplug,         // cpu.maxSockets
  DedicatedCpus,
  IsolateEmulatorThread,
  NumaPassthrough,
  Realtime,
  Hugepages,
  MemoryHotplug,  // memory.maxGuest
  BiosBoot,
  EfiBoot,
  SecureBoot,
  EfiPersistentVars,
  KernelBoot,
  FeatureAcpi,          // features.acpi enabled
  FeatureAcpiDisabled,  // features.acpi.enabled false
  FeatureApic,
  FeatureSmm,
  FeatureHyperv,
  FeatureHypervPassthrough,
  FeatureKvmHidden,
  FeaturePvspinlock,
  FeatureOther,
  ClockUtc,     // clock.utc without offset
  ClockOffset,  // clock.utc.offsetSeconds
  ClockTimezone,
  ClockTimer,
  LaunchSecurity,  // SEV / TDX
  IoThreadsPolicy,
  IoThreadsSupplementalPool,  // ioThreadsPolicy: supplementalPool
  VolumeContainerDisk,
  VolumeEmptyDisk,
  VolumePvc,
  VolumeDataVolume,
  VolumeEphemeral,
  VolumeHostDisk,
  VolumeCloudInitNoCloud,
  VolumeCloudInitConfigDrive,
  VolumeSecret,
  VolumeConfigMap,
  VolumeServiceAccount,
  VolumeDownwardApi,
  VolumeOther,  // sysprep, downwardMetrics, memoryDump
  kCount,
};

// The feature's name in the support matrix ("devices.disks[].cdrom").
std::string_view feature_name(Feature f);

struct FeatureSupport {
  Feature feature;
  bool supported;
  // Why not (for a refusal), or a note on how it is served. A refusal reads
  // "<path>: <reason>", so the reason is a complete sentence fragment naming the hypervisor.
  std::string_view note;
  // Supported by serving it differently, which the user should know: the VMI is accepted with a
  // warning "<path>: <note>" (SATA served as virtio-blk on Cloud Hypervisor).
  bool warn = false;
};

// A process of the virt-launcher pod and the memory it needs, measured as KubeVirt measures
// its own ("ps" RSS, rounded up).
struct ProcessOverhead {
  std::string_view process;  // launcher, monitor, log daemon, hypervisor daemon, VMM
  std::string_view role;
  std::int64_t bytes;
};

struct HypervisorCapabilities {
  std::string_view name;          // "cloud-hypervisor", "qemu-kvm"
  std::string_view display_name;  // "Cloud Hypervisor"
  std::string_view vmm_binary;    // the VMM executable
  bool supports_iso;              // CD-ROM media
  std::string_view disk_driver;   // libvirt driver name / CH block implementation
  bool requires_boot_order;       // boot order must be expressed to the hypervisor
  bool supports_memory_ballooning;
  std::string_view device_resource;      // extended resource the pod requests
  bool launcher_privileged;              // the launcher container must be privileged
  std::string_view vcpu_thread_pattern;  // ECMAScript regex on /proc/<pid>/task/*/comm
  std::uint32_t max_vcpus;               // most vCPUs one VM may have
  bool kernel_boot_with_bootloader;      // kernelBoot may be combined with a bootloader
  std::string_view bios_firmware;        // file to find for BIOS boot ("" = built into the VMM)
  std::string_view efi_firmware;         // file to find for EFI boot
  std::span<const ProcessOverhead> process_overheads;
  std::int64_t per_vcpu_overhead;            // bytes per vCPU (thread stacks, vCPU state)
  std::int64_t pagetable_divisor;            // guest memory / this = page-table overhead
  std::int64_t graphics_overhead;            // video RAM when a display is attached
  std::int64_t vfio_overhead;                // locked memory margin with host devices
  std::span<const FeatureSupport> features;  // one row per Feature, in Feature order

  [[nodiscard]] const FeatureSupport& support(Feature f) const;
  [[nodiscard]] bool supports(Feature f) const { return support(f).supported; }
};

// Every known hypervisor, Cloud Hypervisor first.
std::span<const HypervisorCapabilities* const> all_hypervisors();
// The description named `name` ("cloud-hypervisor", "qemu-kvm"), or nullptr.
const HypervisorCapabilities* find_hypervisor(std::string_view name);
// The support matrix as a Markdown table (feature | each hypervisor), generated from the tables;
// docs/vmi-support.md carries it verbatim (a test keeps them equal).
std::string support_matrix_markdown();

// "cloud-hypervisor, qemu-kvm" — for messages.
std::string hypervisor_names();

}  // namespace chl::vmi

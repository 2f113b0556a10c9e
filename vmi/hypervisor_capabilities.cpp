#include "vmi/hypervisor_capabilities.hpp"

#include <array>
#include <cstdlib>

namespace chl::vmi {
namespace {

constexpr std::int64_t Mi = std::int64_t{1} << 20;
constexpr std::int64_t Gi = std::int64_t{1} << 30;

using F = Feature;

// ---- Cloud Hypervisor ----------------------------------------------------------------------
constexpr std::array<FeatureSupport, static_cast<std::size_t>(F::kCount)> kChFeatures{{
    {F::DiskDevice, true, "virtio-blk"},
    {F::CdromDevice, false,
     "cloud-hypervisor has no CD-ROM device; attach the volume as a disk with bus virtio"},
    {F::LunDevice, false,
     "cloud-hypervisor has no SCSI LUN passthrough; attach the volume as a disk with bus virtio"},
    {F::FloppyDevice, false,
     "cloud-hypervisor has no floppy device; attach the volume as a disk with bus virtio"},
    {F::DiskBusVirtio, true, "virtio-blk"},
    {F::DiskBusSata, true,
     "cloud-hypervisor has no SATA controller: served as virtio-blk, so the guest needs virtio-blk "
     "drivers (KubeVirt defaults every disk without a bus to sata)",
     true},
    {F::DiskBusScsi, false,
     "cloud-hypervisor has no SCSI controller; use bus virtio (the guest needs virtio-blk "
     "drivers)"},
    {F::DiskBusUsb, false, "cloud-hypervisor has no USB controller; use bus virtio"},
    {F::DiskPciAddress, false, "cloud-hypervisor assigns PCI addresses itself; remove pciAddress"},
    {F::DiskCustomBlockSize, false,
     "cloud-hypervisor cannot set a disk's block size; remove blockSize"},
    {F::DiskBlockSizeMatchVolume, false,
     "cloud-hypervisor cannot set a disk's block size; remove blockSize"},
    {F::DiskShareable, false, "cloud-hypervisor cannot share a disk between VMs; remove shareable"},
    {F::NicModelVirtio, true, "virtio-net"},
    {F::NicModelOther, false, "cloud-hypervisor has only virtio-net NICs; use model virtio"},
    {F::NicPciAddress, false, "cloud-hypervisor assigns PCI addresses itself; remove pciAddress"},
    {F::NicBootOrder, false,
     "cloud-hypervisor's firmware cannot boot from the network; remove bootOrder from the "
     "interface"},
    {F::BindingBridge, true, "tap device bridged to the pod interface"},
    {F::BindingMasquerade, true, "tap device behind NAT on the pod interface"},
    // The VF from KubeVirt's network-info (launcher/sriov_devices.hpp) as a VFIO device; like
    // host devices it needs /dev/vfio and a memory-lock limit covering guest memory, which the
    // launcher checks at start (virt-handler raises it only for QEMU).
    {F::BindingSriov, true,
     "VFIO passthrough of the pod's virtual function (its PCI address from /etc/podinfo/"
     "network-info), aliased sriov-INTERFACE; needs /dev/vfio and a pod memory-lock limit covering "
     "guest memory"},
    {F::BindingSlirp, false, "slirp user networking exists only in QEMU; use masquerade"},
    {F::BindingPasst, false,
     "passt needs vhost-user networking, which ch-launcher does not set up for cloud-hypervisor "
     "yet; use masquerade"},
    {F::BindingMacvtap, false, "macvtap is not supported with cloud-hypervisor; use bridge"},
    {F::BindingPlugin, false,
     "network binding plugins are not supported with cloud-hypervisor; use bridge or masquerade"},
    {F::NetworkMultus, true, "the tap device of the Multus pod interface"},
    {F::Graphics, false,
     "cloud-hypervisor has no graphics device; set autoattachGraphicsDevice: false (the serial "
     "console remains)"},
    {F::InputDevices, false, "cloud-hypervisor has no input devices; remove devices.inputs"},
    {F::Sound, false, "cloud-hypervisor has no sound device; remove devices.sound"},
    {F::UsbRedirection, false, "cloud-hypervisor has no USB controller; remove clientPassthrough"},
    {F::Watchdog, false,
     "cloud-hypervisor has no i6300esb watchdog (its virtio watchdog only resets the VM); remove "
     "devices.watchdog"},
    {F::Tpm, false, "ch-launcher does not run swtpm for cloud-hypervisor yet; remove devices.tpm"},
    {F::DownwardMetrics, false,
     "downward metrics need a virtio-serial port, which cloud-hypervisor lacks"},
    {F::VirtioTransitional, false,
     "cloud-hypervisor has only modern (virtio 1.0) devices; remove useVirtioTransitional"},
    // VFIO needs the guest's memory locked: KubeVirt's virt-handler raises RLIMIT_MEMLOCK only on
    // a "qemu-system"/"qemu-kvm" child or a "virtqemud" process (pkg/hypervisor/kvm/runtime.go
    // AdjustResources, pkg/hypervisor/common/qemu.go), never on cloud-hypervisor: the launcher
    // checks its own limit at start (launcher/plan.cpp plan_vfio).
    {F::HostDevices, true,
     "VFIO devices by sysfs path from KubeVirt's device-plugin variables (PCI_RESOURCE_*, "
     "MDEV_PCI_RESOURCE_*); needs /dev/vfio and a pod memory-lock limit covering guest memory, "
     "checked at start"},
    {F::Gpus, true,
     "VFIO (PCI or mediated) as host devices; no display on a vGPU; needs /dev/vfio and a pod "
     "memory-lock limit covering guest memory, checked at start"},
    {F::Virtiofs, true,
     "fs devices on KubeVirt's virtiofs containers' sockets (no DAX: CH v52 has no cache window); "
     "guest memory becomes shared"},
    {F::CpuModelHostPassthrough, true, "the only CPU model: the host CPU passed through"},
    {F::CpuModelHostModel, true,
     "served as the host CPU passed through, which gives the guest at least what host-model "
     "promises (KubeVirt's default model)"},
    {F::CpuModelNamed, false,
     "cloud-hypervisor cannot emulate a named CPU model; use host-passthrough or leave model out"},
    {F::CpuFeatureFlags, false,
     "cloud-hypervisor passes the host CPU through and cannot add or remove CPU features; remove "
     "cpu.features"},
    {F::CpuHotplug, true, "max_vcpus above boot_vcpus"},
    {F::DedicatedCpus, true, "vCPU threads pinned one to one onto the pod's CPU set"},
    {F::IsolateEmulatorThread, true,
     "every cloud-hypervisor thread but the vCPUs (and the launcher's own) on the pod's extra "
     "CPU: the VMM starts with that affinity, so the threads it starts later inherit it; vCPUs "
     "one to one through cpus.affinity"},
    {F::NumaPassthrough, true,
     "guest NUMA nodes mirror the host NUMA nodes of the vCPUs' dedicated CPUs (KubeVirt's "
     "numaMapping): one memory zone per node, hugepage-backed and bound to its host node "
     "(host_numa_node), the guest memory split among them"},
    // virt-handler makes vCPUs SCHED_FIFO only for QEMU: threads "CPU N/KVM" of a "qemu-system"
    // or "qemu-kvm" child (pkg/hypervisor/kvm/realtime.go, runtime.go GetQEMUProcess); CH's are
    // "vcpuN" (vmm/src/cpu.rs), so the launcher does it after boot, which needs CAP_SYS_NICE:
    // a root launcher pod has it, the non-root one does not (rendercontainer.go
    // requiredCapabilities), and validate refuses realtime there.
    {F::Realtime, true,
     "the launcher makes the vCPU threads of realtime.mask SCHED_FIFO, priority 1, after boot "
     "(all or the start fails); needs CAP_SYS_NICE, which only a root launcher pod has"},
    {F::Hugepages, true, "memory backed by hugetlbfs pages of the given size"},
    {F::MemoryHotplug, true, "ACPI memory hotplug up to maxGuest"},
    {F::BiosBoot, true,
     "rust-hypervisor-firmware (hypervisor-fw): boots EFI-bootable disk images, not legacy "
     "MBR-only ones"},
    {F::EfiBoot, true, "OVMF built for cloud-hypervisor (CLOUDHV.fd)"},
    {F::SecureBoot, false,
     "cloud-hypervisor's firmware has no Secure Boot; set "
     "spec.domain.firmware.bootloader.efi.secureBoot: false (KubeVirt defaults it to true)"},
    {F::EfiPersistentVars, false,
     "cloud-hypervisor keeps no persistent EFI variable store; remove efi.persistent"},
    {F::KernelBoot, true, "direct kernel boot: kernel, initramfs and command line"},
    {F::FeatureAcpi, true, "always on in cloud-hypervisor"},
    {F::FeatureAcpiDisabled, false,
     "cloud-hypervisor always exposes ACPI; remove acpi.enabled: false"},
    {F::FeatureApic, true, "always on in cloud-hypervisor"},
    {F::FeatureSmm, false, "cloud-hypervisor has no System Management Mode; remove features.smm"},
    {F::FeatureHyperv, true, "KVM Hyper-V enlightenments (kvm_hyperv) as one set"},
    {F::FeatureHypervPassthrough, true, "KVM Hyper-V enlightenments (kvm_hyperv)"},
    {F::FeatureKvmHidden, false,
     "cloud-hypervisor cannot hide KVM from the guest; remove features.kvm"},
    {F::FeaturePvspinlock, false,
     "cloud-hypervisor does not let the paravirtual spinlock hint be chosen; remove "
     "features.pvspinlock"},
    {F::FeatureOther, false, "not a feature cloud-hypervisor offers; only hyperv is"},
    {F::ClockUtc, true, "the guest RTC runs in UTC"},
    {F::ClockOffset, false, "cloud-hypervisor's RTC cannot be offset; remove offsetSeconds"},
    {F::ClockTimezone, false, "cloud-hypervisor's RTC runs in UTC only; use clock.utc"},
    {F::ClockTimer, false, "cloud-hypervisor has no timer selection; remove clock.timer"},
    {F::LaunchSecurity, false,
     "ch-launcher does not start confidential VMs on cloud-hypervisor yet; remove launchSecurity"},
    {F::IoThreadsPolicy, true, "each disk has its own I/O thread in cloud-hypervisor anyway"},
    {F::IoThreadsSupplementalPool, true,
     "each disk has its own I/O thread in cloud-hypervisor anyway"},
    {F::VolumeContainerDisk, true, "copied to a writable image in the VM's state directory"},
    {F::VolumeEmptyDisk, true, "sparse raw file in the VM's state directory"},
    {F::VolumePvc, true, "the claim's disk.img (or block device)"},
    {F::VolumeDataVolume, true, "the DataVolume's claim, like a PVC"},
    {F::VolumeEphemeral, true, "qcow2 overlay on the claim in the VM's state directory"},
    {F::VolumeHostDisk, true, "the host path, created sparse for DiskOrCreate"},
    {F::VolumeCloudInitNoCloud, true, "cidata ISO attached as a virtio disk"},
    {F::VolumeCloudInitConfigDrive, true, "config-2 ISO attached as a virtio disk"},
    {F::VolumeSecret, true, "ISO of the secret's files attached as a virtio disk"},
    {F::VolumeConfigMap, true, "ISO of the config map's files attached as a virtio disk"},
    {F::VolumeServiceAccount, true, "ISO of the service account token attached as a virtio disk"},
    {F::VolumeDownwardApi, true, "ISO of the downward API files attached as a virtio disk"},
    {F::VolumeOther, false, "this volume type is not supported with cloud-hypervisor"},
}};

constexpr std::array<ProcessOverhead, 5> kChProcesses{{
    {"launcher", "ch-launcher: API client, event monitor, console bridge", 30 * Mi},
    {"monitor", "none: ch-launcher supervises the VMM itself", 0},
    {"log daemon", "none: the console log is written by ch-launcher", 0},
    {"hypervisor daemon", "none: no libvirt daemon", 0},
    {"VMM", "cloud-hypervisor, less guest RAM and page tables", 20 * Mi},
}};

// ---- QEMU/KVM through libvirt --------------------------------------------------------------
constexpr std::array<FeatureSupport, static_cast<std::size_t>(F::kCount)> kQemuFeatures{{
    {F::DiskDevice, true, "virtio-blk, SATA or SCSI disk"},
    {F::CdromDevice, true, "SATA or SCSI CD-ROM"},
    // Every row below marked supported is carried out by drivers/libvirt/domain_xml.cpp (or the
    // driver, for hotplug); what the libvirt path does not render is refused, never accepted and
    // silently left out (the audit: docs/qemu/daemon.md, "What the domain XML carries").
    // A LUN is rendered as a SCSI disk on the file (device='disk'): no SG_IO passthrough, which
    // libvirt's device='lun' gives only on a block device.
    {F::LunDevice, true,
     "served as a SCSI disk (bus scsi) on the volume, without SCSI command passthrough (SG_IO)",
     true},
    {F::FloppyDevice, false, "KubeVirt removed floppy disks; attach the volume as a disk"},
    {F::DiskBusVirtio, true, ""},
    {F::DiskBusSata, true, ""},
    {F::DiskBusScsi, true, ""},
    {F::DiskBusUsb, true, ""},
    {F::DiskPciAddress, true,
     "<address type='pci'>; on q35 the bus must exist (0x00, the root, takes any free slot)"},
    {F::DiskCustomBlockSize, true, "<blockio> with the logical and physical sizes"},
    {F::DiskBlockSizeMatchVolume, false,
     "ch-launcher's libvirt path does not probe the volume's block size yet (no <blockio> from "
     "the volume); set blockSize.custom"},
    {F::DiskShareable, true, ""},
    {F::NicModelVirtio, true, ""},
    {F::NicModelOther, true, "e1000, e1000e, rtl8139, ne2k_pci, pcnet"},
    {F::NicPciAddress, true,
     "<address type='pci'>; on q35 the bus must exist (0x00, the root, takes any free slot)"},
    {F::NicBootOrder, true, "<boot order> on the interface: the firmware's iPXE"},
    {F::BindingBridge, true, ""},
    {F::BindingMasquerade, true, ""},
    {F::BindingSriov, false,
     "ch-launcher's libvirt path does not pass the pod's SR-IOV virtual function through yet (no "
     "<hostdev>); use bridge or masquerade"},
    // What `run` can wire on this path (network/plan.cpp): QEMU could do more, the launcher cannot.
    {F::BindingSlirp, false,
     "slirp was removed from KubeVirt and ch-launcher does not wire it; use masquerade"},
    {F::BindingPasst, false,
     "ch-launcher does not set up passt (vhost-user) networking; use masquerade"},
    {F::BindingMacvtap, false, "ch-launcher does not wire macvtap; use bridge"},
    {F::BindingPlugin, false,
     "network binding plugins are not supported by ch-launcher; use bridge or masquerade"},
    {F::NetworkMultus, true, ""},
    {F::Graphics, true, "VNC on a socket in the VM's state directory, VGA video"},
    {F::InputDevices, true, "USB or virtio tablet"},
    {F::Sound, true, "ich9 (HDA) or ac97"},
    {F::UsbRedirection, false,
     "ch-launcher's libvirt path does not offer USB redirection yet (no <redirdev> sockets for "
     "virtctl usbredir); remove clientPassthrough"},
    {F::Watchdog, true, "i6300esb with its action"},
    {F::Tpm, true, "TPM 2.0 (tpm-tis) emulated by swtpm, which libvirt starts; not persistent"},
    {F::DownwardMetrics, false,
     "ch-launcher's libvirt path does not serve downward metrics yet (no vhostmd virtio-serial "
     "channel); remove devices.downwardMetrics"},
    {F::VirtioTransitional, true,
     "virtio-transitional disks, NICs, controllers, RNG and balloon on a conventional PCI bus"},
    // The libvirt path renders none of these five yet (drivers/libvirt/domain_xml.cpp has no
    // <hostdev>, <emulatorpin>, <numatune> or <vcpusched>): refused rather than accepted and
    // silently left out.
    {F::HostDevices, false,
     "ch-launcher's libvirt path does not pass host devices through yet (no <hostdev>); remove "
     "devices.hostDevices, or run the VMI on cloud-hypervisor"},
    {F::Gpus, false,
     "ch-launcher's libvirt path does not pass GPUs through yet (no <hostdev>); remove "
     "devices.gpus, or run the VMI on cloud-hypervisor"},
    {F::Virtiofs, true, "on KubeVirt's virtiofs containers' sockets; memfd shared memory"},
    {F::CpuModelHostPassthrough, true, ""},
    {F::CpuModelHostModel, true, ""},
    {F::CpuModelNamed, true, ""},
    {F::CpuFeatureFlags, true, ""},
    {F::CpuHotplug, true, ""},
    {F::DedicatedCpus, true, ""},
    {F::IsolateEmulatorThread, false,
     "ch-launcher's libvirt path pins the vCPUs but not QEMU's emulator thread yet (no "
     "<emulatorpin>); remove isolateEmulatorThread, or run the VMI on cloud-hypervisor"},
    {F::NumaPassthrough, false,
     "ch-launcher's libvirt path does not map guest NUMA nodes yet (no <numatune>); remove "
     "numa.guestMappingPassthrough"},
    {F::Realtime, false,
     "ch-launcher's libvirt path does not schedule vCPUs realtime yet (no <vcpusched>); remove "
     "realtime"},
    {F::Hugepages, true, ""},
    {F::MemoryHotplug, true, "virtio-mem"},
    {F::BiosBoot, true, "SeaBIOS"},
    {F::EfiBoot, true, "OVMF"},
    {F::SecureBoot, true, "OVMF with Secure Boot (requires features.smm)"},
    {F::EfiPersistentVars, false,
     "ch-launcher's libvirt path keeps the EFI variables in the VM's state directory, which does "
     "not outlive the pod (no backend-storage volume); remove efi.persistent"},
    {F::KernelBoot, true, ""},
    {F::FeatureAcpi, true, ""},
    {F::FeatureAcpiDisabled, true, ""},
    {F::FeatureApic, true, ""},
    {F::FeatureSmm, true, ""},
    {F::FeatureHyperv, true, "each enlightenment as given (<hyperv mode='custom'>)"},
    {F::FeatureHypervPassthrough, true, "<hyperv mode='passthrough'>"},
    {F::FeatureKvmHidden, true, ""},
    {F::FeaturePvspinlock, true, ""},
    {F::FeatureOther, false, "not a feature KubeVirt knows"},
    {F::ClockUtc, true, "<clock offset='utc' adjustment='reset'>"},
    {F::ClockOffset, true, "<clock offset='utc' adjustment='N'>"},
    {F::ClockTimezone, true, "<clock offset='timezone'>"},
    {F::ClockTimer, true, "rtc, pit, kvmclock, hpet, hypervclock timers"},
    {F::LaunchSecurity, false,
     "ch-launcher's libvirt path does not start confidential VMs yet (no <launchSecurity>); "
     "remove launchSecurity"},
    {F::IoThreadsPolicy, true,
     "shared or auto: <iothreads> and each virtio disk's iothread as KubeVirt assigns them "
     "(dedicatedIOThread disks their own)"},
    {F::IoThreadsSupplementalPool, false,
     "ch-launcher's libvirt path does not spread a disk's queues over a thread pool yet (no "
     "<driver><iothreads>); use ioThreadsPolicy shared or auto"},
    {F::VolumeContainerDisk, true, "qcow2 overlay on the container disk"},
    {F::VolumeEmptyDisk, true, ""},
    {F::VolumePvc, true, ""},
    {F::VolumeDataVolume, true, ""},
    {F::VolumeEphemeral, true, ""},
    {F::VolumeHostDisk, true, ""},
    {F::VolumeCloudInitNoCloud, true, ""},
    {F::VolumeCloudInitConfigDrive, true, ""},
    {F::VolumeSecret, true, ""},
    {F::VolumeConfigMap, true, ""},
    {F::VolumeServiceAccount, true, ""},
    {F::VolumeDownwardApi, true, ""},
    {F::VolumeOther, false, "this volume type is not supported by ch-launcher"},
}};

// KubeVirt's own measurements (pkg/virt-controller/services/renderresources.go).
constexpr std::array<ProcessOverhead, 5> kQemuProcesses{{
    {"launcher", "ch-launcher driving libvirt", 30 * Mi},
    {"monitor", "none: ch-launcher supervises the domain itself", 0},
    {"log daemon", "virtlogd", 25 * Mi},
    {"hypervisor daemon", "virtqemud", 40 * Mi},
    {"VMM", "qemu-kvm, less guest RAM and page tables", 30 * Mi},
}};

constexpr HypervisorCapabilities kCloudHypervisor{
    .name = "cloud-hypervisor",
    .display_name = "Cloud Hypervisor",
    .vmm_binary = "cloud-hypervisor",
    .supports_iso = false,
    .disk_driver = "virtio-blk (in the VMM, io_uring)",
    .requires_boot_order = false,  // the firmware boots the first disk: order is device order
    .supports_memory_ballooning = true,
    .device_resource = "devices.kubevirt.io/kvm",
    .launcher_privileged = false,
    .vcpu_thread_pattern = "^vcpu[0-9]+$",
    .max_vcpus = 254,
    .kernel_boot_with_bootloader = false,  // the payload is either firmware or a kernel
    .bios_firmware = "hypervisor-fw",
    .efi_firmware = "CLOUDHV.fd",
    .process_overheads = kChProcesses,
    .per_vcpu_overhead = 8 * Mi,
    .pagetable_divisor = 512,
    .graphics_overhead = 0,
    .vfio_overhead = Gi,
    .features = kChFeatures,
};

constexpr HypervisorCapabilities kQemuKvm{
    .name = "qemu-kvm",
    .display_name = "QEMU/KVM (libvirt)",
    .vmm_binary = "qemu-system-x86_64",
    .supports_iso = true,
    .disk_driver = "qemu",
    .requires_boot_order = true,
    .supports_memory_ballooning = true,
    .device_resource = "devices.kubevirt.io/kvm",
    .launcher_privileged = false,
    .vcpu_thread_pattern = "^CPU [0-9]+/KVM$",
    .max_vcpus = 288,
    .kernel_boot_with_bootloader = true,
    .bios_firmware = "",  // SeaBIOS comes with QEMU
    .efi_firmware = "OVMF_CODE.fd",
    .process_overheads = kQemuProcesses,
    .per_vcpu_overhead = 8 * Mi,
    .pagetable_divisor = 512,
    .graphics_overhead = 32 * Mi,
    .vfio_overhead = Gi,
    .features = kQemuFeatures,
};

constexpr std::array<const HypervisorCapabilities*, 2> kAll{&kCloudHypervisor, &kQemuKvm};

constexpr std::array<std::string_view, static_cast<std::size_t>(F::kCount)> kNames{{
    "devices.disks[].disk",
    "devices.disks[].cdrom",
    "devices.disks[].lun",
    "devices.disks[].floppy",
    "devices.disks[].*.bus: virtio",
    "devices.disks[].*.bus: sata",
    "devices.disks[].*.bus: scsi",
    "devices.disks[].*.bus: usb",
    "devices.disks[].*.pciAddress",
    "devices.disks[].blockSize.custom",
    "devices.disks[].blockSize.matchVolume",
    "devices.disks[].shareable",
    "devices.interfaces[].model: virtio",
    "devices.interfaces[].model: e1000 and others",
    "devices.interfaces[].pciAddress",
    "devices.interfaces[].bootOrder",
    "devices.interfaces[].bridge",
    "devices.interfaces[].masquerade",
    "devices.interfaces[].sriov",
    "devices.interfaces[].slirp",
    "devices.interfaces[].passt",
    "devices.interfaces[].macvtap",
    "devices.interfaces[].binding",
    "networks[].multus",
    "devices.autoattachGraphicsDevice: true",
    "devices.inputs",
    "devices.sound",
    "devices.clientPassthrough",
    "devices.watchdog",
    "devices.tpm",
    "devices.downwardMetrics",
    "devices.useVirtioTransitional",
    "devices.hostDevices",
    "devices.gpus",
    "devices.filesystems[].virtiofs",
    "cpu.model: host-passthrough",
    "cpu.model: host-model",
    "cpu.model: <named model>",
    "cpu.features",
    "cpu.maxSockets",
    "cpu.dedicatedCpuPlacement",
    "cpu.isolateEmulatorThread",
    "cpu.numa.guestMappingPassthrough",
    "cpu.realtime",
    "memory.hugepages",
    "memory.maxGuest",
    "firmware.bootloader.bios (or none)",
    "firmware.bootloader.efi",
    "firmware.bootloader.efi.secureBoot",
    "firmware.bootloader.efi.persistent",
    "firmware.kernelBoot",
    "features.acpi",
    "features.acpi.enabled: false",
    "features.apic",
    "features.smm",
    "features.hyperv",
    "features.hypervPassthrough",
    "features.kvm.hidden",
    "features.pvspinlock",
    "features.<other>",
    "clock.utc",
    "clock.utc.offsetSeconds",
    "clock.timezone",
    "clock.timer",
    "launchSecurity",
    "ioThreadsPolicy",
    "ioThreadsPolicy: supplementalPool",
    "volumes[].containerDisk",
    "volumes[].emptyDisk",
    "volumes[].persistentVolumeClaim",
    "volumes[].dataVolume",
    "volumes[].ephemeral",
    "volumes[].hostDisk",
    "volumes[].cloudInitNoCloud",
    "volumes[].cloudInitConfigDrive",
    "volumes[].secret",
    "volumes[].configMap",
    "volumes[].serviceAccount",
    "volumes[].downwardAPI",
    "volumes[].sysprep, downwardMetrics, memoryDump",
}};

}  // namespace

std::string_view feature_name(Feature f) {
  auto i = static_cast<std::size_t>(f);
  return i < kNames.size() ? kNames[i] : std::string_view("?");
}

const FeatureSupport& HypervisorCapabilities::support(Feature f) const {
  auto i = static_cast<std::size_t>(f);
  if (i < features.size() && features[i].feature == f) return features[i];
  for (const auto& row : features) {
    if (row.feature == f) return row;
  }
  std::abort();  // a table without a row for `f` is a bug the tests catch
}

std::span<const HypervisorCapabilities* const> all_hypervisors() { return kAll; }

const HypervisorCapabilities* find_hypervisor(std::string_view name) {
  for (const auto* h : kAll) {
    if (h->name == name) return h;
  }
  return nullptr;
}

std::string support_matrix_markdown() {
  std::string s = "| VMI field (spec.domain. / spec.) |";
  std::string rule = "|---|";
  for (const auto* h : kAll) {
    s += " " + std::string(h->name) + " |";
    rule += "---|";
  }
  s += "\n" + rule + "\n";
  for (std::size_t i = 0; i < static_cast<std::size_t>(F::kCount); ++i) {
    const auto f = static_cast<Feature>(i);
    s += "| `" + std::string(feature_name(f)) + "` |";
    for (const auto* h : kAll) {
      const FeatureSupport& r = h->support(f);
      std::string cell = r.supported ? "yes" : "**no**";
      if (!r.note.empty()) cell += ": " + std::string(r.note);
      for (std::size_t p = 0; (p = cell.find('|', p)) != std::string::npos; p += 2)
        cell.replace(p, 1, "\\|");
      s += " " + cell + " |";
    }
    s += "\n";
  }
  return s;
}

std::string hypervisor_names() {
  std::string s;
  for (const auto* h : kAll) {
    if (!s.empty()) s += ", ";
    s += h->name;
  }
  return s;
}

}  // namespace chl::vmi

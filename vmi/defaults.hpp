#pragma once
// KubeVirt's admission defaulting, on our model: what virt-api's mutating webhook adds to every
// VMI before virt-handler ever sees it (kubevirt/kubevirt pkg/defaults SetDefaultVirtualMachineInstance,
// with a default KubeVirtConfiguration: LiveUpdate rollout, hotplug ratio 4, bridge as the default
// pod binding, no cluster CPU model). check_vmi applies it to every VMI, so a manifest read from a
// file (`run --vmi`, `validate`, `render`) and the same VMI as Sync delivers it, already defaulted,
// launch the same VM. Applied to an already defaulted VMI it changes nothing.
//
// One deliberate record beside KubeVirt's: a disk bus filled in here is marked `bus_defaulted`,
// so a hypervisor that serves SATA as virtio-blk (Cloud Hypervisor) warns only about a bus the
// document itself named (docs/vmi-support.md, "KubeVirt's defaults").
#include "vmi/vmi.hpp"

namespace chl::vmi {

// KubeVirt's defaults for an amd64 cluster.
inline constexpr std::uint32_t kMaxHotplugRatio = 4;       // virtconfig DefaultMaxHotplugRatio
inline constexpr std::uint32_t kMaxHotplugVcpus = 512;     // setupCPUHotplug's cap
inline constexpr std::int64_t kHotplugBlockAlignment = std::int64_t{2} << 20;  // 2Mi
inline constexpr std::int64_t kHotplugMinGuestMemory = std::int64_t{1} << 30;  // 1Gi
inline constexpr const char* kDefaultMachineType = "q35";
inline constexpr const char* kDefaultCpuModel = "host-model";
inline constexpr const char* kDefaultDiskBus = "sata";    // pkg/defaults/amd64.go

// Fill in what KubeVirt's defaulting would: architecture, machine type, guest memory from the
// resources, the CPU topology, the CPU model, a disk for every volume without one, the default
// bus of each disk, inputs as USB tablets, the default pod interface, and CPU/memory hotplug
// headroom (maxSockets, maxGuest) where KubeVirt allows it.
void apply_kubevirt_defaults(Vmi& vmi);

// Hotplug headroom is only headroom: where maxSockets (defaulted by KubeVirt or us, which look
// alike once a VMI arrives) asks for more vCPUs than the hypervisor has, it is lowered to what
// fits (never below the boot sockets) instead of refusing the VMI, with a warning; likewise a
// maxGuest above the largest guest. The boot topology itself is still checked by the validator.
Violations fit_hotplug_headroom(Vmi& vmi, std::uint32_t max_vcpus, std::int64_t max_guest_memory);

}  // namespace chl::vmi

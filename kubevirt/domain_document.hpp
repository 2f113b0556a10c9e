#pragma once
// Where the domain document's values come from (docs/kubevirt/domain.md, "The domain document"):
// the VMI the launcher runs, resolved as the launch resolves it (the network plan's MAC and tap),
// and then what the VMM really has (its VM config: the disks it opened, the NICs' MACs and MTU, the
// targets libvirt gave). domain_json.hpp only turns the result into KubeVirt's JSON.
// Internal to the kubevirt room's launcher side (libchl-kubevirt.so).
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "kubevirt/domain_json.hpp"
#include "vmi/vmi.hpp"

namespace chl::kubevirt {

// The domain as it is defined, before the VMM runs: identity, grace period (the VMI's
// terminationGracePeriodSeconds, 30 when unset, as KubeVirt's converter.go:364-370), memory,
// machine, ACPI, the guest agent channel; each pod interface with the MAC the network plan gives
// it (spec.macAddress in lowercase, else network::generated_mac) and the tap virt-handler's phase
// 1 made for it (network::tap_name_for); each disk by its name, with no source or target yet.
// `hypervisor` is "cloud-hypervisor" or "qemu-kvm" (the disks' bus: CH serves virtio-blk only).
DomainDocument document_of(const vmi::Vmi& v, const std::string& hypervisor);

// The VMM's view (LauncherService::status()'s "info": Cloud Hypervisor's vm.info, or the libvirt
// driver's from the live domain XML) laid over the document: each disk's source and target (CH:
// vda, vdb… in the order of its config, as the guest's virtio-blk driver names them; libvirt:
// its own targets), each interface's MAC, MTU, tap and model as the VMM has them, the machine type
// libvirt expanded. `hotplug_ids` maps a VMM device id to the volume it serves ("hotplug-hp1" ->
// "hp1"). Disks the VMM no longer has keep their name with no source (virt-handler then skips
// them, vm.go:536) -- except those named in `keep` (detached volumes whose device the VMM still
// has), left as they were. Returns true when something changed.
bool apply_vmm_info(DomainDocument& d, const nlohmann::json& info,
                    const std::map<std::string, std::string>& hotplug_ids,
                    const std::set<std::string>& keep = {});

// The guest's name for the n-th (0-based) disk on a bus with the `prefix` ("vd", "sd"): vda…vdz,
// vdaa… as libvirt and Linux name them.
std::string disk_target_name(const std::string& prefix, std::size_t n);

}  // namespace chl::kubevirt

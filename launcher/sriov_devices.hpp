#pragma once
// SR-IOV interfaces (`interfaces[].sriov: {}`) as VFIO devices, each VF's PCI address read as
// virt-launcher reads it (KubeVirt d923fdb pkg/virt-launcher/virtwrap/device/hostdevice/sriov/
// hostdev.go CreateHostDevices, pcipool_netstatus.go): from the pod's network-info file, the
// kubevirt.io/network-info annotation virt-controller puts in the pod through the downward API
// at /etc/podinfo/network-info (pkg/network/downwardapi/networkinfo.go:33-37, rendervolumes.go),
//   {"interfaces":[{"network":"<VMI network name>",
//                   "deviceInfo":{"type":"pci","pci":{"pci-address":"0000:65:00.2"}}}]}
// (downwardapi/types.go; DeviceInfo of network-attachment-definition-client). Each SR-IOV
// interface takes the address of the network of its name; an address is taken once. The alias
// is KubeVirt's "sriov-<interface>" (pkg/network/deviceinfo/sriov.go:22), which virt-handler
// reads back from the domain's HostDevices (netstat.go:313-323).
// KubeVirt leaves out an interface not yet in the VMI's status with the multus-status source (a
// hotplugged one, attached later by HotplugHostDevices); at the start every interface of the
// spec is planned here.
#include <string>
#include <string_view>
#include <tl/expected.hpp>
#include <vector>

#include "launcher/host_devices.hpp"
#include "vmi/vmi.hpp"

namespace chl::launcher {

inline constexpr std::string_view kNetworkInfoPath = "/etc/podinfo/network-info";

// The VFIO devices of `vmi`'s SR-IOV interfaces from the network-info file's text; problems
// name the interface's field and say what the file lacked, with KubeVirt's words.
tl::expected<std::vector<PlannedHostDevice>, vmi::Violations> plan_sriov_devices(
    const vmi::Vmi& vmi, std::string_view network_info);

}  // namespace chl::launcher

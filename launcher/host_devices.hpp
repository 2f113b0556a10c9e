#pragma once
// Host devices and GPUs from KubeVirt's device plugins: which host device each VMI
// `devices.hostDevices[]` / `devices.gpus[]` entry gets, read from the environment variables
// KubeVirt's device plugins give the compute container, exactly as virt-launcher reads them
// (KubeVirt pkg/virt-launcher/virtwrap/device/hostdevice/addresspool.go, generic/hostdev.go,
// gpu/hostdev.go):
//   PCI_RESOURCE_<RESOURCE>      = "0000:81:00.1,0000:81:00.2"  (PCI addresses)
//   MDEV_PCI_RESOURCE_<RESOURCE> = "<uuid>,<uuid>"               (mediated devices)
// <RESOURCE> is the deviceName upper-cased with '/' and '.' as '_' (pkg/util/util.go
// ResourceNameToEnvVar). Each device takes the first address left for its resource, and an
// address taken is gone for every resource (AddressPool.Pop); PCI devices first, then mediated
// ones; every device must get one (validateCreationOfDevicePluginsDevices).
// Each becomes a VFIO device by its sysfs path (Cloud Hypervisor DeviceConfig.path, vmm/src/
// vm_config.rs; vm.add-device for hotplug), named with KubeVirt's alias ("hostdevice-<name>",
// "gpu-<name>"), which the domain lists as KubeVirt's HostDevices.
#include <map>
#include <string>
#include <string_view>
#include <tl/expected.hpp>
#include <vector>

#include "vmi/vmi.hpp"

namespace chl::launcher {

inline constexpr std::string_view kPciResourcePrefix = "PCI_RESOURCE";  // v1.PCIResourcePrefix
inline constexpr std::string_view kMdevResourcePrefix =
    "MDEV_PCI_RESOURCE";  // v1.MDevResourcePrefix

struct PlannedHostDevice {
  std::string name;      // hostDevices[].name / gpus[].name
  std::string alias;     // KubeVirt's alias: "hostdevice-<name>" or "gpu-<name>"; CH's device id
  std::string resource;  // deviceName
  bool gpu = false;
  bool mdev = false;       // a mediated device (its UUID) rather than a PCI function
  std::string address;     // "0000:81:00.1", or the mdev UUID
  std::string sysfs_path;  // /sys/bus/pci/devices/<address>/ or /sys/bus/mdev/devices/<uuid>/
};

// KubeVirt's name for a resource's variable: PREFIX_<RESOURCE>.
std::string resource_env_var(std::string_view prefix, std::string_view resource);

// The devices of `vmi`'s hostDevices and gpus (device-plugin ones; DRA claims are refused by
// validate), from `env` (NAME -> value). Problems name the VMI field and the variable.
tl::expected<std::vector<PlannedHostDevice>, vmi::Violations> plan_host_devices(
    const vmi::Vmi& vmi, const std::map<std::string, std::string>& env);

// The PCI_RESOURCE_* and MDEV_PCI_RESOURCE_* variables of an environment block (environ).
std::map<std::string, std::string> device_plugin_env(char** envp);

}  // namespace chl::launcher

#pragma once
// VFIO devices as Cloud Hypervisor v52 opens them (vmm/src/device_manager.rs add_vfio_device,
// with vfio-ioctls 0.6.0's VfioContainer::new / VfioDevice::new): the first device opens the
// container /dev/vfio/vfio, then each device's IOMMU group is read from the link
// <path>/iommu_group and its group file /dev/vfio/<group> is opened. A failure is CH's error
// chain (below "Error from device manager"); an empty chain means attached.
//
// The double does no VFIO ioctls (API version, group viability, the device fd): a container and
// a group that open are taken as working. On our machines there is no /dev/vfio, so this is
// where CH fails too. VMM_DOUBLE_VFIO_ROOT=<dir> (a knob of the double only) puts a directory in
// place of / for these lookups, so a test can give it a container, groups and sysfs links.
#include <string>
#include <vector>

namespace chl::vmm_double {

class VfioModel {
 public:
  explicit VfioModel(std::string root) : root_(std::move(root)) {}

  // CH's chain for the device at `sysfs_path` (DeviceConfig.path); {} when it attaches. The
  // container is opened once, by the first device, and kept (vfio_ops in DeviceManager).
  std::vector<std::string> attach(const std::string& sysfs_path);
  // A VM gone (vm.delete, shutdown): the next VM opens its own container.
  void reset() { container_open_ = false; }

 private:
  std::string root_;  // "" on the machine itself
  bool container_open_ = false;
};

}  // namespace chl::vmm_double

#include "tests/vmm_double/vfio.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <filesystem>

#include "tests/vmm_double/tap_device.hpp"  // rust_os_error

namespace chl::vmm_double {
namespace {

// open(2) of `path` read-write as vfio-ioctls does (OpenOptions read+write); errno or 0.
int open_rw(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return errno;
  ::close(fd);
  return 0;
}

}  // namespace

std::vector<std::string> VfioModel::attach(const std::string& sysfs_path) {
  // DeviceManager::create_vfio_ops -> VfioContainer::new (vfio-ioctls vfio_device.rs:287-292):
  // VfioError::OpenContainer, "failed to open /dev/vfio/vfio container: {0}" (lib.rs:83), wrapped
  // by DeviceManagerError::VfioCreate "Cannot create a VFIO device" (device_manager.rs:363-365).
  if (!container_open_) {
    if (const int e = open_rw(root_ + "/dev/vfio/vfio"); e != 0)
      return {"Cannot create a VFIO device",
              "failed to open /dev/vfio/vfio container: " + rust_os_error(e), rust_os_error(e)};
    container_open_ = true;
  }
  // VfioDevice::get_group_id_from_path (vfio_device.rs:1190-1197): read_link of
  // <path>/iommu_group, its last component parsed as u32; any failure is VfioError::InvalidPath
  // "invalid file path" (lib.rs:117), which has no source.
  const std::vector<std::string> invalid = {"Cannot create a VFIO device", "invalid file path"};
  std::error_code ec;
  const auto link =
      std::filesystem::read_symlink(std::filesystem::path(root_ + sysfs_path) / "iommu_group", ec);
  if (ec) return invalid;
  const std::string group = link.filename().string();
  if (group.empty() || group.find_first_not_of("0123456789") != std::string::npos ||
      group.size() > 10 || std::stoull(group) > UINT_MAX)
    return invalid;
  // VfioGroup::open_group_file (vfio_device.rs:630-637): VfioError::OpenGroup, "failed to open
  // /dev/vfio/{1} group: {0}" (lib.rs:85).
  const std::string id = std::to_string(std::stoul(group));
  if (const int e = open_rw(root_ + "/dev/vfio/" + id); e != 0)
    return {"Cannot create a VFIO device",
            "failed to open /dev/vfio/" + id + " group: " + rust_os_error(e), rust_os_error(e)};
  return {};
}

}  // namespace chl::vmm_double

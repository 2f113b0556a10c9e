#pragma once
// containerDisk volumes. The image is found in the mounted container disk (KubeVirt layout: a
// single image file under disk/) or given directly, and its format is detected by content:
// - qcow2 is converted to raw into the VMI's state directory (Cloud Hypervisor boots raw best);
// - raw is used in place, read-only, unless the guest may write (`writable`), in which case a
//   sparse copy is made into the state directory.
// A converted/copied file from an earlier start of the same VMI (same state directory) is
// reused when its size matches, so guest writes survive reboots and launcher restarts.
#include <filesystem>
#include <optional>
#include <string>

#include "common/error.hpp"
#include "disks/convert.hpp"
#include "disks/image_format.hpp"

namespace chl::disks {

struct ContainerDiskRequest {
  std::string volume_name;          // names the file in state_dir
  std::filesystem::path source;     // container disk root, its disk/ directory, or the image file
  std::filesystem::path state_dir;  // per-VMI state directory (created if missing)
  bool writable = false;            // raw: copy into state_dir instead of using it read-only
  ConvertOptions convert;           // allow_backing, threads, progress, ...
};

struct PreparedDisk {
  std::filesystem::path path;   // the raw image to give the VMM
  std::filesystem::path image;  // the image found in the container disk
  ImageFormat source_format = ImageFormat::Raw;
  std::uint64_t size = 0;  // virtual size
  bool read_only = false;  // raw used in place
  bool converted = false;  // written by this call (conversion or copy)
  bool reused = false;     // an earlier conversion/copy for this VMI was reused
  std::optional<ConvertStats> stats;
};

// The image inside a container disk: `source` itself when it is a file, else the one image
// file in `source`/disk/ (or in `source` when it has no disk/ directory). Several candidates:
// only *.img, *.qcow2 and *.raw files count; still several is an error listing them.
common::Result<std::filesystem::path> find_container_disk_image(
    const std::filesystem::path& source);

common::Result<PreparedDisk> prepare_container_disk(const ContainerDiskRequest& req);

}  // namespace chl::disks

#pragma once
// PVC and hostDisk volumes: files (or block devices) that the launcher uses in place.
#include <cstdint>
#include <filesystem>
#include <optional>

#include "common/error.hpp"
#include "disks/image_format.hpp"

namespace chl::disks {

struct DiskFileRequest {
  // A file or block device, or a directory holding disk.img (KubeVirt's filesystem-mode PVC
  // layout).
  std::filesystem::path path;
  std::optional<std::uint64_t> capacity;  // required minimum size; hostDisk: the capacity
  bool read_only = false;                 // write permission is not needed
  bool create_if_missing = false;         // hostDisk type DiskOrCreate (needs capacity)
};

struct DiskFile {
  std::filesystem::path path;  // the file itself (disk.img inside a directory)
  std::uint64_t size = 0;
  ImageFormat format = ImageFormat::Raw;  // by content
  bool block_device = false;
  bool created = false;  // DiskOrCreate made it now
};

// Check existence, type, permissions (read, and write unless read_only) and size; create a
// sparse file of `capacity` when absent and create_if_missing. Errors name the path and what
// is wrong ("does not exist", "not writable", "is N bytes, smaller than the capacity M").
common::Result<DiskFile> check_disk_file(const DiskFileRequest& req);

}  // namespace chl::disks

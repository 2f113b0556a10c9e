#pragma once
// A FAT (vfat) image written in-process: FAT12 or FAT16 chosen by cluster count as the FAT
// specification defines it, two FATs, 512-byte sectors, the volume label both in the boot
// sector and as a root directory entry (where blkid and Linux read it), and VFAT long file name
// entries for every name that is not already a plain upper-case 8.3 name ("user-data" is nine
// characters, lower case: it needs one).
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "disks/cloud_init_image.hpp"

namespace chl::disks {

struct VfatOptions {
  std::string label;         // "cidata", "config-2": at most 11 bytes
  std::int64_t mtime = 0;    // seconds since the epoch, for every entry (stored as UTC)
  std::uint32_t serial = 0;  // volume serial number; 0 = derived from mtime
};

// Lay the files out. The plan borrows the files' data: keep `files` alive while it is used.
common::Result<ImagePlan> plan_vfat(const std::vector<MediaFile>& files, const VfatOptions& opts);

}  // namespace chl::disks

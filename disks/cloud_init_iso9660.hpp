#pragma once
// An ISO 9660 image written in-process, shaped like `xorrisofs -joliet -rock` output (what
// KubeVirt uses for cloud-init disks): a primary volume descriptor with level-1 (8.3) names
// carrying Rock Ridge (RRIP 1991A: SP/CE/ER on the root, PX, TF, NM on every entry) so Linux
// sees the real names and modes, and a Joliet supplementary tree (UCS-2, "%/E" level 3) with the
// same names for readers without Rock Ridge. Both trees point at the same file extents.
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "disks/cloud_init_image.hpp"

namespace chl::disks {

struct Iso9660Options {
  std::string volume_id;      // "cidata", "config-2" (at most 32 bytes; 16 characters in Joliet)
  std::int64_t mtime = 0;     // seconds since the epoch for every timestamp (UTC)
  unsigned file_mode = 0644;  // Rock Ridge permission bits
  unsigned dir_mode = 0755;
};

inline constexpr std::uint32_t kIsoSectorSize = 2048;

// Lay the files out. The plan borrows the files' data: keep `files` alive while it is used.
common::Result<ImagePlan> plan_iso9660(const std::vector<MediaFile>& files,
                                       const Iso9660Options& opts);

}  // namespace chl::disks

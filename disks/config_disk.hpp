#pragma once
// KubeVirt's config volumes (configMap, secret, serviceAccount, downwardAPI) as disks: an
// ISO 9660 image (Joliet + Rock Ridge, like KubeVirt's `xorrisofs -follow-links -joliet -rock`)
// holding the files of the directory the volume is mounted on, volume id `volumeLabel` or
// "cfgdata", file modes kept (Rock Ridge PX).
//
// The directory is read without ever leaving it: every name is opened with openat2()
// RESOLVE_BENEATH relative to the directory, so a symlink is followed only while it stays inside
// (Kubernetes' atomic-writer layout `key -> ..data/key`, `..data -> ..2024_01_01_...`), and one
// that leads out (absolute, or `../` past the top) is refused with an error naming it.
// Kubernetes' own `..`-prefixed entries (`..data`, `..<timestamp>`) are not put on the disk:
// the files are reached through the visible names. FIFOs, sockets and devices are refused.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "disks/cloud_init_image.hpp"

namespace chl::disks {

inline constexpr const char* kConfigDiskDefaultLabel = "cfgdata";

struct ConfigDirLimits {
  std::uint64_t max_total_bytes = 64ull << 20;  // all file contents together
  std::size_t max_files = 4096;
  unsigned max_depth = 16;  // directory levels below the top
};

// The files under `dir` (recursively), paths relative to it, sorted by path.
common::Result<std::vector<MediaFile>> read_config_dir(const std::filesystem::path& dir,
                                                       const ConfigDirLimits& limits = {});

struct ConfigDiskRequest {
  std::filesystem::path source_dir;
  std::filesystem::path target;  // the ISO image; must not exist
  std::string volume_label;      // "" = "cfgdata" (KubeVirt's default)
  ConfigDirLimits limits;
  std::int64_t mtime = -1;  // timestamps on the media; -1 = now
};

struct ConfigDisk {
  std::size_t files = 0;
  std::uint64_t data_bytes = 0;   // file contents
  std::uint64_t image_bytes = 0;  // ISO size
};

// Read the directory, then write the ISO atomically (temporary file + no-replace link) with mode
// 0600 (it may carry secrets). An existing target is refused (EEXIST) and left untouched.
common::Result<ConfigDisk> write_config_disk(const ConfigDiskRequest& req);

}  // namespace chl::disks

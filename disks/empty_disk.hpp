#pragma once
// emptyDisk volumes: a sparse raw file of the requested capacity, created only if absent.
// As in KubeVirt it lives as long as the VMI: the caller keeps it under the VMI's state
// directory (per uid), so it survives guest reboots and launcher restarts and goes when that
// state is cleaned up. Existing data is never truncated or overwritten.
#include <cstdint>
#include <filesystem>

#include "common/error.hpp"

namespace chl::disks {

struct EmptyDisk {
  std::filesystem::path path;
  std::uint64_t size = 0;  // bytes (the capacity rounded up to 512-byte sectors)
  bool created = false;    // false: an existing file of the right size was reused
};

// Create `path` as a sparse file of `bytes` (rounded up to a multiple of 512, as qemu-img
// does). An existing regular file of exactly that size is reused; any other existing file is
// an error naming both sizes. Creation is atomic (temporary file + no-replace rename).
common::Result<EmptyDisk> create_empty_disk(const std::filesystem::path& path, std::uint64_t bytes);

}  // namespace chl::disks

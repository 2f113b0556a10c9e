#pragma once
// A qcow2 v3 overlay over a raw image (KubeVirt's `ephemeral` volumes: the PVC stays untouched,
// the guest's writes go to a throwaway overlay). Written natively: header with the backing file
// name (absolute) and the backing-format header extension "raw", one refcount table cluster,
// one refcount block, an all-zero L1 table — every cluster unallocated, so reads fall through
// to the backing file until the guest writes. Cloud Hypervisor opens it with
// DiskConfig `image_type: Qcow2, backing_files: true`; qemu-img check finds it clean.
#include <cstdint>
#include <filesystem>

#include "common/error.hpp"

namespace chl::disks {

struct OverlayRequest {
  std::filesystem::path backing;  // the raw image (file or block device), made absolute
  std::filesystem::path target;   // the overlay to create
  std::uint32_t cluster_bits = 16;  // 64 KiB clusters, as qemu-img and Cloud Hypervisor default
};

struct Overlay {
  std::filesystem::path backing;  // absolute, as recorded in the header
  std::uint64_t virtual_size = 0;
  bool created = false;  // false: an overlay of this backing file and size was there already
};

// Create the overlay atomically (temporary file + no-replace rename, mode 0600). The backing
// file must be raw (detected by content: a qcow2 or other image is refused, since its guest
// contents are not its bytes). An existing target is reused when it is a qcow2 whose backing
// file is the same path with format raw and whose virtual size is the backing size (the guest's
// writes from an earlier start of the same VMI); anything else there is an error, never
// overwritten.
common::Result<Overlay> create_overlay(const OverlayRequest& req);

// The overlay bytes for a backing file of `virtual_size` bytes at `backing` (absolute): the whole
// file as written (tests, and create_overlay()).
common::Result<std::string> qcow2_overlay_bytes(const std::string& backing,
                                                std::uint64_t virtual_size,
                                                std::uint32_t cluster_bits = 16);

}  // namespace chl::disks

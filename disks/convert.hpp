#pragma once
// qcow2 -> raw conversion (`ch-launcher disk convert`). The output is byte-identical to
// `qemu-img convert -O raw` and sparse: zero clusters, unallocated clusters and all-zero 4 KiB
// blocks of data become holes. Memory is bounded (a 4 MiB buffer and small caches per worker
// thread); the virtual disk is split into 16 MiB chunks taken by worker threads. The output is
// written to a temporary file next to the destination and renamed on success; an existing
// destination is never overwritten.
#include <cstdint>
#include <filesystem>
#include <functional>

#include "common/error.hpp"
#include "disks/image_format.hpp"

namespace chl::disks {

struct ConvertProgress {
  std::uint64_t done = 0;   // virtual bytes processed
  std::uint64_t total = 0;  // virtual size
};

struct ConvertOptions {
  bool allow_backing = false;       // resolve backing chains instead of refusing them
  unsigned max_backing_depth = 16;  // layers below the top image
  bool copy_raw = false;            // raw input: copy it (sparse) instead of passing it through
  unsigned threads = 0;             // worker threads; 0: two per core (at most 8) with direct,
                                    // else one per core (at most 4)
  bool sync = true;                 // fdatasync the output before the rename
  // Write 4 KiB-aligned data through an O_DIRECT descriptor (no page-cache fill; falls back to
  // buffered writes where the filesystem refuses O_DIRECT).
  bool direct = true;
  bool check_free_space = true;
  // Called on the calling thread about four times a second while converting, and at the end.
  std::function<void(const ConvertProgress&)> progress;
};

struct ConvertStats {
  ImageFormat source_format = ImageFormat::Raw;
  std::uint64_t virtual_size = 0;
  std::uint64_t allocated_bytes = 0;  // data the source (chain) may hold: the free space needed
  std::uint64_t bytes_written = 0;    // non-zero bytes written to the destination
  std::size_t chain_length = 0;       // 1: no backing file
  unsigned threads = 0;
  bool passthrough = false;  // raw source and !copy_raw: nothing was written
  bool copied_raw = false;   // raw source copied to the destination
};

// Convert `src` (format detected by content) to a raw file at `dst`.
// qcow2: converted. raw: passed through (stats.passthrough, nothing written) unless
// opts.copy_raw. Other formats, backing files without allow_backing, corrupt images: errors
// naming what is wrong, and no file left at `dst`.
common::Result<ConvertStats> convert_qcow2_to_raw(const std::filesystem::path& src,
                                                  const std::filesystem::path& dst,
                                                  const ConvertOptions& opts = {});

// Copy a raw image keeping its holes (data extents found with SEEK_DATA/SEEK_HOLE; all-zero blocks
// are not written). Same destination rules as convert_qcow2_to_raw().
common::Result<ConvertStats> copy_raw_image(const std::filesystem::path& src,
                                            const std::filesystem::path& dst,
                                            const ConvertOptions& opts = {});

}  // namespace chl::disks

#pragma once
// qcow2 -> raw conversion (`ch-launcher disk convert`). The output is byte-identical to
// `qemu-img convert -O raw` and sparse: zero clusters, unallocated clusters and all-zero 4 KiB
// blocks of data become holes. Memory is bounded (2 MiB buffers in a small ring, small caches
// per thread); the virtual disk is cut into 2 MiB chunks filled by worker threads (reading,
// decompressing) and written in order by the calling thread. The output is
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

// How plain (uncompressed) data clusters reach the output.
enum class CopyMethod {
  // copy_file_range where the filesystem shares extents (a reflink, probed with FICLONERANGE on
  // the first data cluster: XFS, btrfs, ...); read and write elsewhere, where copy_file_range is
  // an in-kernel copy measured slower than our read+write on ext4 (docs/disks/qcow2.md).
  Auto,
  CopyFileRange,  // always copy_file_range (read and write where the kernel refuses it)
  ReadWrite,      // always read into a buffer and write (all-zero 4 KiB blocks left as holes)
};

struct ConvertOptions {
  bool allow_backing = false;       // resolve backing chains instead of refusing them
  unsigned max_backing_depth = 16;  // layers below the top image
  bool copy_raw = false;            // raw input: copy it (sparse) instead of passing it through
  // Threads filling buffers (reading, decompressing) while the calling thread writes them in
  // order; 1: the calling thread does everything. 0: one per core (at most 4) when the image
  // holds enough compressed data (8 MiB) to pay for them, else 1.
  unsigned threads = 0;
  // Durability: fdatasync the output (and fsync its directory) before it gets its name. Off by
  // default, as qemu-img: the launcher re-makes a container disk from its image after a crash.
  bool sync = false;
  // Write 4 KiB-aligned data through an O_DIRECT descriptor (no page-cache fill; falls back to
  // buffered writes where the filesystem refuses O_DIRECT). Off by default.
  bool direct = false;
  CopyMethod copy = CopyMethod::Auto;
  // On ext4, allocate each run of data of 64 KiB or more with fallocate before writing it
  // (buffered writes into allocated blocks skip ext4's per-block delayed-allocation work; the
  // zero blocks between runs stay holes). Off: every block is written into a hole.
  bool preallocate = true;
  bool check_free_space = true;
  // Called on the calling thread about four times a second while converting, and at the end.
  std::function<void(const ConvertProgress&)> progress;
};

struct ConvertStats {
  ImageFormat source_format = ImageFormat::Raw;
  std::uint64_t virtual_size = 0;
  std::uint64_t allocated_bytes = 0;     // data the source (chain) may hold: the free space needed
  std::uint64_t compressed_bytes = 0;    // of those, in compressed clusters (decompressed size)
  std::uint64_t bytes_written = 0;       // non-zero bytes written to the destination
  std::uint64_t bytes_copied = 0;        // of those, copied file to file with copy_file_range
  std::uint64_t bytes_preallocated = 0;  // of those, allocated with fallocate before the write
  std::size_t chain_length = 0;          // 1: no backing file
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

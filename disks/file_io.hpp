#pragma once
// Whole-buffer file I/O, and writing into a sparse file: all-zero 4 KiB blocks are skipped
// (left as holes in a file that was sized with ftruncate).
#include <cstddef>
#include <cstdint>

#include "common/error.hpp"

namespace chl::disks {

inline constexpr std::size_t kSparseBlock = 4096;

// Read `len` bytes at `offset` fully; bytes past the end of the file read as zeros.
common::Status pread_full(int fd, std::uint64_t offset, std::size_t len, std::uint8_t* buf);

bool all_zero(const std::uint8_t* p, std::size_t n);
common::Status pwrite_full(int fd, std::uint64_t offset, const std::uint8_t* buf, std::size_t len);

// Alignment (file offset, length and memory) of the writes that go through an O_DIRECT fd.
inline constexpr std::size_t kDirectAlign = 4096;

// Where output goes: `fd` (buffered), and optionally `direct_fd`, an O_DIRECT descriptor of the
// same file. Runs whose offset, length and buffer address are all kDirectAlign-aligned are
// written through `direct_fd` — straight from the caller's buffer to the device, without
// filling the page cache (on the development VM buffered writes of fresh pages ran at 200 MB/s,
// direct ones at 1 GB/s) — and the rest through `fd`. The two never write the same block, so
// the page cache stays coherent. A direct write the filesystem refuses (EINVAL) is redone
// buffered.
//
// `preallocate_min` (0: off): a run of at least this many bytes written through `fd` is first
// allocated with fallocate(2) (unwritten extents, the file's size kept). On ext4 a buffered write
// into a hole reserves each 4 KiB block for delayed allocation and records it in the extent
// status tree, which costs more than the copy itself; into an allocated range it does neither
// (docs/disks/qcow2.md: 1 GiB in 124 KiB runs written in 0.30 s, 0.21 s after fallocate; a call
// costs ~5 us, so short runs are written as they are). A refused fallocate (EOPNOTSUPP:
// ext2/3-style files) turns it off for the file; any other failure leaves the write to report the
// problem. `preallocated` counts the bytes allocated that way.
struct OutputFile {
  int fd = -1;
  int direct_fd = -1;
  std::uint64_t preallocate_min = 0;
  std::uint64_t preallocated = 0;
};

// Write buf (the bytes at file offset `offset`) skipping all-zero blocks aligned to
// kSparseBlock in the file. Returns the bytes actually written.
common::Result<std::uint64_t> write_sparse(OutputFile& out, std::uint64_t offset,
                                           const std::uint8_t* buf, std::size_t len);
// Copy `len` bytes at `src_off` of `src_fd` to `dst_off` of `dst_fd` with copy_file_range(2):
// kernel-side, a reflink where the filesystem shares extents. The source's holes stay holes
// (only its SEEK_DATA extents are copied), and so does anything past its end.
struct CopyOutcome {
  std::uint64_t copied = 0;  // bytes copied (holes not counted)
  bool refused = false;      // the kernel will not copy between these files (EXDEV, EINVAL,
                             // ENOSYS, EOPNOTSUPP, ...): read and write the range instead
};
common::Result<CopyOutcome> copy_range(int src_fd, std::uint64_t src_off, int dst_fd,
                                       std::uint64_t dst_off, std::uint64_t len);

inline common::Result<std::uint64_t> write_sparse(int fd, std::uint64_t offset,
                                                  const std::uint8_t* buf, std::size_t len) {
  OutputFile out{fd, -1};
  return write_sparse(out, offset, buf, len);
}

}  // namespace chl::disks

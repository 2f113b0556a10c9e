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
// Write buf (the bytes at file offset `offset`) skipping all-zero blocks aligned to
// kSparseBlock in the file. Returns the bytes actually written.
common::Result<std::uint64_t> write_sparse(int fd, std::uint64_t offset, const std::uint8_t* buf,
                                           std::size_t len);

}  // namespace chl::disks

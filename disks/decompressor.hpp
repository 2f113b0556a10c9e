#pragma once
// Decompression of one qcow2 compressed cluster: raw deflate (zlib, no header, as qemu writes
// it) or a zstd frame. One Decompressor per thread; it keeps its zlib/zstd state between calls.
#include <cstdint>
#include <memory>
#include <span>

#include "common/error.hpp"
#include "disks/qcow2_header.hpp"

namespace chl::disks {

class Decompressor {
 public:
  Decompressor();
  ~Decompressor();
  Decompressor(Decompressor&&) noexcept;
  Decompressor& operator=(Decompressor&&) noexcept;
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;

  // Fill `out` completely from `in`. The input may carry trailing bytes (the rest of the last
  // 512-byte sector): decompression stops once `out` is full. Too little output is an error.
  common::Status decompress(Qcow2Compression type, std::span<const std::uint8_t> in,
                            std::span<std::uint8_t> out);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace chl::disks

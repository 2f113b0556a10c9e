#pragma once
// The qcow2 header (versions 2 and 3) and the header extensions the converter needs, read and
// checked against the file size. Everything that makes an image unreadable for us — unknown
// incompatible features, encryption, external data files, bad table offsets — is an error here,
// named after the field that is wrong.
#include <cstdint>
#include <optional>
#include <string>

#include "common/error.hpp"

namespace chl::disks {

enum class Qcow2Compression : std::uint8_t { Zlib = 0, Zstd = 1 };

struct Qcow2Header {
  std::uint32_t version = 0;
  std::uint64_t backing_file_offset = 0;
  std::uint32_t backing_file_size = 0;
  std::uint32_t cluster_bits = 0;
  std::uint64_t size = 0;  // virtual size in bytes
  std::uint32_t crypt_method = 0;
  std::uint32_t l1_size = 0;
  std::uint64_t l1_table_offset = 0;
  std::uint64_t refcount_table_offset = 0;
  std::uint32_t refcount_table_clusters = 0;
  std::uint32_t nb_snapshots = 0;
  std::uint64_t snapshots_offset = 0;
  std::uint64_t incompatible_features = 0;
  std::uint64_t compatible_features = 0;
  std::uint64_t autoclear_features = 0;
  std::uint32_t refcount_order = 4;
  std::uint32_t header_length = 72;
  Qcow2Compression compression = Qcow2Compression::Zlib;

  std::string backing_file;                   // empty: none
  std::optional<std::string> backing_format;  // header extension 0xe2792aca

  static constexpr std::uint64_t kIncompatDirty = 1u << 0;
  static constexpr std::uint64_t kIncompatCorrupt = 1u << 1;
  static constexpr std::uint64_t kIncompatDataFile = 1u << 2;
  static constexpr std::uint64_t kIncompatCompression = 1u << 3;
  static constexpr std::uint64_t kIncompatExtendedL2 = 1u << 4;

  [[nodiscard]] std::uint64_t cluster_size() const { return std::uint64_t{1} << cluster_bits; }
  [[nodiscard]] bool extended_l2() const {
    return (incompatible_features & kIncompatExtendedL2) != 0;
  }
  [[nodiscard]] bool dirty() const { return (incompatible_features & kIncompatDirty) != 0; }
  // Bytes of one L2 entry (8, or 16 with extended L2 entries) and entries per L2 table.
  [[nodiscard]] std::uint64_t l2_entry_bytes() const { return extended_l2() ? 16 : 8; }
  [[nodiscard]] std::uint64_t l2_entries() const { return cluster_size() / l2_entry_bytes(); }
};

// Limits (qemu's own implementation limits, which every image qemu writes respects).
inline constexpr std::uint64_t kQcow2MaxL1Bytes = 32ull << 20;
inline constexpr std::uint64_t kQcow2MaxRefcountTableBytes = 8ull << 20;
inline constexpr std::uint32_t kQcow2MinClusterBits = 9;
inline constexpr std::uint32_t kQcow2MaxClusterBits = 21;

// Read and check the header of the qcow2 image open on `fd` (its size is `file_size`).
common::Result<Qcow2Header> read_qcow2_header(int fd, std::uint64_t file_size);

}  // namespace chl::disks

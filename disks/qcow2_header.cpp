#include "disks/qcow2_header.hpp"

#include <unistd.h>

#include <cstring>
#include <vector>

#include "common/syscall.hpp"
#include "disks/byte_order.hpp"
#include "disks/file_io.hpp"

namespace chl::disks {

namespace {

using common::fail;

constexpr std::uint32_t kExtEnd = 0x00000000;
constexpr std::uint32_t kExtBackingFormat = 0xe2792aca;
constexpr std::uint32_t kExtDataFile = 0x44415441;
constexpr std::uint64_t kKnownIncompat = 0x1f;

tl::unexpected<common::Error> corrupt(const std::string& what) {
  return fail(std::errc::invalid_argument, what);
}

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// A table [offset, offset+bytes) must be cluster-aligned and inside the file.
common::Status check_table(const char* name, std::uint64_t offset, std::uint64_t bytes,
                           std::uint64_t cluster_size, std::uint64_t file_size) {
  if (offset % cluster_size != 0) {
    return corrupt(std::string(name) + " offset " + hex(offset) + " is not aligned to a cluster");
  }
  if (offset == 0 && bytes != 0) {
    return corrupt(std::string(name) + " offset is 0 (it would overlap the header)");
  }
  if (offset > file_size || bytes > file_size - offset) {
    return corrupt(std::string(name) + " (offset " + hex(offset) + ", " + std::to_string(bytes) +
                   " bytes) is past the end of the file (" + std::to_string(file_size) + " bytes)");
  }
  return {};
}

}  // namespace

common::Result<Qcow2Header> read_qcow2_header(int fd, std::uint64_t file_size) {
  if (file_size < 72)
    return corrupt("file is " + std::to_string(file_size) + " bytes, too short for a qcow2 header");
  std::uint8_t fixed[112] = {};
  CHL_TRY_VOID(pread_full(fd, 0, sizeof fixed, fixed));
  if (std::memcmp(fixed, "QFI\xfb", 4) != 0) return corrupt("not a qcow2 image (bad magic)");

  Qcow2Header h;
  h.version = load_be32(fixed + 4);
  if (h.version != 2 && h.version != 3) {
    return corrupt("unsupported qcow2 version " + std::to_string(h.version) +
                   " (2 and 3 are supported)");
  }
  h.backing_file_offset = load_be64(fixed + 8);
  h.backing_file_size = load_be32(fixed + 16);
  h.cluster_bits = load_be32(fixed + 20);
  h.size = load_be64(fixed + 24);
  h.crypt_method = load_be32(fixed + 32);
  h.l1_size = load_be32(fixed + 36);
  h.l1_table_offset = load_be64(fixed + 40);
  h.refcount_table_offset = load_be64(fixed + 48);
  h.refcount_table_clusters = load_be32(fixed + 56);
  h.nb_snapshots = load_be32(fixed + 60);
  h.snapshots_offset = load_be64(fixed + 64);
  if (h.version >= 3) {
    h.incompatible_features = load_be64(fixed + 72);
    h.compatible_features = load_be64(fixed + 80);
    h.autoclear_features = load_be64(fixed + 88);
    h.refcount_order = load_be32(fixed + 96);
    h.header_length = load_be32(fixed + 100);
  }

  if (h.cluster_bits < kQcow2MinClusterBits || h.cluster_bits > kQcow2MaxClusterBits) {
    return corrupt("cluster_bits " + std::to_string(h.cluster_bits) +
                   " out of range (9 to 21: 512 bytes to 2 MiB)");
  }
  const std::uint64_t cs = h.cluster_size();
  if (h.version >= 3) {
    if (h.header_length < 104 || h.header_length % 8 != 0 || h.header_length > cs) {
      return corrupt("header_length " + std::to_string(h.header_length) +
                     " invalid (at least 104, a multiple of 8, at most one cluster)");
    }
  }
  if (std::uint64_t unknown = h.incompatible_features & ~kKnownIncompat; unknown != 0) {
    return corrupt("unknown incompatible feature bits " + hex(unknown));
  }
  if (h.incompatible_features & Qcow2Header::kIncompatCorrupt) {
    return corrupt(
        "image is marked corrupt (incompatible feature 'corrupt'); repair it with qemu-img check "
        "-r all");
  }
  if (h.incompatible_features & Qcow2Header::kIncompatDataFile) {
    return fail(std::errc::not_supported,
                "image uses an external data file, which is not supported");
  }
  if (h.extended_l2() && h.cluster_bits < 14) {
    return corrupt("extended L2 entries need clusters of at least 16 KiB, cluster_bits is " +
                   std::to_string(h.cluster_bits));
  }
  if (h.crypt_method != 0) {
    return fail(std::errc::not_supported,
                std::string("image is encrypted (") +
                    (h.crypt_method == 1   ? "AES"
                     : h.crypt_method == 2 ? "LUKS"
                                           : "method " + std::to_string(h.crypt_method)) +
                    "), which is not supported");
  }
  if (h.version < 3) {
    h.refcount_order = 4;
  } else if (h.refcount_order > 6) {
    return corrupt("refcount_order " + std::to_string(h.refcount_order) +
                   " out of range (at most 6)");
  }

  // Compression type (byte 104) is present only when header_length covers it.
  std::uint8_t ctype = (h.version >= 3 && h.header_length > 104) ? fixed[104] : 0;
  bool ctype_bit = (h.incompatible_features & Qcow2Header::kIncompatCompression) != 0;
  if (ctype_bit && ctype == 0)
    return corrupt("compression type feature bit set but compression_type is 0");
  if (!ctype_bit && ctype != 0) {
    return corrupt("compression_type " + std::to_string(ctype) +
                   " set without its incompatible feature bit");
  }
  if (ctype > 1)
    return fail(std::errc::not_supported, "unknown compression_type " + std::to_string(ctype));
  h.compression = static_cast<Qcow2Compression>(ctype);

  // Virtual size: the L1 table must cover it, and stay within qemu's 32 MiB limit.
  if (h.size > static_cast<std::uint64_t>(INT64_MAX)) {
    return corrupt("virtual size " + std::to_string(h.size) + " is larger than 2^63-1");
  }
  const std::uint64_t bytes_per_l1 = h.l2_entries() * cs;  // guest bytes one L2 table maps
  const std::uint64_t l1_needed = h.size / bytes_per_l1 + (h.size % bytes_per_l1 != 0);
  if (std::uint64_t{h.l1_size} * 8 > kQcow2MaxL1Bytes) {
    return corrupt("L1 table of " + std::to_string(h.l1_size) +
                   " entries exceeds the 32 MiB limit");
  }
  if (l1_needed > h.l1_size) {
    return corrupt("virtual size " + std::to_string(h.size) + " needs " +
                   std::to_string(l1_needed) + " L1 entries but the L1 table has " +
                   std::to_string(h.l1_size));
  }
  CHL_TRY_VOID(
      check_table("L1 table", h.l1_table_offset, std::uint64_t{h.l1_size} * 8, cs, file_size));

  // Refcount table: we never write, but nonsense here means a broken image.
  const std::uint64_t rt_bytes = std::uint64_t{h.refcount_table_clusters} * cs;
  if (h.refcount_table_clusters == 0) return corrupt("refcount table has 0 clusters");
  if (rt_bytes > kQcow2MaxRefcountTableBytes) {
    return corrupt("refcount table of " + std::to_string(rt_bytes) +
                   " bytes exceeds the 8 MiB limit");
  }
  CHL_TRY_VOID(check_table("refcount table", h.refcount_table_offset, rt_bytes, cs, file_size));

  // Header extensions and the backing file name live in the first cluster.
  const std::uint64_t first = std::min<std::uint64_t>(cs, file_size);
  std::vector<std::uint8_t> head(first);
  CHL_TRY_VOID(pread_full(fd, 0, head.size(), head.data()));
  std::uint64_t pos = h.version >= 3 ? h.header_length : 72;
  while (pos + 8 <= head.size()) {
    std::uint32_t type = load_be32(head.data() + pos);
    std::uint32_t len = load_be32(head.data() + pos + 4);
    if (type == kExtEnd) break;
    if (len > head.size() - pos - 8) {
      return corrupt("header extension " + hex(type) + " (" + std::to_string(len) +
                     " bytes) overruns the first cluster");
    }
    const char* data = reinterpret_cast<const char*>(head.data() + pos + 8);
    if (type == kExtBackingFormat) h.backing_format = std::string(data, len);
    if (type == kExtDataFile) {
      return fail(std::errc::not_supported,
                  "image names an external data file, which is not supported");
    }
    pos += 8 + ((std::uint64_t{len} + 7) & ~std::uint64_t{7});
  }

  if (h.backing_file_offset != 0) {
    if (h.backing_file_size == 0 || h.backing_file_size > 1023) {
      return corrupt("backing file name length " + std::to_string(h.backing_file_size) +
                     " invalid (1 to 1023)");
    }
    if (h.backing_file_offset > cs || h.backing_file_size > cs - h.backing_file_offset ||
        h.backing_file_offset + h.backing_file_size > file_size) {
      return corrupt("backing file name (offset " + hex(h.backing_file_offset) +
                     ") is outside the first cluster");
    }
    h.backing_file.assign(reinterpret_cast<const char*>(head.data() + h.backing_file_offset),
                          h.backing_file_size);
    if (h.backing_file.find('\0') != std::string::npos)
      return corrupt("backing file name contains a NUL byte");
  }
  return h;
}

}  // namespace chl::disks

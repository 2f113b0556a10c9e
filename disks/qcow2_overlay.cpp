#include "disks/qcow2_overlay.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "common/unique_fd.hpp"
#include "disks/atomic_file.hpp"
#include "disks/file_io.hpp"
#include "disks/image_format.hpp"
#include "disks/qcow2_header.hpp"

namespace chl::disks {

namespace {

namespace fs = std::filesystem;
using common::fail;

constexpr std::uint32_t kHeaderLength = 112;        // v3 header with the compression type byte
constexpr std::uint32_t kExtBackingFormat = 0xe2792acau;
constexpr std::uint32_t kRefcountOrder = 4;         // 16-bit refcounts (qemu's default)

void put_be(std::string& s, std::size_t at, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    s[at + static_cast<std::size_t>(i)] = static_cast<char>(v >> (8 * (bytes - 1 - i)));
}

// Size of a raw image: a regular file's length or a block device's capacity.
common::Result<std::uint64_t> image_size(const fs::path& p) {
  common::UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return common::fail_errno("opening '" + p.string() + "'");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return common::fail_errno("stat '" + p.string() + "'");
  if (S_ISREG(st.st_mode)) return static_cast<std::uint64_t>(st.st_size);
  if (S_ISBLK(st.st_mode)) {
    std::uint64_t bytes = 0;
    if (::ioctl(fd.get(), BLKGETSIZE64, &bytes) != 0)
      return common::fail_errno("size of block device '" + p.string() + "'");
    return bytes;
  }
  return fail(std::errc::invalid_argument,
              "'" + p.string() + "' is neither a regular file nor a block device");
}

// An existing target: ours from an earlier start when it matches exactly.
common::Result<Overlay> reuse_existing(const fs::path& target, const fs::path& backing,
                                       std::uint64_t size) {
  auto why = [&](const std::string& what) {
    return fail(std::errc::file_exists,
                "'" + target.string() + "' exists and is not an overlay of '" + backing.string() +
                    "' (" + what + "); refusing to overwrite it");
  };
  common::UniqueFd fd(::open(target.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return common::fail_errno("opening the existing '" + target.string() + "'");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return why("not a regular file");
  auto h = read_qcow2_header(fd.get(), static_cast<std::uint64_t>(st.st_size));
  if (!h) return why(h.error().message());
  if (h->backing_file != backing.string())
    return why("its backing file is '" + h->backing_file + "'");
  if (h->backing_format.value_or("") != "raw") return why("its backing format is not raw");
  if (h->size != size) {
    return why("its virtual size is " + std::to_string(h->size) + " bytes, the backing file's " +
               std::to_string(size));
  }
  return Overlay{backing, size, false};
}

}  // namespace

common::Result<std::string> qcow2_overlay_bytes(const std::string& backing,
                                                std::uint64_t virtual_size,
                                                std::uint32_t cluster_bits) {
  if (cluster_bits < 12 || cluster_bits > kQcow2MaxClusterBits)
    return fail(std::errc::invalid_argument, "overlay cluster size must be 4 KiB to 2 MiB");
  if (backing.empty() || backing.front() != '/')
    return fail(std::errc::invalid_argument, "overlay backing file name must be absolute");
  if (virtual_size == 0) return fail(std::errc::invalid_argument, "the backing file is empty");
  const std::uint64_t cs = std::uint64_t{1} << cluster_bits;
  const std::uint64_t per_l1 = cs * (cs / 8);  // bytes one L2 table maps
  const std::uint64_t l1_size = (virtual_size + per_l1 - 1) / per_l1;
  if (l1_size * 8 > kQcow2MaxL1Bytes)
    return fail(std::errc::file_too_large,
                "virtual size " + std::to_string(virtual_size) + " is too large for a qcow2 image");
  const std::uint64_t l1_clusters = std::max<std::uint64_t>(1, (l1_size * 8 + cs - 1) / cs);
  // Cluster 0: header, extensions, backing name; 1: refcount table; 2: refcount block; 3..: L1.
  const std::uint64_t clusters = 3 + l1_clusters;
  if (clusters > cs / 2)
    return fail(std::errc::file_too_large, "overlay metadata does not fit one refcount block");

  // Header extensions: backing format "raw", then the end marker; the name follows.
  const std::string format = "raw";
  const std::uint64_t ext_at = kHeaderLength;
  const std::uint64_t ext_len = 8 + ((format.size() + 7) / 8) * 8;
  const std::uint64_t name_at = ext_at + ext_len + 8;
  if (backing.size() > 1023 || name_at + backing.size() > cs)
    return fail(std::errc::filename_too_long,
                "backing file name '" + backing + "' is longer than 1023 bytes");

  std::string img(clusters * cs, '\0');
  put_be(img, 0, 0x514649fbu, 4);  // "QFI\xfb"
  put_be(img, 4, 3, 4);            // version
  put_be(img, 8, name_at, 8);      // backing_file_offset
  put_be(img, 16, backing.size(), 4);
  put_be(img, 20, cluster_bits, 4);
  put_be(img, 24, virtual_size, 8);
  put_be(img, 32, 0, 4);  // no encryption
  put_be(img, 36, l1_size, 4);
  put_be(img, 40, 3 * cs, 8);  // L1 table
  put_be(img, 48, 1 * cs, 8);  // refcount table
  put_be(img, 56, 1, 4);       // refcount table clusters
  put_be(img, 60, 0, 4);       // no snapshots
  put_be(img, 64, 0, 8);
  put_be(img, 72, 0, 8);  // incompatible features: none (clean, zlib)
  put_be(img, 80, 0, 8);  // compatible features
  put_be(img, 88, 0, 8);  // autoclear features
  put_be(img, 96, kRefcountOrder, 4);
  put_be(img, 100, kHeaderLength, 4);
  // byte 104: compression type 0 (zlib), 105-111 padding.
  put_be(img, ext_at, kExtBackingFormat, 4);
  put_be(img, ext_at + 4, format.size(), 4);
  img.replace(ext_at + 8, format.size(), format);
  // ext_at + ext_len: end of extensions (type 0, length 0), already zero.
  img.replace(name_at, backing.size(), backing);

  put_be(img, 1 * cs, 2 * cs, 8);  // refcount table entry 0 -> the block in cluster 2
  for (std::uint64_t c = 0; c < clusters; ++c) put_be(img, 2 * cs + 2 * c, 1, 2);
  // The L1 table stays zero: no L2 tables, every cluster reads from the backing file.
  return img;
}

common::Result<Overlay> create_overlay(const OverlayRequest& req) {
  auto run = [&]() -> common::Result<Overlay> {
    std::error_code ec;
    const fs::path backing = fs::absolute(req.backing, ec).lexically_normal();
    if (ec) return fail(ec, "resolving '" + req.backing.string() + "'");
    CHL_TRY(ImageFormat format, detect_format(backing));
    if (format != ImageFormat::Raw) {
      return fail(std::errc::not_supported,
                  "'" + backing.string() + "' is a " + std::string(format_name(format)) +
                      " image; an ephemeral overlay needs a raw backing image");
    }
    CHL_TRY(std::uint64_t size, image_size(backing));
    struct stat st {};
    if (::lstat(req.target.c_str(), &st) == 0) return reuse_existing(req.target, backing, size);
    CHL_TRY(std::string bytes, qcow2_overlay_bytes(backing.string(), size, req.cluster_bits));
    CHL_TRY(AtomicFile out, AtomicFile::create(req.target));
    CHL_TRY_VOID(pwrite_full(out.fd(), 0, reinterpret_cast<const std::uint8_t*>(bytes.data()),
                             bytes.size()));
    CHL_TRY_VOID(out.commit(true));
    return Overlay{backing, size, true};
  };
  return common::wrap(run(), "creating overlay '" + req.target.string() + "' over '" +
                                 req.backing.string() + "'");
}

}  // namespace chl::disks

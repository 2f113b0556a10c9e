// open_image_chain() and the raw layer.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <utility>
#include <vector>

#include "disks/file_io.hpp"
#include "disks/image_format.hpp"
#include "disks/image_layer.hpp"
#include "disks/qcow2_layer.hpp"

namespace chl::disks {

namespace {

using common::fail;
using FileId = std::pair<dev_t, ino_t>;

// A backing file name that is not a local path (qemu accepts "json:{...}", "nbd://...").
bool is_protocol(const std::string& name) {
  return name.rfind("json:", 0) == 0 || name.find("://") != std::string::npos;
}

common::Result<std::unique_ptr<ImageLayer>> open_layer(const std::string& path,
                                                       const OpenOptions& opts, std::size_t depth,
                                                       std::vector<FileId>& seen,
                                                       std::optional<ImageFormat> forced) {
  common::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return common::fail_errno("opening '" + path + "'");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return common::fail_errno("stat '" + path + "'");
  if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
    return fail(std::errc::invalid_argument,
                "'" + path + "' is not a regular file or block device");
  }
  const FileId id{st.st_dev, st.st_ino};
  for (const auto& s : seen) {
    if (s == id)
      return fail(std::errc::too_many_symbolic_link_levels,
                  "backing chain loop: '" + path + "' is already in the chain");
  }
  seen.push_back(id);
  std::uint64_t size = static_cast<std::uint64_t>(st.st_size);
  if (S_ISBLK(st.st_mode)) {
    off_t end = ::lseek(fd.get(), 0, SEEK_END);
    if (end < 0) return common::fail_errno("size of '" + path + "'");
    size = static_cast<std::uint64_t>(end);
  }
  ImageFormat format = ImageFormat::Raw;
  if (forced) {
    format = *forced;
  } else {
    CHL_TRY(format, common::wrap(detect_format_fd(fd.get()), "'" + path + "'"));
  }

  if (format == ImageFormat::Raw)
    return std::make_unique<RawLayer>(std::move(fd), path, size, depth);
  if (format != ImageFormat::Qcow2) {
    return fail(std::errc::not_supported, "'" + path + "' is a " +
                                              std::string(format_name(format)) +
                                              " image; only qcow2 and raw are supported");
  }
  auto opened = Qcow2Layer::open(std::move(fd), path, size, depth);
  if (!opened) return tl::unexpected(std::move(opened.error()).wrap("qcow2 image '" + path + "'"));
  std::unique_ptr<Qcow2Layer> layer = std::move(*opened);
  const Qcow2Header& h = layer->header();
  if (h.backing_file.empty()) return layer;

  if (!opts.allow_backing) {
    return fail(std::errc::operation_not_permitted,
                "qcow2 image '" + path + "' has a backing file '" + h.backing_file +
                    "': backing files are refused (allow them explicitly with --allow-backing)");
  }
  if (depth + 1 > opts.max_backing_depth) {
    return fail(std::errc::too_many_symbolic_link_levels,
                "backing chain is deeper than " + std::to_string(opts.max_backing_depth) +
                    " layers at '" + path + "'");
  }
  if (is_protocol(h.backing_file)) {
    return fail(std::errc::not_supported, "qcow2 image '" + path + "': backing file '" +
                                              h.backing_file + "' is not a local file");
  }
  std::filesystem::path bpath(h.backing_file);
  if (bpath.is_relative()) bpath = std::filesystem::path(path).parent_path() / bpath;
  std::optional<ImageFormat> bformat;
  if (h.backing_format) {
    // The overlay says what its backing file is (qemu honours it; so do we).
    if (*h.backing_format == "raw") {
      bformat = ImageFormat::Raw;
    } else if (*h.backing_format == "qcow2") {
      bformat = ImageFormat::Qcow2;
    } else {
      return fail(std::errc::not_supported, "qcow2 image '" + path + "': backing format '" +
                                                *h.backing_format +
                                                "' is not supported (qcow2 or raw)");
    }
  }
  auto backing = open_layer(bpath.string(), opts, depth + 1, seen, bformat);
  if (!backing)
    return tl::unexpected(std::move(backing.error()).wrap("backing file of '" + path + "'"));
  layer->set_backing(std::move(*backing));
  return layer;
}

}  // namespace

common::Result<std::unique_ptr<ImageLayer>> open_image_chain(const std::string& path,
                                                             const OpenOptions& opts) {
  std::vector<FileId> seen;
  return open_layer(path, opts, 0, seen, std::nullopt);
}

common::Result<Extent> RawLayer::status(ReadContext&, std::uint64_t, std::uint64_t len) const {
  return Extent{false, len};
}

common::Status RawLayer::read(ReadContext&, std::uint64_t off, std::uint64_t len,
                              std::uint8_t* buf) const {
  auto r = pread_full(fd_.get(), off, len, buf);
  if (!r) return tl::unexpected(r.error().wrap("reading '" + path_ + "'"));
  return {};
}

common::Result<Mapping> RawLayer::map(ReadContext&, std::uint64_t off, std::uint64_t len) const {
  return Mapping{len, fd_.get(), off};
}

common::Result<Allocation> RawLayer::allocation(ReadContext&) const { return Allocation{size_, 0}; }

}  // namespace chl::disks

#include "disks/container_disk.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <system_error>
#include <vector>

#include "disks/image_layer.hpp"

namespace chl::disks {

namespace {

using common::fail;
namespace fs = std::filesystem;

bool image_extension(const fs::path& p) {
  const auto ext = p.extension().string();
  return ext == ".img" || ext == ".qcow2" || ext == ".raw";
}

std::string join(const std::vector<fs::path>& v) {
  std::string s;
  for (const auto& p : v) s += (s.empty() ? "" : ", ") + p.filename().string();
  return s;
}

common::Status check_volume_name(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 253 && name != "." && name != ".." &&
                  std::all_of(name.begin(), name.end(), [](char c) {
                    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                           (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
                  });
  if (!ok) return fail(std::errc::invalid_argument, "invalid volume name '" + name + "'");
  return {};
}

// Virtual size of the image (raw: its size; qcow2: the header's).
common::Result<std::uint64_t> virtual_size(const fs::path& image, const ConvertOptions& opts) {
  CHL_TRY(auto top, open_image_chain(image.string(),
                                     OpenOptions{opts.allow_backing, opts.max_backing_depth}));
  return top->virtual_size();
}

}  // namespace

common::Result<fs::path> find_container_disk_image(const fs::path& source) {
  std::error_code ec;
  const auto st = fs::status(source, ec);
  if (ec || !fs::exists(st))
    return fail(std::errc::no_such_file_or_directory, "'" + source.string() + "' does not exist");
  if (fs::is_regular_file(st) || fs::is_block_file(st)) return source;
  if (!fs::is_directory(st))
    return fail(std::errc::invalid_argument,
                "'" + source.string() + "' is not a file or directory");
  fs::path dir = source;
  if (fs::is_directory(source / "disk", ec)) dir = source / "disk";

  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    std::error_code fec;
    if (it->is_regular_file(fec)) files.push_back(it->path());
  }
  if (ec) return fail(ec, "listing '" + dir.string() + "'");
  std::sort(files.begin(), files.end());
  if (files.size() > 1) {
    std::vector<fs::path> images;
    std::copy_if(files.begin(), files.end(), std::back_inserter(images), image_extension);
    if (images.size() == 1) return images.front();
    return fail(std::errc::invalid_argument, "several candidate images in '" + dir.string() +
                                                 "' (" + join(images.empty() ? files : images) +
                                                 "); name the image file explicitly");
  }
  if (files.empty())
    return fail(std::errc::no_such_file_or_directory, "no image file in '" + dir.string() + "'");
  return files.front();
}

common::Result<PreparedDisk> prepare_container_disk(const ContainerDiskRequest& req) {
  auto run = [&]() -> common::Result<PreparedDisk> {
    CHL_TRY_VOID(check_volume_name(req.volume_name));
    PreparedDisk out;
    CHL_TRY(out.image, find_container_disk_image(req.source));
    CHL_TRY(out.source_format, detect_format(out.image));
    if (out.source_format != ImageFormat::Raw && out.source_format != ImageFormat::Qcow2) {
      return fail(std::errc::not_supported, "'" + out.image.string() + "' is a " +
                                                std::string(format_name(out.source_format)) +
                                                " image; containerDisks must be qcow2 or raw");
    }
    CHL_TRY(out.size, virtual_size(out.image, req.convert));
    if (out.source_format == ImageFormat::Raw && !req.writable) {
      out.path = out.image;
      out.read_only = true;
      return out;
    }

    std::error_code ec;
    fs::create_directories(req.state_dir, ec);
    if (ec) return fail(ec, "creating state directory '" + req.state_dir.string() + "'");
    out.path = req.state_dir / ("containerdisk-" + req.volume_name + ".raw");
    struct stat st {};
    if (::lstat(out.path.c_str(), &st) == 0) {
      // Written by an earlier start of this VMI (files appear only complete: temp + rename).
      if (!S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) != out.size) {
        return fail(std::errc::file_exists, "'" + out.path.string() + "' exists but is not a " +
                                                std::to_string(out.size) + "-byte raw image of '" +
                                                out.image.string() +
                                                "'; remove it or use a fresh state directory");
      }
      out.reused = true;
      return out;
    }
    ConvertOptions opts = req.convert;
    opts.copy_raw = true;
    CHL_TRY(ConvertStats stats, convert_qcow2_to_raw(out.image, out.path, opts));
    out.stats = stats;
    out.converted = true;
    return out;
  };
  return common::wrap(run(), "containerDisk '" + req.volume_name + "'");
}

}  // namespace chl::disks

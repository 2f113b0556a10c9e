#include "disks/cloud_init_image.hpp"

#include "disks/atomic_file.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/syscall.hpp"
#include "common/unique_fd.hpp"

namespace chl::disks {

using common::fail;
using common::fail_errno;
using common::retry_eintr;
using common::Status;
using common::UniqueFd;

std::string render_image(const ImagePlan& plan) {
  std::string out(plan.size, '\0');
  for (const auto& e : plan.extents) {
    auto b = e.bytes();
    out.replace(e.offset, b.size(), b);
  }
  return out;
}

Status check_media_paths(const std::vector<MediaFile>& files) {
  for (const auto& f : files) {
    if (f.path.empty() || f.path.front() == '/' || f.path.back() == '/')
      return fail(std::errc::invalid_argument, "media file path '" + f.path + "' must be relative");
    std::size_t start = 0;
    while (start <= f.path.size()) {
      auto slash = f.path.find('/', start);
      if (slash == std::string::npos) slash = f.path.size();
      auto part = std::string_view(f.path).substr(start, slash - start);
      if (part.empty() || part == "." || part == "..")
        return fail(std::errc::invalid_argument,
                    "media file path '" + f.path + "' has an empty, '.' or '..' component");
      start = slash + 1;
    }
  }
  for (std::size_t i = 0; i < files.size(); ++i)
    for (std::size_t j = i + 1; j < files.size(); ++j)
      if (files[i].path == files[j].path)
        return fail(std::errc::invalid_argument, "media file '" + files[i].path + "' given twice");
  return {};
}

common::Result<MediaDir> build_media_tree(const std::vector<MediaFile>& files) {
  CHL_TRY_VOID(check_media_paths(files));
  MediaDir root;
  for (const auto& f : files) {
    MediaDir* dir = &root;
    std::size_t start = 0;
    for (;;) {
      auto slash = f.path.find('/', start);
      std::string part =
          f.path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
      if (slash == std::string::npos) {
        for (const auto& d : dir->dirs)
          if (d.name == part)
            return fail(std::errc::invalid_argument,
                        "media path '" + f.path + "' is a directory too");
        dir->files.push_back({part, &f});
        break;
      }
      for (const auto& e : dir->files)
        if (e.name == part)
          return fail(std::errc::invalid_argument,
                      "media path '" + f.path + "' goes through a file");
      MediaDir* next = nullptr;
      for (auto& d : dir->dirs)
        if (d.name == part) next = &d;
      if (!next) {
        dir->dirs.push_back(MediaDir{part, {}, {}});
        next = &dir->dirs.back();
      }
      dir = next;
      start = slash + 1;
    }
  }
  return root;
}

namespace {

Status write_all_at(int fd, std::string_view data, std::uint64_t offset) {
  while (!data.empty()) {
    ssize_t n = retry_eintr(
        [&] { return ::pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset)); });
    if (n < 0) return fail_errno("writing at offset " + std::to_string(offset));
    if (n == 0) return fail(std::errc::io_error, "short write at offset " + std::to_string(offset));
    data.remove_prefix(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return {};
}

Status fill(int fd, const ImagePlan& plan) {
  if (::ftruncate(fd, static_cast<off_t>(plan.size)) != 0) return fail_errno("sizing the image");
  for (const auto& e : plan.extents) CHL_TRY_VOID(write_all_at(fd, e.bytes(), e.offset));
  return {};
}

}  // namespace

Status write_image_file(const std::filesystem::path& dest, const ImagePlan& plan,
                        const ImageWriteOptions& opts) {
  const std::string what = "writing image '" + dest.string() + "'";
  // Unnamed until linked in (or a hidden name removed on failure); never over an existing file.
  CHL_TRY(auto file, common::wrap(AtomicFile::create(dest, static_cast<mode_t>(opts.mode)), what));
  if (auto s = fill(file.fd(), plan); !s) return tl::unexpected(s.error().wrap(what));
  return common::wrap(file.commit(opts.durable), what);
}

}  // namespace chl::disks

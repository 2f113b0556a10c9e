#include "disks/cloud_init_image.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <random>

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

Status fill(int fd, const ImagePlan& plan, bool durable) {
  if (::ftruncate(fd, static_cast<off_t>(plan.size)) != 0) return fail_errno("sizing the image");
  for (const auto& e : plan.extents) CHL_TRY_VOID(write_all_at(fd, e.bytes(), e.offset));
  if (durable && retry_eintr([&] { return ::fsync(fd); }) != 0) return fail_errno("fsync");
  return {};
}

void sync_dir(const std::filesystem::path& dir) {
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d) (void)::fsync(d.get());  // best effort: the data itself is already durable
}

// Removes a named temporary file unless released.
struct TempName {
  std::filesystem::path path;
  ~TempName() {
    if (!path.empty()) ::unlink(path.c_str());
  }
};

}  // namespace

Status write_image_file(const std::filesystem::path& dest, const ImagePlan& plan,
                        const ImageWriteOptions& opts) {
  const std::string what = "writing image '" + dest.string() + "'";
  struct stat st {};
  if (::lstat(dest.c_str(), &st) == 0)
    return fail(std::errc::file_exists, what + ": the file exists already (never overwritten)");
  std::filesystem::path dir = dest.parent_path();
  if (dir.empty()) dir = ".";
  const mode_t mode = static_cast<mode_t>(opts.mode);

  // Preferred: an unnamed file linked in at the end; linkat() refuses an existing name, and a
  // crash leaves nothing behind.
  UniqueFd tmp(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, mode));
  if (tmp) {
    if (auto s = fill(tmp.get(), plan, opts.durable); !s)
      return tl::unexpected(s.error().wrap(what));
    if (::fchmod(tmp.get(), mode) != 0) return fail_errno(what + ": chmod");
    std::string proc = "/proc/self/fd/" + std::to_string(tmp.get());
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, dest.c_str(), AT_SYMLINK_FOLLOW) == 0) {
      if (opts.durable) sync_dir(dir);
      return {};
    }
    if (errno == EEXIST)
      return fail(std::errc::file_exists,
                  what + ": the file appeared meanwhile (never overwritten)");
    if (errno != ENOENT && errno != EPERM && errno != EXDEV)
      return fail_errno(what + ": linking the finished image");
    // No /proc: fall through to a named temporary file.
  } else if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
    return fail_errno(what + ": creating a temporary file in '" + dir.string() + "'");
  }

  std::random_device rd;
  TempName temp;
  UniqueFd fd;
  for (int attempt = 0; attempt < 16 && !fd; ++attempt) {
    temp.path = dir / ("." + dest.filename().string() + ".tmp-" + std::to_string(rd()));
    fd.reset(::open(temp.path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode));
    if (!fd && errno != EEXIST) {
      temp.path.clear();
      return fail_errno(what + ": creating a temporary file in '" + dir.string() + "'");
    }
  }
  if (!fd) {
    temp.path.clear();
    return fail(std::errc::file_exists, what + ": no free temporary name");
  }
  if (auto s = fill(fd.get(), plan, opts.durable); !s) return tl::unexpected(s.error().wrap(what));
  if (::renameat2(AT_FDCWD, temp.path.c_str(), AT_FDCWD, dest.c_str(), RENAME_NOREPLACE) == 0) {
    temp.path.clear();
  } else if (errno == EINVAL || errno == ENOSYS) {
    // No RENAME_NOREPLACE on this filesystem: link() also refuses an existing name.
    if (::link(temp.path.c_str(), dest.c_str()) != 0)
      return fail_errno(what + ": linking the finished image");
  } else if (errno == EEXIST) {
    return fail(std::errc::file_exists, what + ": the file appeared meanwhile (never overwritten)");
  } else {
    return fail_errno(what + ": renaming the finished image");
  }
  if (opts.durable) sync_dir(dir);
  return {};
}

}  // namespace chl::disks

#include "disks/atomic_file.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <string>

namespace chl::disks {

namespace {

std::filesystem::path parent_of(const std::filesystem::path& p) {
  auto dir = p.parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

}  // namespace

common::Result<AtomicFile> AtomicFile::create(const std::filesystem::path& dest) {
  struct stat st {};
  if (::lstat(dest.c_str(), &st) == 0) {
    return common::fail(std::errc::file_exists,
                        "'" + dest.string() + "' already exists; refusing to overwrite it");
  }
  if (errno != ENOENT) return common::fail_errno("checking '" + dest.string() + "'");
  const auto dir = parent_of(dest);
  std::string tmpl = (dir / ("." + dest.filename().string() + ".tmp-XXXXXX")).string();
  int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd < 0) return common::fail_errno("creating a temporary file in '" + dir.string() + "'");
  return AtomicFile(common::UniqueFd(fd), tmpl, dest);
}

AtomicFile::AtomicFile(AtomicFile&& o) noexcept
    : fd_(std::move(o.fd_)),
      temp_(std::move(o.temp_)),
      dest_(std::move(o.dest_)),
      committed_(o.committed_) {
  o.committed_ = true;  // the moved-from object owns nothing to remove
}

AtomicFile::~AtomicFile() {
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

common::Status AtomicFile::commit(bool sync) {
  if (committed_)
    return common::fail(std::errc::invalid_argument, "'" + dest_.string() + "' already committed");
  if (sync && ::fdatasync(fd_.get()) != 0)
    return common::fail_errno("syncing '" + temp_.string() + "'");
  if (::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, dest_.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == EEXIST) {
      return common::fail(std::errc::file_exists,
                          "'" + dest_.string() + "' appeared meanwhile; not overwriting it");
    }
    if (errno != EINVAL && errno != ENOSYS)
      return common::fail_errno("renaming into '" + dest_.string() + "'");
    // No RENAME_NOREPLACE on this filesystem: link() refuses existing names just as well.
    if (::link(temp_.c_str(), dest_.c_str()) != 0) {
      if (errno == EEXIST) {
        return common::fail(std::errc::file_exists,
                            "'" + dest_.string() + "' appeared meanwhile; not overwriting it");
      }
      return common::fail_errno("linking into '" + dest_.string() + "'");
    }
    ::unlink(temp_.c_str());
  }
  committed_ = true;
  if (sync) {
    common::UniqueFd dir(::open(parent_of(dest_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir || ::fsync(dir.get()) != 0)
      return common::fail_errno("syncing directory of '" + dest_.string() + "'");
  }
  return {};
}

common::Result<std::uint64_t> free_space(const std::filesystem::path& dir) {
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0)
    return common::fail_errno("statvfs '" + dir.string() + "'");
  return static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

}  // namespace chl::disks

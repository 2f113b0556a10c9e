#include "disks/atomic_file.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <string>
#include <string_view>

namespace chl::disks {

namespace {

std::filesystem::path parent_of(const std::filesystem::path& p) {
  auto dir = p.parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

constexpr std::string_view kTempMarker = ".tmp-";

bool proc_fd_available() { return ::access("/proc/self/fd", X_OK) == 0; }

}  // namespace

common::Result<AtomicFile> AtomicFile::create(const std::filesystem::path& dest, mode_t mode) {
  struct stat st {};
  if (::lstat(dest.c_str(), &st) == 0) {
    return common::fail(std::errc::file_exists,
                        "'" + dest.string() + "' already exists; refusing to overwrite it");
  }
  if (errno != ENOENT) return common::fail_errno("checking '" + dest.string() + "'");
  const auto dir = parent_of(dest);
  // Unnamed until commit: nothing to clean up if we die. Linked in through /proc/self/fd.
  if (proc_fd_available()) {
    common::UniqueFd fd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, mode));
    if (fd) {
      if (::fchmod(fd.get(), mode) != 0)
        return common::fail_errno("setting the mode of a new file in '" + dir.string() + "'");
      return AtomicFile(std::move(fd), {}, dest);
    }
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
      return common::fail_errno("creating a temporary file in '" + dir.string() + "'");
  }
  std::string tmpl = (dir / ("." + dest.filename().string() + std::string(kTempMarker) + "XXXXXX")).string();
  common::UniqueFd fd(::mkostemp(tmpl.data(), O_CLOEXEC));
  if (!fd) return common::fail_errno("creating a temporary file in '" + dir.string() + "'");
  AtomicFile f(std::move(fd), tmpl, dest);  // removes the name if what follows fails
  if (::fchmod(f.fd(), mode) != 0) return common::fail_errno("setting the mode of '" + tmpl + "'");
  return f;
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

namespace {

tl::unexpected<common::Error> appeared(const std::filesystem::path& dest) {
  return common::fail(std::errc::file_exists,
                      "'" + dest.string() + "' appeared meanwhile; not overwriting it");
}

}  // namespace

common::Status AtomicFile::commit(bool sync) {
  if (committed_)
    return common::fail(std::errc::invalid_argument, "'" + dest_.string() + "' already committed");
  if (sync && ::fdatasync(fd_.get()) != 0)
    return common::fail_errno("syncing the file for '" + dest_.string() + "'");
  if (temp_.empty()) {
    // linkat() never replaces an existing name.
    const std::string proc = "/proc/self/fd/" + std::to_string(fd_.get());
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, dest_.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      if (errno == EEXIST) return appeared(dest_);
      return common::fail_errno("linking into '" + dest_.string() + "'");
    }
  } else if (::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, dest_.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == EEXIST) return appeared(dest_);
    if (errno != EINVAL && errno != ENOSYS)
      return common::fail_errno("renaming into '" + dest_.string() + "'");
    // No RENAME_NOREPLACE on this filesystem: link() refuses existing names just as well.
    if (::link(temp_.c_str(), dest_.c_str()) != 0) {
      if (errno == EEXIST) return appeared(dest_);
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

std::size_t remove_stale_temporaries(const std::filesystem::path& dir) {
  std::size_t removed = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    // ".<name>.tmp-XXXXXX": mkostemp's six characters after the marker.
    const auto at = name.rfind(kTempMarker);
    if (name.size() < 2 || name[0] != '.' || at == std::string::npos || at == 0 ||
        name.size() != at + kTempMarker.size() + 6)
      continue;
    if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
    if (::unlink(it->path().c_str()) == 0) ++removed;
  }
  return removed;
}

common::Result<std::uint64_t> free_space(const std::filesystem::path& dir) {
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0)
    return common::fail_errno("statvfs '" + dir.string() + "'");
  return static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

}  // namespace chl::disks

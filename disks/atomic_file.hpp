#pragma once
// A file written in its destination directory and linked into place on commit — never over an
// existing file. Preferred: an unnamed file (O_TMPFILE) linked in with linkat(), so that even a
// SIGKILL mid-write leaves nothing behind. Where the filesystem has no O_TMPFILE (or /proc is
// not mounted), a hidden temporary name `.<name>.tmp-XXXXXX` renamed with RENAME_NOREPLACE (or
// link+unlink); until commit() it is removed on destruction, and a launcher that died mid-write
// leaves one for StateDir's recovery to remove (remove_stale_temporaries).
#include <sys/types.h>

#include <cstdint>
#include <filesystem>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace chl::disks {

class AtomicFile {
 public:
  // Refuses (EEXIST) when `dest` exists. The file gets `mode` (default 0600; umask ignored).
  static common::Result<AtomicFile> create(const std::filesystem::path& dest, mode_t mode = 0600);

  AtomicFile(AtomicFile&& o) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  [[nodiscard]] int fd() const { return fd_.get(); }
  // The temporary name; empty for an unnamed (O_TMPFILE) file.
  [[nodiscard]] const std::filesystem::path& temp_path() const { return temp_; }
  [[nodiscard]] const std::filesystem::path& dest() const { return dest_; }

  // fdatasync (when `sync`), link or rename into place without replacing anything, fsync the
  // directory (when `sync`).
  common::Status commit(bool sync = true);

 private:
  AtomicFile(common::UniqueFd fd, std::filesystem::path temp, std::filesystem::path dest)
      : fd_(std::move(fd)), temp_(std::move(temp)), dest_(std::move(dest)) {}
  common::UniqueFd fd_;
  std::filesystem::path temp_;
  std::filesystem::path dest_;
  bool committed_ = false;
};

// Bytes available to an unprivileged writer in the filesystem holding `dir`.
// Remove the hidden temporary files (`.<name>.tmp-*`) an AtomicFile left in `dir` (not
// recursive) when its process was killed mid-write; returns how many were removed.
std::size_t remove_stale_temporaries(const std::filesystem::path& dir);

common::Result<std::uint64_t> free_space(const std::filesystem::path& dir);

}  // namespace chl::disks

#pragma once
// A file written under a temporary name in its destination directory and renamed into place on
// commit — never over an existing file (renameat2 RENAME_NOREPLACE, or link+unlink where the
// filesystem lacks it). Until commit() the temporary file is removed on destruction, so a
// failed write leaves nothing behind.
#include <cstdint>
#include <filesystem>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace chl::disks {

class AtomicFile {
 public:
  // Refuses (EEXIST) when `dest` exists. The file is created with mode 0600.
  static common::Result<AtomicFile> create(const std::filesystem::path& dest);

  AtomicFile(AtomicFile&& o) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  [[nodiscard]] int fd() const { return fd_.get(); }
  [[nodiscard]] const std::filesystem::path& temp_path() const { return temp_; }
  [[nodiscard]] const std::filesystem::path& dest() const { return dest_; }

  // fdatasync (when `sync`), rename into place without replacing anything, fsync the directory.
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
common::Result<std::uint64_t> free_space(const std::filesystem::path& dir);

}  // namespace chl::disks

#pragma once
// The console log file (`virt-serial0-log`): every byte the guest wrote, appended as it
// arrives. Size-capped with one rotation: when the file would pass `max_bytes` it is renamed
// to "<path>.1" (replacing the previous one) and a fresh file is started, so at most
// 2 × max_bytes of the most recent output are kept, in order, across the two files.
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <span>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace chl::console_bridge {

class ConsoleLog {
 public:
  // Open (append to) `path`; created with mode 0600 if missing.
  static common::Result<ConsoleLog> open(const std::filesystem::path& path, std::uint64_t max_bytes);

  // Append, rotating as needed. Handles partial writes and EINTR.
  common::Status append(std::span<const char> data);

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] std::filesystem::path rotated_path() const;
  [[nodiscard]] std::uint64_t size() const { return size_; }

 private:
  ConsoleLog(common::UniqueFd fd, std::filesystem::path path, std::uint64_t size, std::uint64_t max)
      : fd_(std::move(fd)), path_(std::move(path)), size_(size), max_(max) {}
  common::Status rotate();
  common::Status write_all(const char* data, std::size_t len);

  common::UniqueFd fd_;
  std::filesystem::path path_;
  std::uint64_t size_ = 0;
  std::uint64_t max_ = 0;
};

}  // namespace chl::console_bridge

#include "console_bridge/console_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "common/syscall.hpp"

namespace chl::console_bridge {

using common::fail;
using common::fail_errno;
using common::Result;
using common::Status;
using common::UniqueFd;

namespace {

Result<UniqueFd> open_log(const std::filesystem::path& path, int extra_flags) {
  int fd = common::retry_eintr([&] {
    return ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY | extra_flags,
                  0600);
  });
  if (fd < 0) return fail_errno("opening console log " + path.string());
  return UniqueFd(fd);
}

}  // namespace

Result<ConsoleLog> ConsoleLog::open(const std::filesystem::path& path, std::uint64_t max_bytes) {
  if (max_bytes == 0) return fail(std::errc::invalid_argument, "console log size cap must be > 0");
  CHL_TRY(UniqueFd fd, open_log(path, 0));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail_errno("stat console log " + path.string());
  if (!S_ISREG(st.st_mode)) {
    return fail(std::errc::invalid_argument, "console log " + path.string() + " is not a regular file");
  }
  return ConsoleLog(std::move(fd), path, static_cast<std::uint64_t>(st.st_size), max_bytes);
}

std::filesystem::path ConsoleLog::rotated_path() const {
  std::filesystem::path p = path_;
  p += ".1";
  return p;
}

Status ConsoleLog::rotate() {
  if (::rename(path_.c_str(), rotated_path().c_str()) != 0) {
    return fail_errno("rotating console log " + path_.string());
  }
  CHL_TRY(UniqueFd fd, open_log(path_, O_TRUNC));
  fd_ = std::move(fd);
  size_ = 0;
  return {};
}

Status ConsoleLog::write_all(const char* data, std::size_t len) {
  while (len > 0) {
    ssize_t n = common::retry_eintr([&] { return ::write(fd_.get(), data, len); });
    if (n < 0) return fail_errno("writing console log " + path_.string());
    data += n;
    len -= static_cast<std::size_t>(n);
    size_ += static_cast<std::uint64_t>(n);
  }
  return {};
}

Status ConsoleLog::append(std::span<const char> data) {
  if (!fd_) return fail(std::errc::bad_file_descriptor, "console log " + path_.string() + " is closed");
  const char* p = data.data();
  std::size_t left = data.size();
  while (left > 0) {
    if (size_ >= max_) CHL_TRY_VOID(rotate());
    std::size_t room = static_cast<std::size_t>(std::min<std::uint64_t>(max_ - size_, left));
    CHL_TRY_VOID(write_all(p, room));
    p += room;
    left -= room;
  }
  return {};
}

}  // namespace chl::console_bridge

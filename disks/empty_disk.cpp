#include "disks/empty_disk.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "common/syscall.hpp"
#include "disks/atomic_file.hpp"

namespace chl::disks {

namespace {

using common::fail;

common::Result<EmptyDisk> reuse_existing(const std::filesystem::path& path, const struct stat& st,
                                         std::uint64_t size) {
  if (!S_ISREG(st.st_mode)) {
    return fail(std::errc::invalid_argument,
                "'" + path.string() + "' exists and is not a regular file");
  }
  if (static_cast<std::uint64_t>(st.st_size) != size) {
    return fail(std::errc::file_exists,
                "'" + path.string() + "' exists with " + std::to_string(st.st_size) +
                    " bytes but " + std::to_string(size) + " were requested; leaving it untouched");
  }
  return EmptyDisk{path, size, false};
}

}  // namespace

common::Result<EmptyDisk> create_empty_disk(const std::filesystem::path& path,
                                            std::uint64_t bytes) {
  auto run = [&]() -> common::Result<EmptyDisk> {
    if (bytes == 0) return fail(std::errc::invalid_argument, "capacity is 0");
    if (bytes > static_cast<std::uint64_t>(INT64_MAX) - 511) {
      return fail(std::errc::invalid_argument,
                  "capacity " + std::to_string(bytes) + " is too large");
    }
    const std::uint64_t size = (bytes + 511) & ~std::uint64_t{511};
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) return reuse_existing(path, st, size);
    if (errno != ENOENT) return common::fail_errno("checking '" + path.string() + "'");

    auto file = AtomicFile::create(path);
    if (!file) return tl::unexpected(std::move(file.error()));
    if (common::retry_eintr([&] { return ::ftruncate(file->fd(), static_cast<off_t>(size)); }) !=
        0) {
      return common::fail_errno("setting the size of '" + path.string() + "' to " +
                                std::to_string(size) + " bytes");
    }
    if (auto r = file->commit(true); !r) {
      // Someone created it meanwhile: reuse it under the same rules.
      if (r.error().code == std::errc::file_exists && ::stat(path.c_str(), &st) == 0)
        return reuse_existing(path, st, size);
      return tl::unexpected(std::move(r.error()));
    }
    return EmptyDisk{path, size, true};
  };
  return common::wrap(run(), "empty disk '" + path.string() + "'");
}

}  // namespace chl::disks

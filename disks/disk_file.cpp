#include "disks/disk_file.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "common/unique_fd.hpp"
#include "disks/empty_disk.hpp"

namespace chl::disks {

namespace {

using common::fail;

}  // namespace

common::Result<DiskFile> check_disk_file(const DiskFileRequest& req) {
  DiskFile out;
  out.path = req.path;
  auto run = [&]() -> common::Result<DiskFile> {
    struct stat st {};
    if (::stat(out.path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) out.path /= "disk.img";
    if (::stat(out.path.c_str(), &st) != 0) {
      if (errno != ENOENT) return common::fail_errno("checking '" + out.path.string() + "'");
      if (!req.create_if_missing)
        return fail(std::errc::no_such_file_or_directory,
                    "'" + out.path.string() + "' does not exist");
      if (!req.capacity)
        return fail(
            std::errc::invalid_argument,
            "'" + out.path.string() + "' does not exist and no capacity was given to create it");
      CHL_TRY(EmptyDisk made, create_empty_disk(out.path, *req.capacity));
      out.created = made.created;
      if (::stat(out.path.c_str(), &st) != 0)
        return common::fail_errno("checking '" + out.path.string() + "'");
    }
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
      return fail(std::errc::invalid_argument,
                  "'" + out.path.string() + "' is not a regular file or block device");
    }
    out.block_device = S_ISBLK(st.st_mode);
    if (::access(out.path.c_str(), R_OK) != 0) {
      return common::fail_errno("'" + out.path.string() + "' is not readable by uid " +
                                std::to_string(::geteuid()));
    }
    if (!req.read_only && ::access(out.path.c_str(), W_OK) != 0) {
      return common::fail_errno("'" + out.path.string() + "' is not writable by uid " +
                                std::to_string(::geteuid()));
    }
    common::UniqueFd fd(::open(out.path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return common::fail_errno("opening '" + out.path.string() + "'");
    out.size = static_cast<std::uint64_t>(st.st_size);
    if (out.block_device && ::ioctl(fd.get(), BLKGETSIZE64, &out.size) != 0) {
      return common::fail_errno("size of block device '" + out.path.string() + "'");
    }
    if (req.capacity && out.size < *req.capacity) {
      return fail(std::errc::invalid_argument,
                  "'" + out.path.string() + "' is " + std::to_string(out.size) +
                      " bytes, smaller than the requested capacity of " +
                      std::to_string(*req.capacity) + " bytes");
    }
    CHL_TRY(out.format, common::wrap(detect_format_fd(fd.get()), "'" + out.path.string() + "'"));
    return out;
  };
  return common::wrap(run(), "disk file");
}

}  // namespace chl::disks

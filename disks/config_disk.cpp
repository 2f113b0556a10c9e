#include "disks/config_disk.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <set>
#include <utility>

#include "common/syscall.hpp"
#include "common/unique_fd.hpp"
#include "disks/cloud_init_iso9660.hpp"

namespace chl::disks {

namespace {

namespace fs = std::filesystem;
using common::fail;
using common::UniqueFd;

// Reads one config directory, every open confined to it.
class ConfigDirReader {
 public:
  ConfigDirReader(fs::path dir, const ConfigDirLimits& limits)
      : dir_(std::move(dir)), limits_(limits) {}

  common::Result<std::vector<MediaFile>> run() {
    root_ = UniqueFd(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root_) return common::fail_errno("opening the directory");
    struct stat st {};
    if (::fstat(root_.get(), &st) != 0) return common::fail_errno("stat of the directory");
    CHL_TRY_VOID(walk("", st, 0));
    std::sort(files_.begin(), files_.end(),
              [](const MediaFile& a, const MediaFile& b) { return a.path < b.path; });
    return std::move(files_);
  }

 private:
  // open() of `rel` (relative to the directory) that never resolves outside of it.
  common::Result<UniqueFd> open_beneath(const std::string& rel, std::uint64_t flags) {
    if (!no_openat2_) {
      open_how how{};
      how.flags = flags | O_CLOEXEC;
      how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
      const char* p = rel.empty() ? "." : rel.c_str();
      long fd = common::retry_eintr(
          [&] { return ::syscall(SYS_openat2, root_.get(), p, &how, sizeof how); });
      if (fd >= 0) return UniqueFd(static_cast<int>(fd));
      // ENOSYS: kernel before 5.6; EPERM: a seccomp profile that predates openat2.
      if (errno != ENOSYS && errno != EPERM) return refusal(rel, errno);
      no_openat2_ = true;
    }
    // Without openat2: resolve the whole path and check that it stays inside, then open the
    // resolved path without following a last symlink.
    std::error_code ec;
    const fs::path top = fs::canonical(dir_, ec);
    if (ec) return fail(ec, "resolving the directory");
    const fs::path real = fs::weakly_canonical(dir_ / rel, ec);
    if (ec) return fail(ec, "'" + rel + "'");
    const auto rs = real.string(), ts = top.string();
    if (rs != ts && rs.rfind(ts + "/", 0) != 0) return refusal(rel, EXDEV);
    UniqueFd fd(::open(rs.c_str(), static_cast<int>(flags) | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) return refusal(rel, errno);
    return fd;
  }

  tl::unexpected<common::Error> refusal(const std::string& rel, int err) {
    if (err == EXDEV) {
      std::string target;
      char buf[4096];
      ssize_t n = ::readlinkat(root_.get(), rel.c_str(), buf, sizeof buf - 1);
      if (n >= 0) target = " (-> '" + std::string(buf, static_cast<std::size_t>(n)) + "')";
      return fail(std::errc::permission_denied,
                  "'" + rel + "'" + target +
                      " is a symlink leading outside the directory: refused (only symlinks that "
                      "stay inside are followed)");
    }
    if (err == ELOOP) {
      return fail(std::errc::too_many_symbolic_link_levels,
                  "'" + rel + "': too many levels of symlinks (a symlink loop?)");
    }
    errno = err;
    return common::fail_errno("opening '" + rel + "'");
  }

  common::Status walk(const std::string& rel_dir, const struct stat& dir_st, unsigned depth) {
    if (depth > limits_.max_depth) {
      return fail(std::errc::invalid_argument, "'" + rel_dir + "': more than " +
                                                   std::to_string(limits_.max_depth) +
                                                   " directory levels");
    }
    const auto key = std::make_pair(dir_st.st_dev, dir_st.st_ino);
    if (!on_path_.insert(key).second) {
      return fail(std::errc::too_many_symbolic_link_levels,
                  "'" + rel_dir + "' is a symlink to one of its own parent directories (a loop)");
    }
    CHL_TRY(std::vector<std::string> names, list(rel_dir));
    for (const auto& name : names) {
      const std::string rel = rel_dir.empty() ? name : rel_dir + "/" + name;
      CHL_TRY(UniqueFd pfd, open_beneath(rel, O_PATH));
      struct stat st {};
      if (::fstat(pfd.get(), &st) != 0) return common::fail_errno("stat of '" + rel + "'");
      if (S_ISDIR(st.st_mode)) {
        CHL_TRY_VOID(walk(rel, st, depth + 1));
      } else if (S_ISREG(st.st_mode)) {
        CHL_TRY_VOID(read_file(rel, st));
      } else {
        return fail(std::errc::invalid_argument,
                    "'" + rel + "' is not a regular file or directory (" + kind(st.st_mode) +
                        "): refused");
      }
    }
    on_path_.erase(key);
    return {};
  }

  static std::string kind(mode_t m) {
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    return "unknown type";
  }

  common::Result<std::vector<std::string>> list(const std::string& rel_dir) {
    CHL_TRY(UniqueFd fd, open_beneath(rel_dir, O_RDONLY | O_DIRECTORY));
    DIR* d = ::fdopendir(fd.get());
    if (!d) return common::fail_errno("listing '" + (rel_dir.empty() ? "." : rel_dir) + "'");
    (void)fd.release();  // owned by `d` now
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      // ".", ".." and Kubernetes' atomic-writer internals ("..data", "..2024_..."): keys and
      // item paths may not start with "..", so nothing of the volume's content is skipped.
      if (n.rfind("..", 0) == 0 || n == ".") continue;
      names.push_back(std::move(n));
      errno = 0;
    }
    const int err = errno;
    ::closedir(d);
    if (err != 0) {
      errno = err;
      return common::fail_errno("listing '" + (rel_dir.empty() ? "." : rel_dir) + "'");
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  common::Status read_file(const std::string& rel, const struct stat& path_st) {
    if (files_.size() >= limits_.max_files) {
      return fail(std::errc::file_too_large,
                  "more than " + std::to_string(limits_.max_files) + " files");
    }
    // O_NONBLOCK: should the name be swapped for a FIFO meanwhile, the open does not hang.
    CHL_TRY(UniqueFd fd, open_beneath(rel, O_RDONLY | O_NONBLOCK));
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return common::fail_errno("stat of '" + rel + "'");
    if (st.st_dev != path_st.st_dev || st.st_ino != path_st.st_ino || !S_ISREG(st.st_mode)) {
      return fail(std::errc::resource_unavailable_try_again,
                  "'" + rel + "' changed while it was being read");
    }
    const std::uint64_t room = limits_.max_total_bytes - total_;
    MediaFile f;
    f.path = rel;
    f.mode = st.st_mode & 0777;
    char buf[65536];
    for (;;) {
      ssize_t n = common::retry_eintr([&] { return ::read(fd.get(), buf, sizeof buf); });
      if (n < 0) return common::fail_errno("reading '" + rel + "'");
      if (n == 0) break;
      if (f.data.size() + static_cast<std::size_t>(n) > room) {
        return fail(std::errc::file_too_large,
                    "the files are larger than the limit of " +
                        std::to_string(limits_.max_total_bytes) + " bytes (at '" + rel + "')");
      }
      f.data.append(buf, static_cast<std::size_t>(n));
    }
    total_ += f.data.size();
    files_.push_back(std::move(f));
    return {};
  }

  fs::path dir_;
  ConfigDirLimits limits_;
  UniqueFd root_;
  bool no_openat2_ = false;
  std::set<std::pair<dev_t, ino_t>> on_path_;
  std::vector<MediaFile> files_;
  std::uint64_t total_ = 0;
};

}  // namespace

common::Result<std::vector<MediaFile>> read_config_dir(const std::filesystem::path& dir,
                                                       const ConfigDirLimits& limits) {
  return common::wrap(ConfigDirReader(dir, limits).run(),
                      "config volume directory '" + dir.string() + "'");
}

common::Result<ConfigDisk> write_config_disk(const ConfigDiskRequest& req) {
  auto run = [&]() -> common::Result<ConfigDisk> {
    CHL_TRY(std::vector<MediaFile> files, read_config_dir(req.source_dir, req.limits));
    Iso9660Options o;
    o.volume_id = req.volume_label.empty() ? kConfigDiskDefaultLabel : req.volume_label;
    o.mtime = req.mtime >= 0 ? req.mtime : static_cast<std::int64_t>(std::time(nullptr));
    CHL_TRY(ImagePlan plan, plan_iso9660(files, o));
    ConfigDisk out;
    out.files = files.size();
    for (const auto& f : files) out.data_bytes += f.data.size();
    out.image_bytes = plan.size;
    ImageWriteOptions w;
    w.durable = false;  // regenerated from the volume at every start
    w.mode = 0600;      // may hold a secret
    CHL_TRY_VOID(write_image_file(req.target, plan, w));
    return out;
  };
  return common::wrap(run(), "writing config disk '" + req.target.string() + "'");
}

}  // namespace chl::disks

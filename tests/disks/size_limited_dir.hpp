#pragma once
// A size-limited directory for disk-full tests: a tmpfs of a given size mounted on a fresh
// directory in a private mount namespace of this test process (unshare(CLONE_NEWNS), then "/"
// made recursively private), so the host never sees the mount and it goes away with the
// process at the latest. Children (the launcher under test) inherit the namespace and see it.
// Needs root (CAP_SYS_ADMIN) and a process without threads yet (unshare refuses CLONE_NEWNS in
// a threaded process); otherwise why() says what failed and the caller skips.
// Kind::Ext4: an ext4 filesystem (4 KiB blocks, no journal) made by mkfs.ext4 in a file beside
// the directory and mounted with `mount -o loop` (needs mkfs.ext4 and a free loop device; its
// lost+found is removed, so the directory starts empty): where conversions preallocate.
#include <sched.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "tests/support/test_support.hpp"

namespace chl::test {

class SizeLimitedDir {
 public:
  enum class Kind { Tmpfs, Ext4 };
  // Mount a filesystem of `bytes` on `dir` (created if missing; must be empty).
  SizeLimitedDir(const std::filesystem::path& dir, std::uint64_t bytes, Kind kind = Kind::Tmpfs)
      : dir_(dir) {
    if (!private_namespace(&why_)) return;
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) {
      why_ = "creating " + dir_.string() + ": " + ec.message();
      return;
    }
    if (kind == Kind::Ext4) {
      mount_ext4(bytes);
      return;
    }
    const std::string opts = "size=" + std::to_string(bytes) + ",mode=0700";
    if (::mount("tmpfs", dir_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
      why_ = "mounting a " + std::to_string(bytes) + "-byte tmpfs on " + dir_.string() + ": " +
             std::strerror(errno);
      return;
    }
    mounted_ = true;
  }
  ~SizeLimitedDir() {
    if (mounted_) (void)::umount2(dir_.c_str(), MNT_DETACH);  // the loop device auto-clears
    std::error_code ec;
    if (!image_.empty()) std::filesystem::remove(image_, ec);
  }
  SizeLimitedDir(const SizeLimitedDir&) = delete;
  SizeLimitedDir& operator=(const SizeLimitedDir&) = delete;

  [[nodiscard]] bool ok() const { return mounted_; }
  [[nodiscard]] const std::string& why() const { return why_; }
  [[nodiscard]] const std::filesystem::path& path() const { return dir_; }

 private:
  void mount_ext4(std::uint64_t bytes) {
    image_ = dir_.string() + ".ext4";
    auto mkfs = run_command({"mkfs.ext4", "-q", "-F", "-b", "4096", "-O", "^has_journal",
                             image_.string(), std::to_string(bytes / 1024) + "k"});
    if (mkfs.exit_code != 0) {
      why_ = "mkfs.ext4 of " + std::to_string(bytes) + " bytes: " + mkfs.output;
      return;
    }
    auto mnt = run_command({"mount", "-o", "loop", image_.string(), dir_.string()});
    if (mnt.exit_code != 0) {
      why_ = "mount -o loop of an ext4 image: " + mnt.output;
      return;
    }
    mounted_ = true;
    std::error_code ec;
    std::filesystem::remove(dir_ / "lost+found", ec);
  }

  // Once per process: our own mount namespace, with nothing propagating back to the host.
  static bool private_namespace(std::string* why) {
    static std::string failure = [] {
      if (::unshare(CLONE_NEWNS) != 0)
        return std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno) +
               " (needs root, and no threads yet)";
      if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
        return std::string("making / private in the new mount namespace: ") + std::strerror(errno);
      return std::string();
    }();
    *why = failure;
    return failure.empty();
  }

  std::filesystem::path dir_;
  std::filesystem::path image_;  // Kind::Ext4: the filesystem's backing file
  std::string why_;
  bool mounted_ = false;
};

}  // namespace chl::test

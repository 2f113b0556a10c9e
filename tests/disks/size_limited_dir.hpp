#pragma once
// A size-limited directory for disk-full tests: a tmpfs of a given size mounted on a fresh
// directory in a private mount namespace of this test process (unshare(CLONE_NEWNS), then "/"
// made recursively private), so the host never sees the mount and it goes away with the
// process at the latest. Children (the launcher under test) inherit the namespace and see it.
// Needs root (CAP_SYS_ADMIN) and a process without threads yet (unshare refuses CLONE_NEWNS in
// a threaded process); otherwise why() says what failed and the caller skips.
#include <sched.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

namespace chl::test {

class SizeLimitedDir {
 public:
  // Mount a tmpfs of `bytes` on `dir` (created if missing; must be empty).
  SizeLimitedDir(const std::filesystem::path& dir, std::uint64_t bytes) : dir_(dir) {
    if (!private_namespace(&why_)) return;
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) {
      why_ = "creating " + dir_.string() + ": " + ec.message();
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
    if (mounted_) (void)::umount2(dir_.c_str(), MNT_DETACH);
  }
  SizeLimitedDir(const SizeLimitedDir&) = delete;
  SizeLimitedDir& operator=(const SizeLimitedDir&) = delete;

  [[nodiscard]] bool ok() const { return mounted_; }
  [[nodiscard]] const std::string& why() const { return why_; }
  [[nodiscard]] const std::filesystem::path& path() const { return dir_; }

 private:
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
  std::string why_;
  bool mounted_ = false;
};

}  // namespace chl::test

#include "firmware/confined_path.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>

#include "common/syscall.hpp"
#include "common/unique_fd.hpp"

namespace chl::firmware {

using common::fail;
using common::fail_errno;
using common::Result;
using common::UniqueFd;

namespace {

Result<std::filesystem::path> real_path(const std::filesystem::path& p, const std::string& what) {
  char buf[PATH_MAX];
  if (!::realpath(p.c_str(), buf)) return fail_errno(what);
  return std::filesystem::path(buf);
}

bool is_beneath(const std::filesystem::path& child, const std::filesystem::path& root) {
  const std::string c = child.string(), r = root.string();
  if (r == "/") return true;
  return c.size() > r.size() && c.compare(0, r.size(), r) == 0 && c[r.size()] == '/';
}

}  // namespace

Result<std::filesystem::path> resolve_confined(const std::filesystem::path& dir,
                                               std::string_view rel_in) {
  const std::string what = "'" + std::string(rel_in) + "' in '" + dir.string() + "'";
  if (rel_in.empty())
    return fail(std::errc::invalid_argument, "empty path in '" + dir.string() + "'");
  std::string_view rel = rel_in;
  while (!rel.empty() && rel.front() == '/') rel.remove_prefix(1);
  if (rel.empty())
    return fail(std::errc::invalid_argument, what + ": names the directory itself, not a file");
  for (std::size_t start = 0; start <= rel.size();) {
    auto slash = rel.find('/', start);
    if (slash == std::string_view::npos) slash = rel.size();
    if (rel.substr(start, slash - start) == "..")
      return fail(std::errc::permission_denied,
                  what + ": '..' is not allowed (the path must stay inside the directory)");
    start = slash + 1;
  }
  CHL_TRY(auto root, real_path(dir, "kernel-boot directory '" + dir.string() + "'"));

  UniqueFd dirfd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dirfd) return fail_errno("opening directory '" + dir.string() + "'");
  open_how how{};
  how.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  const std::string relstr(rel);
  long fd = common::retry_eintr(
      [&] { return ::syscall(SYS_openat2, dirfd.get(), relstr.c_str(), &how, sizeof how); });
  std::filesystem::path resolved;
  if (fd >= 0) {
    UniqueFd file(static_cast<int>(fd));
    struct stat st {};
    if (::fstat(file.get(), &st) != 0) return fail_errno(what);
    if (!S_ISREG(st.st_mode))
      return fail(std::errc::invalid_argument, what + " is not a regular file");
    CHL_TRY(resolved, real_path("/proc/self/fd/" + std::to_string(file.get()), what));
  } else if (errno == EXDEV) {
    return fail(std::errc::permission_denied,
                what + ": resolves outside the directory (a symlink points out)");
  } else if (errno == ELOOP) {
    return fail(std::errc::too_many_symbolic_link_levels,
                what + ": symlink loop or a /proc magic link");
  } else if (errno == ENOSYS) {
    // Old kernel: canonicalise and compare. (A race with a concurrent rename is possible here.)
    CHL_TRY(resolved, real_path(root / relstr, what));
    struct stat st {};
    if (::stat(resolved.c_str(), &st) != 0) return fail_errno(what);
    if (!S_ISREG(st.st_mode))
      return fail(std::errc::invalid_argument, what + " is not a regular file");
  } else {
    return fail_errno(what);
  }
  // Belt and braces: the canonical path must be beneath the canonical directory.
  if (!is_beneath(resolved, root))
    return fail(std::errc::permission_denied,
                what + ": resolves to '" + resolved.string() + "', outside the directory");
  return resolved;
}

}  // namespace chl::firmware

#include "common/module_loader.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <system_error>

#include "common/log.hpp"

namespace chl::common {
namespace fs = std::filesystem;
using common::fail;
using common::Result;

common::Result<SharedLibrary> SharedLibrary::open(const fs::path& path) {
  ::dlerror();  // clear a stale message
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* why = ::dlerror();
    return fail(std::errc::executable_format_error, why ? why : "dlopen " + path.string() + " failed");
  }
  return SharedLibrary(h, path);
}

SharedLibrary::SharedLibrary(SharedLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), path_(std::move(other.path_)) {}

SharedLibrary& SharedLibrary::operator=(SharedLibrary&& other) noexcept {
  if (this != &other) {
    close();
    handle_ = std::exchange(other.handle_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

SharedLibrary::~SharedLibrary() { close(); }

void SharedLibrary::close() {
  if (!handle_) return;
  if (::dlclose(handle_) != 0) {
    const char* why = ::dlerror();
    CHL_LOG_WARN("unloading {}: {}", path_.string(), why ? why : "dlclose failed");
  }
  handle_ = nullptr;
}

common::Result<const void*> SharedLibrary::symbol(const char* name) const {
  ::dlerror();
  void* p = ::dlsym(handle_, name);
  if (const char* why = ::dlerror()) return fail(std::errc::executable_format_error, why);
  if (!p) return fail(std::errc::executable_format_error, std::string(name) + " is null in " + path_.string());
  return static_cast<const void*>(p);
}

std::optional<fs::path> own_directory() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return std::nullopt;
  return exe.parent_path();
}

std::vector<fs::path> module_candidates(const char* file, const char* env) {
  if (const char* e = std::getenv(env); e && *e) {
    fs::path p(e);
    std::error_code ec;
    if (fs::is_directory(p, ec)) p /= file;
    return {p};
  }
  auto own = own_directory();
  if (!own) return {};
  const fs::path& dir = *own;
  return {dir / file, (dir / ".." / "lib" / "ch-launcher" / file).lexically_normal()};
}

common::Result<FoundModule> find_module(const char* file, const char* env, const char* symbol, const std::string& what) {
  const bool from_env = std::getenv(env) && *std::getenv(env);
  auto candidates = module_candidates(file, env);
  for (const auto& path : candidates) {
    std::error_code ec;
    if (!fs::exists(path, ec)) continue;
    auto lib = SharedLibrary::open(path);
    if (!lib) return tl::unexpected(lib.error().wrap(what + " is broken: loading " + path.string()));
    auto sym = lib->symbol(symbol);
    if (!sym) return tl::unexpected(sym.error().wrap(what + " is broken: " + path.string()));
    return FoundModule{std::move(*lib), path, *sym};
  }
  std::string where;
  for (const auto& p : candidates) where += (where.empty() ? "" : ", ") + p.parent_path().string() + "/";
  if (where.empty()) where = "(the launcher's own directory is unknown: /proc/self/exe unreadable)";
  if (from_env)
    return fail(std::errc::no_such_file_or_directory,
                what + " is not installed: " + file + " not found at " + candidates.front().string() + " (" + env +
                    "); point " + env + " at the module or unset it to use the one installed with ch-launcher");
  return fail(std::errc::no_such_file_or_directory,
              what + " is not installed: " + file + " not found in " + where +
                  "; install it next to ch-launcher or in <prefix>/lib/ch-launcher/, or set " + env + " to its path");
}

std::string module_from_other_build(const std::string& what, const fs::path& path, const std::string& theirs,
                                    const std::string& ours) {
  return what + " is broken: " + path.string() + " comes from another ch-launcher build (" + theirs +
         "; this launcher: " + ours + "): install the module built with it";
}

}  // namespace chl::common

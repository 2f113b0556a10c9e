#include "ch_launcher/driver_module.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <system_error>

#include "common/log.hpp"

namespace chl::core {
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

std::vector<fs::path> libvirt_module_candidates() {
  if (const char* env = std::getenv("CHL_LIBVIRT_MODULE"); env && *env) {
    fs::path p(env);
    std::error_code ec;
    if (fs::is_directory(p, ec)) p /= kLibvirtModuleFile;
    return {p};
  }
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  fs::path dir = exe.parent_path();
  return {dir / kLibvirtModuleFile, (dir / ".." / "lib" / "ch-launcher" / kLibvirtModuleFile).lexically_normal()};
}

common::Result<LibvirtModule> load_libvirt_module() {
  const bool from_env = std::getenv("CHL_LIBVIRT_MODULE") && *std::getenv("CHL_LIBVIRT_MODULE");
  auto candidates = libvirt_module_candidates();
  for (const auto& path : candidates) {
    std::error_code ec;
    if (!fs::exists(path, ec)) continue;
    auto lib = SharedLibrary::open(path);
    if (!lib) return tl::unexpected(lib.error().wrap("qemu-kvm support is broken: loading " + path.string()));
    auto sym = lib->symbol(kLibvirtModuleSymbol);
    if (!sym) return tl::unexpected(sym.error().wrap("qemu-kvm support is broken: " + path.string()));
    const auto* api = static_cast<const LibvirtModuleApi*>(*sym);
    if (api->abi != kLibvirtModuleAbi || api->options_size != sizeof(LibvirtDriverOptions) || !api->create_driver)
      return fail(std::errc::executable_format_error,
                  "qemu-kvm support is broken: " + path.string() + " comes from another ch-launcher build (module ABI " +
                      std::to_string(api->abi) + ", options size " + std::to_string(api->options_size) +
                      "; this launcher: " + std::to_string(kLibvirtModuleAbi) + ", " +
                      std::to_string(sizeof(LibvirtDriverOptions)) + "): install the module built with it");
    CHL_LOG_DEBUG("qemu-kvm support: loaded {}", path.string());
    return LibvirtModule{std::move(*lib), api};
  }
  std::string where;
  for (const auto& p : candidates) where += (where.empty() ? "" : ", ") + p.parent_path().string() + "/";
  if (where.empty()) where = "(the launcher's own directory is unknown: /proc/self/exe unreadable)";
  if (from_env)
    return fail(std::errc::no_such_file_or_directory,
                std::string("qemu-kvm support is not installed: ") + kLibvirtModuleFile + " not found at " +
                    candidates.front().string() + " (CHL_LIBVIRT_MODULE); point CHL_LIBVIRT_MODULE at the module "
                    "or unset it to use the one installed with ch-launcher");
  return fail(std::errc::no_such_file_or_directory,
              std::string("qemu-kvm support is not installed: ") + kLibvirtModuleFile + " not found in " + where +
                  "; install it next to ch-launcher or in <prefix>/lib/ch-launcher/, or set CHL_LIBVIRT_MODULE "
                  "to its path");
}

}  // namespace chl::core

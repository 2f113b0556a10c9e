#pragma once
// Loading the launcher's modules with dlopen, below both of them: the QEMU/KVM path,
// libchl-libvirt.so (drivers/libvirt/module_loader.hpp), loaded only for a VMI that asks for
// qemu-kvm, and pod networking, libchl-network.so (network/module_loader.hpp), loaded only for a
// VMI with interfaces to wire. This file knows neither contract: it finds, opens and checks.
//
// The module is opened RTLD_NOW | RTLD_LOCAL: every symbol it needs (libvirt's, and the
// launcher's own, which the executable exports) is bound at load, so a module that does not fit
// fails here with dlerror()'s text instead of in the middle of a launch, and nothing of it leaks
// into the global symbol scope.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace chl::common {

// A dlopen handle, closed (dlclose) by the destructor. Everything from the library (objects
// whose code lives there, handlers it posted to an io_context) must be gone by then.
class SharedLibrary {
 public:
  static common::Result<SharedLibrary> open(const std::filesystem::path& path);
  SharedLibrary(SharedLibrary&& other) noexcept;
  SharedLibrary& operator=(SharedLibrary&& other) noexcept;
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;
  ~SharedLibrary();

  // The address of `name` in the library.
  [[nodiscard]] common::Result<const void*> symbol(const char* name) const;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  SharedLibrary(void* handle, std::filesystem::path path) : handle_(handle), path_(std::move(path)) {}
  void close();
  void* handle_ = nullptr;
  std::filesystem::path path_;
};

// The directory of the running executable (/proc/self/exe, symlinks resolved: virt-launcher-monitor
// -> ch-launcher gives ch-launcher's); nullopt when /proc/self/exe cannot be read. What is
// installed with the launcher (its modules, and in the bundle Cloud Hypervisor and its firmware,
// docs/deploy.md) is looked up relative to it.
std::optional<std::filesystem::path> own_directory();

// Where a module `file` is looked for, in order: $`env` alone when it is set (a file, or a
// directory holding the module); else the directory of the running executable
// (/proc/self/exe; the build tree and a flat install), then ../lib/ch-launcher/ relative to it
// (an install under a prefix: <prefix>/bin/ch-launcher, <prefix>/lib/ch-launcher/).
std::vector<std::filesystem::path> module_candidates(const char* file, const char* env);
// The first of module_candidates(file, env) that exists, opened, and the address of `symbol`
// in it. `what` names the feature in errors ("qemu-kvm support is not installed: … not found in
// …", or dlopen's own text for a module that is there but cannot be loaded).
struct FoundModule {
  SharedLibrary library;
  std::filesystem::path path;
  const void* api = nullptr;
};
common::Result<FoundModule> find_module(const char* file, const char* env, const char* symbol,
                                      const std::string& what);

// The error for a module whose ABI or type sizes are not this build's: "<what> is broken: <path>
// comes from another ch-launcher build (<theirs>; this launcher: <ours>): …".
std::string module_from_other_build(const std::string& what, const std::filesystem::path& path,
                                    const std::string& theirs, const std::string& ours);

}  // namespace chl::common

#pragma once
// Loading the launcher's modules with dlopen: the QEMU/KVM path, libchl-libvirt.so
// (libvirt_module.hpp), loaded by run_launcher only for a VMI that asks for qemu-kvm, and pod
// networking, libchl-network.so (network/network_module.hpp), loaded only for a VMI with
// interfaces to wire (run, `network plan|up`).
//
// The module is opened RTLD_NOW | RTLD_LOCAL: every symbol it needs (libvirt's, and the
// launcher's own, which the executable exports) is bound at load, so a module that does not fit
// fails here with dlerror()'s text instead of in the middle of a launch, and nothing of it leaks
// into the global symbol scope.
#include <filesystem>
#include <string>
#include <vector>

#include "ch_launcher/libvirt_module.hpp"
#include "common/error.hpp"
#include "network/network_module.hpp"

namespace chl::core {

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

// Where a module `file` is looked for, in order: $`env` alone when it is set (a file, or a
// directory holding the module); else the directory of the running executable
// (/proc/self/exe; the build tree and a flat install), then ../lib/ch-launcher/ relative to it
// (an install under a prefix: <prefix>/bin/ch-launcher, <prefix>/lib/ch-launcher/).
std::vector<std::filesystem::path> module_candidates(const char* file, const char* env);
// libchl-libvirt.so, $CHL_LIBVIRT_MODULE.
std::vector<std::filesystem::path> libvirt_module_candidates();

struct LibvirtModule {
  SharedLibrary library;
  const LibvirtModuleApi* api = nullptr;  // inside `library`: valid while it is loaded
};

// Load the first candidate that exists and check that it is from this build (ABI). The error
// says what to do: "qemu-kvm support is not installed: libchl-libvirt.so not found in …",
// or dlopen's own text for a module that is there but cannot be loaded.
common::Result<LibvirtModule> load_libvirt_module();

struct NetworkModule {
  SharedLibrary library;
  const network::NetworkModuleApi* api = nullptr;  // inside `library`: valid while it is loaded
};

// The same for libchl-network.so ($CHL_NETWORK_MODULE): "pod networking support is not
// installed: libchl-network.so not found in …", "pod networking support is broken: …".
common::Result<NetworkModule> load_network_module();

}  // namespace chl::core

#pragma once
// Shared by the tests of the launcher's dlopen'ed modules (test_qemu_module.cpp for
// libchl-libvirt.so, test_launcher_network_module.cpp for libchl-network.so): where a module
// is built, `ldd` of a file, and an environment variable set for one test.
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include <doctest/doctest.h>

#include "tests/support/test_support.hpp"

namespace chl::test {

// Sets an environment variable for the test (the launcher inherits the test's environment) and
// restores the old value.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(std::string n, const std::string& value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

// The module `file` as built beside ch-launcher.
inline std::filesystem::path built_module(const std::string& file) {
  return std::filesystem::path(launcher_binary()).parent_path() / file;
}

// `ldd FILE` output, or nullopt (with a skip) when ldd is missing.
inline std::optional<std::string> ldd(const std::filesystem::path& file) {
  if (!tool("ldd")) {
    skip("ldd not installed");
    return std::nullopt;
  }
  auto r = run_command({"ldd", file.string()});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return r.output;
}

}  // namespace chl::test

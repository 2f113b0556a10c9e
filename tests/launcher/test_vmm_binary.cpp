// launcher/vmm_binary: which Cloud Hypervisor a launch runs. --vmm-binary when given; else the one
// installed beside the launcher (the bundle's bin/cloud-hypervisor, docs/deploy.md), then PATH.
#include "launcher/vmm_binary.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cstdlib>

#include "common/module_loader.hpp"
#include "tests/support/test_support.hpp"

namespace {

namespace fs = std::filesystem;
using chl::launcher::cloud_hypervisor_binary;
using chl::test::TempDir;

void executable(const fs::path& p, const std::string& text = "#!/bin/sh\nexit 0\n") {
  chl::test::write_file(p, text);
  REQUIRE(::chmod(p.c_str(), 0755) == 0);
}

// PATH set to `value` for the scope.
struct PathScope {
  std::string saved;
  bool had = false;
  explicit PathScope(const std::string& value) {
    if (const char* p = std::getenv("PATH")) {
      saved = p;
      had = true;
    }
    ::setenv("PATH", value.c_str(), 1);
  }
  ~PathScope() {
    if (had) ::setenv("PATH", saved.c_str(), 1);
    else ::unsetenv("PATH");
  }
};

}  // namespace

TEST_CASE("the VMM binary: --vmm-binary first, then cloud-hypervisor beside the launcher, then PATH") {
  TempDir own("chl-vmmbin-own"), on_path("chl-vmmbin-path");
  PathScope path(on_path.path().string());

  SUBCASE("nothing anywhere: none") { CHECK_FALSE(cloud_hypervisor_binary("", own.path())); }
  SUBCASE("only in PATH: PATH's") {
    executable(on_path.path() / "cloud-hypervisor");
    CHECK(cloud_hypervisor_binary("", own.path()) == (on_path.path() / "cloud-hypervisor").string());
    CHECK(cloud_hypervisor_binary("", std::nullopt) == (on_path.path() / "cloud-hypervisor").string());
  }
  SUBCASE("beside the launcher and in PATH: the one beside it (the bundle's own VMM wins over the image's)") {
    executable(on_path.path() / "cloud-hypervisor");
    executable(own.path() / "cloud-hypervisor");
    CHECK(cloud_hypervisor_binary("", own.path()) == (own.path() / "cloud-hypervisor").string());
  }
  SUBCASE("beside the launcher but not executable: skipped, PATH's") {
    executable(on_path.path() / "cloud-hypervisor");
    chl::test::write_file(own.path() / "cloud-hypervisor", "not a program");
    CHECK(cloud_hypervisor_binary("", own.path()) == (on_path.path() / "cloud-hypervisor").string());
  }
  SUBCASE("--vmm-binary given: that one or none, never a fallback") {
    executable(own.path() / "cloud-hypervisor");
    executable(on_path.path() / "my-ch");
    CHECK(cloud_hypervisor_binary("my-ch", own.path()) == (on_path.path() / "my-ch").string());
    CHECK_FALSE(cloud_hypervisor_binary((on_path.path() / "missing").string(), own.path()));
  }
}

TEST_CASE("the launcher's own directory is its executable's (/proc/self/exe)") {
  auto own = chl::common::own_directory();
  REQUIRE(own);
  CHECK(fs::equivalent(*own, fs::read_symlink("/proc/self/exe").parent_path()));
}

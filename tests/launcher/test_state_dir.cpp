// StateDir: one launcher per directory (its lock), and the recovery of what a launcher killed
// mid-way left: half-written disk files under their hidden temporary names.
#include <doctest/doctest.h>

#include <filesystem>

#include "launcher/state_dir.hpp"
#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using chl::launcher::StateDir;

TEST_CASE("state directory: a second open is refused while the first holds the lock") {
  chl::test::TempDir tmp("chl-state");
  const auto dir = tmp.path() / "vm";
  CHECK_FALSE(chl::launcher::state_dir_in_use(dir));
  {
    auto first = StateDir::open(dir, "uid-1");
    REQUIRE_MESSAGE(first, first.error().message());
    CHECK(chl::launcher::state_dir_in_use(dir));
    auto second = StateDir::open(dir, "uid-1");
    REQUIRE_FALSE(second);
    CHECK(second.error().message().find("another launcher is already running for this VMI") !=
          std::string::npos);
  }
  CHECK_FALSE(chl::launcher::state_dir_in_use(dir));  // the lock went with the first
  CHECK(StateDir::open(dir, "uid-1"));
}

TEST_CASE("state directory: recovery removes the half-written temporaries a killed launcher left") {
  chl::test::TempDir tmp("chl-state");
  const auto dir = tmp.path() / "vm";
  fs::create_directories(dir / "container-disks");
  chl::test::write_file(dir / "container-disks" / ".containerdisk-root.raw.tmp-Q1w2E3", "half");
  chl::test::write_file(dir / ".cloudinit-nocloud.iso.tmp-a1B2c3", "half");
  chl::test::write_file(dir / "container-disks" / "containerdisk-data.raw", "finished");
  chl::test::write_file(dir / "vmi.uid", "uid-1");
  auto sd = StateDir::open(dir, "uid-1");
  REQUIRE_MESSAGE(sd, sd.error().message());
  CHECK(sd->recovery().removed_temporaries == 2);
  CHECK(sd->recovery().stale);
  CHECK_FALSE(fs::exists(dir / "container-disks" / ".containerdisk-root.raw.tmp-Q1w2E3"));
  CHECK_FALSE(fs::exists(dir / ".cloudinit-nocloud.iso.tmp-a1B2c3"));
  CHECK(chl::test::read_file(dir / "container-disks" / "containerdisk-data.raw") == "finished");
}

TEST_CASE("state directory: an existing ancestor may be a symbolic link (Debian's /var/run -> /run), the directory itself may not") {
  chl::test::TempDir tmp("chl-state");
  fs::create_directory(tmp.path() / "run");
  fs::create_directory_symlink("run", tmp.path() / "var-run");
  {
    auto st = StateDir::open(tmp.path() / "var-run" / "ephemeral" / "ch-launcher", "uid-1");
    REQUIRE_MESSAGE(st, st.error().message());
    CHECK(fs::is_directory(tmp.path() / "run" / "ephemeral" / "ch-launcher"));
  }
  fs::create_directory(tmp.path() / "elsewhere");
  fs::create_directory_symlink(tmp.path() / "elsewhere", tmp.path() / "run" / "linked");
  auto st = StateDir::open(tmp.path() / "var-run" / "linked", "uid-1");
  REQUIRE_FALSE(st);
  CHECK_MESSAGE(st.error().message().find("linked exists and is not a directory") != std::string::npos,
                st.error().message());
  CHECK(fs::is_empty(tmp.path() / "elsewhere"));
}

// Config volumes (configMap, secret, serviceAccount, downwardAPI) as ISO 9660 disks, read from
// a directory laid out the way the kubelet mounts them (atomic writer: `key -> ..data/key`,
// `..data -> ..<timestamp>`), checked by blkid, isovfy, isoinfo and xorriso; symlinks leading
// out of the directory are refused.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "disks/config_disk.hpp"
#include "tests/disks/image_tools.hpp"
#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using chl::test::read_file;
using chl::test::run_command;
using chl::test::skip;
using chl::test::TempDir;
using chl::test::tool;
using chl::test::write_file;
namespace d = chl::disks;

namespace {

// The kubelet's layout for keys `a.conf`, `b.bin` and an item path `sub/c.txt`.
fs::path kubelet_volume(const fs::path& root, const std::string& binary) {
  const fs::path vol = root / "vol";
  const fs::path ts = vol / "..2026_11_22_15_00_00.123456789";
  fs::create_directories(ts / "sub");
  write_file(ts / "a.conf", "key=value\n");
  write_file(ts / "b.bin", binary);
  write_file(ts / "sub" / "c.txt", "nested\n");
  ::chmod((ts / "a.conf").c_str(), 0640);
  ::chmod((ts / "b.bin").c_str(), 0400);
  fs::create_directory_symlink("..2026_11_22_15_00_00.123456789", vol / "..data");
  fs::create_symlink("..data/a.conf", vol / "a.conf");
  fs::create_symlink("..data/b.bin", vol / "b.bin");
  fs::create_directory_symlink("..data/sub", vol / "sub");
  return vol;
}

using chl::test::blkid;
using chl::test::iso_extract;

std::string binary_data() {
  std::string s;
  for (int i = 0; i < 70000; ++i) s.push_back(static_cast<char>((i * 131) ^ (i >> 3)));
  return s;
}

}  // namespace

TEST_CASE("config disk: the kubelet's ..data layout becomes an ISO with exactly the keys") {
  for (const char* t : {"blkid", "isoinfo", "xorriso"}) {
    if (!tool(t)) {
      skip(std::string("needs ") + t);
      return;
    }
  }
  TempDir tmp("chlcfg");
  const std::string bin = binary_data();
  const fs::path vol = kubelet_volume(tmp.path(), bin);
  const fs::path img = tmp / "cfg.iso";

  auto files = d::read_config_dir(vol);
  REQUIRE_MESSAGE(files, (files ? "" : files.error().message()));
  REQUIRE(files->size() == 3);
  CHECK((*files)[0].path == "a.conf");
  CHECK((*files)[0].mode == 0640);
  CHECK((*files)[1].path == "b.bin");
  CHECK((*files)[1].mode == 0400);
  CHECK((*files)[2].path == "sub/c.txt");

  auto disk = d::write_config_disk({vol, img, "", {}});
  REQUIRE_MESSAGE(disk, (disk ? "" : disk.error().message()));
  CHECK(disk->files == 3);
  CHECK(disk->data_bytes == 10 + bin.size() + 7);
  CHECK((fs::status(img).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write));

  CHECK(blkid(img, "LABEL") == "cfgdata");  // KubeVirt's volume id when volumeLabel is unset
  CHECK(blkid(img, "TYPE") == "iso9660");
  if (auto isovfy = tool("isovfy")) {
    auto r = run_command({*isovfy, "-i", img.string()});
    INFO(r.output);
    CHECK(r.output.find("No errors found") != std::string::npos);
  }
  // Exactly the keys: no ..data, no timestamped directory.
  auto find = run_command({*tool("xorriso"), "-indev", img.string(), "-find", "/", "-type", "f"});
  INFO(find.output);
  CHECK(find.exit_code == 0);
  CHECK(find.output.find("'/a.conf'") != std::string::npos);
  CHECK(find.output.find("'/b.bin'") != std::string::npos);
  CHECK(find.output.find("'/sub/c.txt'") != std::string::npos);
  CHECK(find.output.find("..") == std::string::npos);
  auto dirs = run_command({*tool("xorriso"), "-indev", img.string(), "-find", "/", "-type", "d"});
  CHECK(dirs.output.find("..") == std::string::npos);
  // Contents byte for byte in both name spaces; modes kept in Rock Ridge.
  CHECK(iso_extract(img, "/a.conf", "-R", tmp / "a") == "key=value\n");
  CHECK(iso_extract(img, "/b.bin", "-R", tmp / "b") == bin);
  CHECK(iso_extract(img, "/sub/c.txt", "-J", tmp / "c") == "nested\n");
  auto ls = run_command({*tool("isoinfo"), "-R", "-l", "-i", img.string()});
  INFO(ls.output);
  CHECK(ls.output.find("-rw-r-----") != std::string::npos);
  CHECK(ls.output.find("-r--------") != std::string::npos);

  // A volumeLabel is the volume id; an existing image is never overwritten.
  auto labelled = d::write_config_disk({vol, tmp / "l.iso", "app-config", {}});
  REQUIRE(labelled);
  CHECK(blkid(tmp / "l.iso", "LABEL") == "app-config");
  auto again = d::write_config_disk({vol, img, "", {}});
  CHECK_FALSE(again);
}

TEST_CASE("config disk: a symlink leading out of the directory is refused, naming it") {
  TempDir tmp("chlcfg");
  const fs::path vol = kubelet_volume(tmp.path(), "x");
  write_file(tmp / "outside-secret", "not for the guest\n");
  SUBCASE("absolute symlink") { fs::create_symlink(tmp / "outside-secret", vol / "evil"); }
  SUBCASE("relative symlink climbing out") {
    fs::create_symlink("../outside-secret", vol / "evil");
  }
  SUBCASE("symlinked directory pointing out") { fs::create_directory_symlink("/etc", vol / "evil"); }
  const fs::path img = tmp / "cfg.iso";
  auto disk = d::write_config_disk({vol, img, "", {}});
  REQUIRE_FALSE(disk);
  const std::string msg = disk.error().message();
  INFO(msg);
  CHECK(msg.find("'evil'") != std::string::npos);
  CHECK(msg.find("outside the directory") != std::string::npos);
  CHECK_FALSE(fs::exists(img));
  CHECK(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()) == 2);
}

TEST_CASE("config disk: FIFOs, symlink loops and oversized volumes are refused") {
  TempDir tmp("chlcfg");
  const fs::path vol = tmp / "vol";
  fs::create_directories(vol);
  SUBCASE("fifo") {
    REQUIRE(::mkfifo((vol / "pipe").c_str(), 0600) == 0);
    auto r = d::read_config_dir(vol);
    REQUIRE_FALSE(r);
    CHECK(r.error().message().find("'pipe' is not a regular file or directory (a FIFO)") !=
          std::string::npos);
  }
  SUBCASE("directory loop inside") {
    fs::create_directories(vol / "a");
    fs::create_directory_symlink("..", vol / "a" / "up");
    auto r = d::read_config_dir(vol);
    REQUIRE_FALSE(r);
    CHECK(r.error().message().find("a/up") != std::string::npos);
  }
  SUBCASE("over the size limit") {
    write_file(vol / "big", std::string(5000, 'x'));
    d::ConfigDirLimits lim;
    lim.max_total_bytes = 4096;
    auto r = d::read_config_dir(vol, lim);
    REQUIRE_FALSE(r);
    CHECK(r.error().message().find("limit of 4096 bytes") != std::string::npos);
  }
  SUBCASE("empty directory: an empty ISO") {
    auto disk = d::write_config_disk({vol, tmp / "e.iso", "", {}});
    REQUIRE_MESSAGE(disk, (disk ? "" : disk.error().message()));
    CHECK(disk->files == 0);
  }
  SUBCASE("missing directory") {
    auto r = d::read_config_dir(tmp / "nope");
    REQUIRE_FALSE(r);
    CHECK(r.error().message().find("nope") != std::string::npos);
  }
}

// Disk full (issue 9's fault matrix): conversions and media written into a size-limited
// directory (a small tmpfs — or ext4, where conversions preallocate — in a private mount
// namespace: tests/disks/size_limited_dir.hpp) fail
// with ENOSPC, say which file and why, and leave nothing behind — no destination, no temporary
// file. Skips (saying why) where mounting is impossible (not root).
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "disks/atomic_file.hpp"
#include "disks/cloud_init.hpp"
#include "disks/convert.hpp"
#include "disks/empty_disk.hpp"
#include "tests/disks/qcow2_fixtures.hpp"
#include "tests/disks/size_limited_dir.hpp"
#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
namespace d = chl::disks;
namespace q = chl::test::qcow2;
using chl::test::skip;
using chl::test::TempDir;

namespace {

constexpr std::uint64_t kSmall = 4ull << 20;  // the size-limited directory: 4 MiB

// Every entry of `dir` (recursively), for "nothing left behind".
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    out.push_back(fs::relative(e.path(), dir).string());
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + " ";
  return s;
}

// A qcow2 image with 12 MiB of non-zero data in a 16 MiB disk (three times the small dir).
fs::path big_image(const TempDir& tmp) {
  const fs::path src = tmp.path() / "src.qcow2";
  q::create(src, "16M");
  q::io(src, {"write -P 0x5a 0 4M", "write -P 0x6b 4M 4M", "write -P 0x7c 8M 4M"});
  return src;
}

// A conversion into a directory too small for it, the free-space check off (as if the space
// went after the check: another writer): ENOSPC from the write, naming the disk, nothing left.
void check_full_while_writing(const fs::path& src, const fs::path& dst, d::ConvertOptions opts) {
  opts.check_free_space = false;
  auto r = d::convert_qcow2_to_raw(src, dst, opts);
  REQUIRE_FALSE(r.has_value());
  const std::string msg = r.error().message();
  CAPTURE(msg);
  CHECK(r.error().code == std::errc::no_space_on_device);
  CHECK(msg.find(dst.string()) != std::string::npos);
  CHECK(msg.find("writing") != std::string::npos);
  CHECK(msg.find("No space left on device") != std::string::npos);
  const auto left = entries(dst.parent_path());
  CHECK_MESSAGE(left.empty(), "left: " << joined(left));
}

}  // namespace

TEST_CASE("disk full: qcow2 conversion refused by the free-space check, ENOSPC, nothing written") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed (qemu-utils)");
  TempDir tmp("chl-diskfull");
  chl::test::SizeLimitedDir small(tmp.path() / "small", kSmall);
  if (!small.ok()) return skip("no size-limited directory: " + small.why());
  const fs::path src = big_image(tmp);
  const fs::path dst = small.path() / "disk.raw";
  auto r = d::convert_qcow2_to_raw(src, dst);
  REQUIRE_FALSE(r.has_value());
  const std::string msg = r.error().message();
  CAPTURE(msg);
  CHECK(r.error().code == std::errc::no_space_on_device);
  CHECK(msg.find(dst.string()) != std::string::npos);  // names the disk
  CHECK(msg.find("No space left on device") != std::string::npos);
  CHECK(msg.find("12.0 MiB") != std::string::npos);  // what it needs
  CHECK_MESSAGE(entries(small.path()).empty(), "left: " << joined(entries(small.path())));
}

TEST_CASE(
    "disk full: space running out while writing (check off) fails with ENOSPC, no temporary file "
    "left") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed (qemu-utils)");
  TempDir tmp("chl-diskfull");
  chl::test::SizeLimitedDir small(tmp.path() / "small", kSmall);
  if (!small.ok()) return skip("no size-limited directory: " + small.why());
  const fs::path src = big_image(tmp);
  const fs::path dst = small.path() / "disk.raw";
  for (bool direct : {false, true}) {
    CAPTURE(direct);
    d::ConvertOptions opts;
    opts.direct = direct;
    check_full_while_writing(src, dst, opts);
    // The space is back for the next writer.
    CHECK(d::free_space(small.path()).value_or(0) > kSmall / 2);
  }
}

TEST_CASE(
    "disk full on ext4, where long runs are allocated before the write: ENOSPC, nothing left") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed (qemu-utils)");
  TempDir tmp("chl-diskfull");
  chl::test::SizeLimitedDir small(tmp.path() / "small", 8ull << 20,
                                  chl::test::SizeLimitedDir::Kind::Ext4);
  if (!small.ok()) return skip("no size-limited ext4 directory: " + small.why());
  const std::uint64_t free_before = d::free_space(small.path()).value_or(0);
  const fs::path src = big_image(tmp);  // 12 MiB of data: more than the filesystem holds
  const fs::path dst = small.path() / "disk.raw";
  check_full_while_writing(src, dst, {});
  CHECK(d::free_space(small.path()).value_or(0) == free_before);  // every block given back
  // What fits is converted there, preallocated, identical to qemu-img's.
  const fs::path fits = tmp.path() / "fits.qcow2";
  q::create(fits, "16M");
  q::io(fits, {"write -P 0x5a 1M 2M", "write -P 0x6b 12M 1M"});
  auto ok = q::convert_ok(fits, dst);
  CHECK(ok.bytes_preallocated == 3u << 20);
  q::check_same_as_qemu(fits, dst);
}

TEST_CASE("disk full: a raw copy into a full directory fails with ENOSPC, nothing left") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed (qemu-utils)");
  TempDir tmp("chl-diskfull");
  chl::test::SizeLimitedDir small(tmp.path() / "small", kSmall);
  if (!small.ok()) return skip("no size-limited directory: " + small.why());
  const fs::path raw = tmp.path() / "src.raw";
  q::must(
      {"qemu-img", "convert", "-f", "qcow2", "-O", "raw", big_image(tmp).string(), raw.string()});
  for (bool check : {true, false}) {
    CAPTURE(check);
    d::ConvertOptions opts;
    opts.check_free_space = check;
    auto r = d::copy_raw_image(raw, small.path() / "copy.raw", opts);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == std::errc::no_space_on_device);
    CHECK(r.error().message().find("No space left on device") != std::string::npos);
    CHECK_MESSAGE(entries(small.path()).empty(), "left: " << joined(entries(small.path())));
  }
}

TEST_CASE("disk full: cloud-init media that do not fit fail with ENOSPC, nothing left") {
  TempDir tmp("chl-diskfull");
  chl::test::SizeLimitedDir small(tmp.path() / "small", 64 * 1024);
  if (!small.ok()) return skip("no size-limited directory: " + small.why());
  d::NoCloudData data;
  data.user_data = "#cloud-config\n# " + std::string(512 * 1024, 'x') + "\n";
  data.meta_data = "{\"instance-id\":\"i\"}";
  const fs::path out = small.path() / "cloud-init.iso";
  auto r = d::write_nocloud_image(out, data, {});
  REQUIRE_FALSE(r.has_value());
  CAPTURE(r.error().message());
  CHECK(r.error().code == std::errc::no_space_on_device);
  CHECK_MESSAGE(entries(small.path()).empty(), "left: " << joined(entries(small.path())));
}

TEST_CASE("disk full: an emptyDisk is sparse, so creating one writes nothing and fits") {
  TempDir tmp("chl-diskfull");
  chl::test::SizeLimitedDir small(tmp.path() / "small", kSmall);
  if (!small.ok()) return skip("no size-limited directory: " + small.why());
  // The guest's writes can run out of space later; creating it cannot (as qemu-img create).
  auto r = d::create_empty_disk(small.path() / "empty.img", 1ull << 30);
  REQUIRE_MESSAGE(r.has_value(), r.error().message());
  struct stat st {};
  REQUIRE(::stat((small.path() / "empty.img").c_str(), &st) == 0);
  CHECK(static_cast<std::uint64_t>(st.st_size) == (1ull << 30));
  CHECK(static_cast<std::uint64_t>(st.st_blocks) * 512 <= 64 * 1024);
}

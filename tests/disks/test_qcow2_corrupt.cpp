// Broken and unsupported qcow2 images: every one gives an error naming what is wrong, and
// leaves no output (nor temporary) file. Images are made by qemu-img and patched here.
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "disks/convert.hpp"
#include "tests/disks/qcow2_fixtures.hpp"
#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
namespace d = chl::disks;
namespace q = chl::test::qcow2;
using chl::test::skip;
using chl::test::TempDir;

namespace {

constexpr std::uint64_t kOffsetMask = 0x00fffffffffffe00ull;

// A 16 MiB qcow2 image (64 KiB clusters) with data at guest offset 0.
fs::path good_image(const TempDir& tmp, const std::string& name = "img.qcow2",
                    const std::string& options = "") {
  const fs::path p = tmp / name;
  q::create(p, "16M", options);
  q::io(p, q::mixed_writes(16ull << 20));
  return p;
}

// Converting `src` fails with a message containing every one of `expected`; nothing is left.
void expect_failure(const TempDir& tmp, const fs::path& src,
                    const std::vector<std::string>& expected, d::ConvertOptions opts = {}) {
  std::vector<std::string> before;
  for (const auto& e : fs::directory_iterator(tmp.path()))
    before.push_back(e.path().filename().string());
  const fs::path out = tmp / "out.raw";
  auto r = d::convert_qcow2_to_raw(src, out, opts);
  REQUIRE_FALSE(r.has_value());
  const std::string msg = r.error().message();
  INFO("error: " << msg);
  for (const auto& e : expected) CHECK(msg.find(e) != std::string::npos);
  CHECK(msg.find(src.filename().string()) != std::string::npos);  // names the file
  CHECK_FALSE(fs::exists(out));
  q::check_dir_holds_only(tmp.path(), before);
}

std::uint64_t l1_offset(const fs::path& p) { return q::read_be(p, 40, 8); }
std::uint64_t l2_offset(const fs::path& p) { return q::read_be(p, l1_offset(p), 8) & kOffsetMask; }

}  // namespace

TEST_CASE("corrupt qcow2: truncated files") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-qc");
  const fs::path img = good_image(tmp);
  fs::resize_file(img, 6 * 65536);
  expect_failure(tmp, img, {"past the end of the file"});
  fs::resize_file(img, 200);
  expect_failure(tmp, img, {"past the end of the file"});
  fs::resize_file(img, 40);
  expect_failure(tmp, img, {"too short"});
}

TEST_CASE("corrupt qcow2: L1 and L2 table offsets") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-qc");
  const fs::path img = good_image(tmp);
  const std::uint64_t l1 = l1_offset(img), l2 = l2_offset(img);
  SUBCASE("L1 table past the end") {
    q::write_be(img, 40, 8, 1ull << 40);
    expect_failure(tmp, img, {"L1 table", "past the end of the file"});
  }
  SUBCASE("L1 table not aligned") {
    q::write_be(img, 40, 8, l1 + 512);
    expect_failure(tmp, img, {"L1 table offset", "not aligned"});
  }
  SUBCASE("L2 table past the end") {
    q::write_be(img, l1, 8, (1ull << 63) | (1ull << 40));
    expect_failure(tmp, img,
                   {"L1 entry 0", "L2 table at offset 0x10000000000", "past the end of the file"});
  }
  SUBCASE("L2 table not aligned") {
    q::write_be(img, l1, 8, (1ull << 63) | (l2 + 4096));
    expect_failure(tmp, img, {"L2 table offset", "not aligned"});
  }
  SUBCASE("data cluster past the end") {
    q::write_be(img, l2, 8, (1ull << 63) | (1ull << 40));
    expect_failure(tmp, img,
                   {"data cluster at host offset 0x10000000000", "past the end of the file"});
  }
  SUBCASE("data cluster not aligned") {
    q::write_be(img, l2, 8, (q::read_be(img, l2, 8) & kOffsetMask) + 1024);
    expect_failure(tmp, img, {"data cluster offset", "not aligned"});
  }
}

TEST_CASE("corrupt qcow2: compressed clusters") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-qc");
  const fs::path plain = good_image(tmp, "plain.qcow2");
  for (const std::string type : {"zlib", "zstd"}) {
    CAPTURE(type);
    const fs::path img = tmp / (type + ".qcow2");
    q::must({"qemu-img", "convert", "-c", "-O", "qcow2", "-o", "compression_type=" + type,
             plain.string(), img.string()});
    const std::uint64_t l2 = l2_offset(img);
    const std::uint64_t entry = q::read_be(img, l2, 8);
    REQUIRE((entry & (1ull << 62)) != 0);
    const unsigned x = 62 - (16 - 8);
    const std::uint64_t host = entry & ((1ull << x) - 1);
    SUBCASE("offset past the end") {
      q::write_be(img, l2, 8, (entry & ~((1ull << x) - 1)) | (1ull << 40));
      expect_failure(tmp, img, {"compressed cluster", "past the end of the file"});
    }
    SUBCASE("garbage data") {
      for (int i = 0; i < 8; ++i) q::write_be(img, host + 8 * i, 8, 0xfffefdfcfbfaf9f8ull);
      expect_failure(tmp, img,
                     {"compressed cluster at host offset", type == "zlib" ? "deflate" : "zstd"});
    }
    fs::remove(img);
  }
}

TEST_CASE("corrupt qcow2: refcount structures") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-qc");
  const fs::path img = good_image(tmp);
  const std::uint64_t rt = q::read_be(img, 48, 8);
  SUBCASE("refcount_order too large") {
    q::write_be(img, 96, 4, 7);
    expect_failure(tmp, img, {"refcount_order 7"});
  }
  SUBCASE("refcount table of 0 clusters") {
    q::write_be(img, 56, 4, 0);
    expect_failure(tmp, img, {"refcount table has 0 clusters"});
  }
  SUBCASE("refcount table past the end") {
    q::write_be(img, 48, 8, 1ull << 40);
    expect_failure(tmp, img, {"refcount table", "past the end of the file"});
  }
  SUBCASE("refcount block past the end") {
    q::write_be(img, rt, 8, 1ull << 40);
    expect_failure(tmp, img, {"refcount table entry 0", "past the end of the file"});
  }
  SUBCASE("refcount of the header cluster is zero") {
    q::write_be(img, q::read_be(img, rt, 8), 2, 0);
    expect_failure(tmp, img, {"refcount of the header cluster is 0"});
  }
}

TEST_CASE("corrupt qcow2: header fields") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-qc");
  const fs::path img = good_image(tmp);
  SUBCASE("huge virtual size") {
    q::write_be(img, 24, 8, 1ull << 62);
    expect_failure(tmp, img, {"virtual size 4611686018427387904", "L1 entries"});
  }
  SUBCASE("virtual size beyond 2^63-1") {
    q::write_be(img, 24, 8, ~0ull);
    expect_failure(tmp, img, {"virtual size", "larger than 2^63-1"});
  }
  SUBCASE("cluster_bits out of range") {
    q::write_be(img, 20, 4, 30);
    expect_failure(tmp, img, {"cluster_bits 30"});
  }
  SUBCASE("unknown version") {
    q::write_be(img, 4, 4, 4);
    expect_failure(tmp, img, {"unsupported qcow2 version 4"});
  }
  SUBCASE("unknown incompatible feature") {
    q::write_be(img, 72, 8, 1ull << 10);
    expect_failure(tmp, img, {"unknown incompatible feature bits 0x400"});
  }
  SUBCASE("marked corrupt") {
    q::write_be(img, 72, 8, 2);
    expect_failure(tmp, img, {"marked corrupt"});
  }
  SUBCASE("L1 table larger than 32 MiB") {
    q::write_be(img, 36, 4, 5u << 20);
    expect_failure(tmp, img, {"exceeds the 32 MiB limit"});
  }
}

TEST_CASE("corrupt qcow2: extended L2 subcluster bitmap") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-qc");
  const fs::path img = tmp / "ext.qcow2";
  q::create(img, "16M", "extended_l2=on");
  q::io(img, {"write -P 0x11 0 4k"});
  const std::uint64_t l2 = l2_offset(img);
  q::write_be(img, l2 + 8, 8, q::read_be(img, l2 + 8, 8) | (1ull << 32) | 1ull);
  expect_failure(tmp, img, {"both allocated and zero"});
}

TEST_CASE("backing chains: loops, depth, missing files, protocols") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-qc");
  d::ConvertOptions allow;
  allow.allow_backing = true;
  SUBCASE("two images backing each other") {
    const fs::path a = tmp / "a.qcow2", b = tmp / "b.qcow2";
    q::create(a, "8M");
    q::must({"qemu-img", "create", "-q", "-f", "qcow2", "-b", "a.qcow2", "-F", "qcow2", b.string(),
             "8M"});
    q::must(
        {"qemu-img", "rebase", "-u", "-f", "qcow2", "-b", "b.qcow2", "-F", "qcow2", a.string()});
    expect_failure(tmp, b, {"backing chain loop", "b.qcow2"}, allow);
  }
  SUBCASE("an image backing itself") {
    const fs::path a = tmp / "self.qcow2";
    q::create(a, "8M");
    q::must(
        {"qemu-img", "rebase", "-u", "-f", "qcow2", "-b", "self.qcow2", "-F", "qcow2", a.string()});
    expect_failure(tmp, a, {"backing chain loop"}, allow);
  }
  SUBCASE("a chain deeper than the limit") {
    q::create(tmp / "l0.qcow2", "1M");
    for (int i = 1; i <= 18; ++i) {
      q::must({"qemu-img", "create", "-q", "-f", "qcow2", "-b",
               "l" + std::to_string(i - 1) + ".qcow2", "-F", "qcow2",
               (tmp / ("l" + std::to_string(i) + ".qcow2")).string(), "1M"});
    }
    expect_failure(tmp, tmp / "l18.qcow2", {"deeper than 16 layers"}, allow);
  }
  SUBCASE("a missing backing file") {
    const fs::path a = tmp / "orphan.qcow2";
    q::create(a, "8M");
    q::must(
        {"qemu-img", "rebase", "-u", "-f", "qcow2", "-b", "gone.qcow2", "-F", "qcow2", a.string()});
    expect_failure(tmp, a, {"gone.qcow2", "No such file"}, allow);
    expect_failure(tmp, a, {"backing file 'gone.qcow2'", "--allow-backing"});
  }
  SUBCASE("a backing file that is not a local file") {
    const fs::path a = tmp / "nbd.qcow2";
    q::create(a, "8M");
    q::must({"qemu-img", "rebase", "-u", "-f", "qcow2", "-b", "nbd://127.0.0.1:1/x", "-F", "raw",
             a.string()});
    expect_failure(tmp, a, {"not a local file"}, allow);
  }
}

TEST_CASE("unsupported images: external data file, encryption, other formats") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-qc");
  SUBCASE("external data file") {
    const fs::path a = tmp / "ext.qcow2";
    q::create(a, "8M", "data_file=" + (tmp / "ext.data").string());
    expect_failure(tmp, a, {"external data file"});
  }
  SUBCASE("LUKS encryption") {
    const fs::path a = tmp / "enc.qcow2";
    // qemu-img times its PBKDF and sometimes fails on a busy machine ("Unable to get accurate
    // CPU usage"): try a few times.
    bool made = false;
    for (int attempt = 0; attempt < 5 && !made; ++attempt) {
      made = chl::test::run_command(
                 {"qemu-img", "create", "-q", "-f", "qcow2", "--object", "secret,id=sec0,data=pass",
                  "-o", "encrypt.format=luks,encrypt.key-secret=sec0,encrypt.iter-time=100",
                  a.string(), "8M"})
                 .exit_code == 0;
    }
    if (!made) return skip("qemu-img could not create a LUKS image here");
    expect_failure(tmp, a, {"encrypted", "LUKS"});
  }
  SUBCASE("vmdk") {
    const fs::path a = tmp / "disk.vmdk";
    q::must({"qemu-img", "create", "-q", "-f", "vmdk", a.string(), "8M"});
    expect_failure(tmp, a, {"vmdk image", "only qcow2 and raw"});
  }
  SUBCASE("qcow version 1") {
    const fs::path a = tmp / "old.qcow";
    q::must({"qemu-img", "create", "-q", "-f", "qcow", a.string(), "8M"});
    expect_failure(tmp, a, {"qcow image"});
  }
}

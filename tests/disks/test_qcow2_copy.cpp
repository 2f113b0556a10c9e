// qcow2 -> raw: how the bytes get there (issue 17). Plain clusters copied with copy_file_range
// (and read+write where the kernel refuses it), compressed clusters decompressed on several
// threads and written in order, page cache by default and fdatasync only when asked — every
// way byte-identical to `qemu-img convert -O raw` (cmp, qemu-img compare) and as sparse.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "disks/convert.hpp"
#include "tests/disks/qcow2_fixtures.hpp"
#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
namespace d = chl::disks;
namespace q = chl::test::qcow2;
using chl::test::skip;
using chl::test::TempDir;
using q::convert_ok;

namespace {

// A raw file of `mib` MiB: text-like and random extents (random clusters stay plain under
// `qemu-img convert -c`), zero blocks inside data, and holes.
fs::path mixed_raw(const TempDir& tmp, const std::string& name, std::uint64_t mib) {
  const fs::path p = tmp / name;
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, static_cast<off_t>(mib << 20)) == 0);
  std::mt19937_64 rng(17);
  std::string buf(1 << 20, '\0');
  for (std::uint64_t m = 0; m < mib; ++m) {
    if (m % 3 == 2) continue;  // a hole
    for (std::size_t i = 0; i < buf.size(); i += 8) {
      const std::uint64_t v = rng();
      for (int k = 0; k < 8; ++k)
        buf[i + k] = m % 2 ? static_cast<char>(v >> (8 * k)) : "disk image "[(v >> k) % 11];
    }
    std::fill(buf.begin() + 8192, buf.begin() + 12288, '\0');  // a zero block inside data
    REQUIRE(::pwrite(fd, buf.data(), buf.size(), static_cast<off_t>(m << 20)) ==
            static_cast<ssize_t>(buf.size()));
  }
  ::close(fd);
  return p;
}

fs::path qcow2_of(const fs::path& raw, const fs::path& img, const std::string& compression) {
  std::vector<std::string> argv{"qemu-img", "convert", "-f", "raw", "-O", "qcow2"};
  if (compression != "none")
    argv.insert(argv.end(), {"-c", "-o", "compression_type=" + compression});
  argv.insert(argv.end(), {raw.string(), img.string()});
  q::must(argv);
  return img;
}

using Extents = std::vector<std::pair<std::uint64_t, std::uint64_t>>;  // [start, end)

// Where the file holds data, by SEEK_DATA/SEEK_HOLE.
Extents data_map(const fs::path& p) {
  Extents out;
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const off_t size = ::lseek(fd, 0, SEEK_END);
  for (off_t pos = 0; pos < size;) {
    const off_t data = ::lseek(fd, pos, SEEK_DATA);
    if (data < 0) break;
    const off_t hole = ::lseek(fd, data, SEEK_HOLE);
    REQUIRE(hole > data);
    out.emplace_back(data, hole);
    pos = hole;
  }
  ::close(fd);
  return out;
}

// Where the file's bytes are not zero, in whole 4 KiB blocks: what qemu-img leaves as data.
Extents nonzero_blocks(const fs::path& p) {
  const std::string bytes = chl::test::read_file(p);
  Extents out;
  for (std::uint64_t b = 0; b < bytes.size(); b += 4096) {
    const std::string_view block = std::string_view(bytes).substr(b, 4096);
    if (block.find_first_not_of('\0') == std::string_view::npos) continue;
    if (!out.empty() && out.back().second == b) {
      out.back().second = b + block.size();
    } else {
      out.emplace_back(b, b + block.size());
    }
  }
  return out;
}

// "[start,end) ..." in KiB, for readable failures.
std::string show(const Extents& e) {
  std::string out;
  for (const auto& [a, b] : e)
    out += "[" + std::to_string(a >> 10) + "K," + std::to_string(b >> 10) + "K) ";
  return out;
}

bool on_ext4(const fs::path& dir) {
  struct statfs fs {};
  return ::statfs(dir.c_str(), &fs) == 0 && fs.f_type == EXT4_SUPER_MAGIC;
}

}  // namespace

TEST_CASE("defaults: page cache, no flush, copy method chosen by the filesystem") {
  const d::ConvertOptions opts;
  CHECK_FALSE(opts.sync);    // durability only when asked (a container disk is re-made)
  CHECK_FALSE(opts.direct);  // no O_DIRECT unless asked
  CHECK(opts.copy == d::CopyMethod::Auto);
  CHECK(opts.preallocate);  // long runs allocated before they are written (ext4 only)
}

TEST_CASE("long runs allocated before they are written: identical, every zero block a hole") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-qcopy");
  // Written in reverse guest order, so guest-adjacent clusters are host-adjacent inside each
  // write and not between writes: runs of 1032 KiB (two writes), 188 KiB and 52 KiB between
  // zero 4 KiB blocks written as data, two clusters with an unallocated one between, two
  // 16 KiB runs in one cluster, a zero cluster, and data in the last cluster.
  const fs::path img = tmp / "layout.qcow2";
  q::create(img, "8M");
  q::io(img,
        {"write -P 0x11 8323072 65536", "write -z 5242880 65536", "write -P 0x22 3145728 16384",
         "write -P 0x23 3166208 16384", "write -P 0x33 2228224 65536",
         "write -P 0x34 2097152 65536", "write -P 0x44 1048576 262144", "write -P 0 1056768 4096",
         "write -P 0 1253376 4096", "write -P 0x55 0 1048576"});
  const bool ext4 = on_ext4(tmp.path());
  // The runs of 64 KiB or more: 1032 KiB, 188 KiB, the two separated clusters, the last one.
  constexpr std::uint64_t kLongRuns = (1032u << 10) + (188u << 10) + 3 * (64u << 10);
  struct Way {
    const char* name;
    bool preallocate;
    d::CopyMethod copy;
  };
  for (const Way& way :
       {Way{"prealloc", true, d::CopyMethod::Auto}, Way{"no-prealloc", false, d::CopyMethod::Auto},
        Way{"read-write", true, d::CopyMethod::ReadWrite}}) {
    CAPTURE(way.name);
    const fs::path out = tmp / (std::string(way.name) + ".raw");
    d::ConvertOptions opts;
    opts.preallocate = way.preallocate;
    opts.copy = way.copy;
    auto stats = convert_ok(img, out, opts);
    q::check_same_as_qemu(img, out);
    const Extents want = nonzero_blocks(out);
    REQUIRE(want.size() == 8);  // the layout above, as qemu-img reads it
    CHECK(show(data_map(out)) == show(want));
    std::uint64_t data = 0;
    for (const auto& [a, b] : want) data += b - a;
    if (stats.bytes_copied == 0) CHECK(stats.bytes_written == data);
    if (ext4 && way.preallocate && stats.bytes_copied == 0) {
      CHECK(stats.bytes_preallocated == kLongRuns);
    } else {
      CHECK(stats.bytes_preallocated == 0);
    }
    fs::remove(out);
  }
  SUBCASE("raw copied (--copy-raw): the same holes") {
    const fs::path raw = tmp / "ref.raw", out = tmp / "copy.raw";
    q::must({"qemu-img", "convert", "-O", "raw", img.string(), raw.string()});
    d::ConvertOptions opts;
    opts.copy_raw = true;
    auto r = d::copy_raw_image(raw, out, opts);
    REQUIRE(r.has_value());
    CHECK(chl::test::read_file(out) == chl::test::read_file(raw));
    CHECK(show(data_map(out)) == show(nonzero_blocks(raw)));
    CHECK(r->bytes_preallocated == (ext4 ? kLongRuns : 0));
  }
  SUBCASE("O_DIRECT writes are not preallocated") {
    d::ConvertOptions opts;
    opts.direct = true;
    auto stats = convert_ok(img, tmp / "direct.raw", opts);
    q::check_same_as_qemu(img, tmp / "direct.raw");
    CHECK(stats.bytes_preallocated == 0);
  }
}

TEST_CASE("plain clusters copied with copy_file_range: identical, source holes stay holes") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-qcopy");
  const fs::path raw = mixed_raw(tmp, "src.raw", 12);
  SUBCASE("an image qemu-img wrote") {
    const fs::path img = qcow2_of(raw, tmp / "plain.qcow2", "none");
    d::ConvertOptions opts;
    opts.copy = d::CopyMethod::CopyFileRange;
    auto stats = convert_ok(img, tmp / "cfr.raw", opts);
    q::check_same_as_qemu(img, tmp / "cfr.raw");
    CHECK(stats.bytes_copied > 4ull << 20);  // the plain clusters went file to file
    CHECK(stats.bytes_copied <= stats.bytes_written);
  }
  SUBCASE("preallocated clusters (holes or unwritten extents in the qcow2 file) are not copied") {
    for (const std::string prealloc : {"metadata", "falloc"}) {
      CAPTURE(prealloc);
      const fs::path img = tmp / (prealloc + ".qcow2"), out = tmp / (prealloc + ".raw");
      q::create(img, "32M", "preallocation=" + prealloc);
      q::io(img, {"write -P 0x12 2M 256k", "write -P 0x34 30M 64k"});
      d::ConvertOptions opts;
      opts.copy = d::CopyMethod::CopyFileRange;
      auto stats = convert_ok(img, out, opts);
      q::check_same_as_qemu(img, out);
      CHECK(stats.bytes_written == (256u << 10) + (64u << 10));
      CHECK(q::allocated(out) <= 1ull << 20);
    }
  }
  SUBCASE("a raw backing file's bytes are copied too") {
    const fs::path over = tmp / "over.qcow2", out = tmp / "over.raw";
    q::must({"qemu-img", "create", "-q", "-f", "qcow2", "-b", raw.string(), "-F", "raw",
             over.string(), "16M"});
    q::io(over, {"write -P 0x73 512k 1M"});
    d::ConvertOptions opts;
    opts.allow_backing = true;
    opts.copy = d::CopyMethod::CopyFileRange;
    auto stats = convert_ok(over, out, opts);
    q::check_same_as_qemu(over, out);
    CHECK(stats.bytes_copied > 4ull << 20);
  }
}

TEST_CASE("copy_file_range refused (EXDEV: another filesystem) falls back to read and write") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-qcopy");
  struct stat here {
  }, shm{};
  if (::stat(tmp.path().c_str(), &here) != 0 || ::stat("/dev/shm", &shm) != 0 ||
      here.st_dev == shm.st_dev || ::access("/dev/shm", W_OK) != 0)
    return skip("/dev/shm is not another writable filesystem");
  const fs::path img = qcow2_of(mixed_raw(tmp, "src.raw", 12), tmp / "p.qcow2", "none");
  char templ[] = "/dev/shm/chl-qcopy-XXXXXX";
  REQUIRE(::mkdtemp(templ) != nullptr);
  struct Remove {
    fs::path dir;
    ~Remove() { fs::remove_all(dir); }
  } other{templ};
  const fs::path out = other.dir / "out.raw";
  d::ConvertOptions opts;
  opts.copy = d::CopyMethod::CopyFileRange;
  auto stats = convert_ok(img, out, opts);
  CHECK(stats.bytes_copied == 0);
  CHECK(stats.bytes_written > 4ull << 20);
  q::check_same_as_qemu(img, out);
}

TEST_CASE("read and write: zero blocks inside data clusters become holes, as qemu-img's") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-qcopy");
  const fs::path img = qcow2_of(mixed_raw(tmp, "src.raw", 12), tmp / "p.qcow2", "none");
  for (auto method : {d::CopyMethod::ReadWrite, d::CopyMethod::Auto}) {
    const fs::path out = tmp / (method == d::CopyMethod::Auto ? "auto.raw" : "rw.raw");
    d::ConvertOptions opts;
    opts.copy = method;
    auto stats = convert_ok(img, out, opts);
    if (method == d::CopyMethod::ReadWrite) CHECK(stats.bytes_copied == 0);
    // Eight 1 MiB data extents, each with one zero 4 KiB block left out.
    if (stats.bytes_copied == 0) CHECK(stats.bytes_written == 8 * ((1u << 20) - 4096));
    q::check_same_as_qemu(img, out);
  }
}

TEST_CASE("compressed images on several threads: written in order, identical for any count") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-qcopy");
  const fs::path raw = mixed_raw(tmp, "src.raw", 48);  // 32 MiB of data, above the threshold
  for (const std::string type : {"zlib", "zstd"}) {
    const fs::path img = qcow2_of(raw, tmp / (type + ".qcow2"), type);
    for (unsigned threads : {0u, 1u, 2u, 3u, 5u}) {
      CAPTURE(type);
      CAPTURE(threads);
      const fs::path out = tmp / (type + std::to_string(threads) + ".raw");
      d::ConvertOptions opts;
      opts.threads = threads;
      std::uint64_t last = 0;
      bool monotonic = true;
      opts.progress = [&](const d::ConvertProgress& p) {
        monotonic = monotonic && p.done >= last;
        last = p.done;
      };
      auto stats = convert_ok(img, out, opts);
      if (threads == 0) {
        // Enough data to pay for threads: one per core (at most 4).
        const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
        CHECK(stats.threads == std::min(cores, 4u));
      } else {
        CHECK(stats.threads == threads);
      }
      CHECK(monotonic);
      CHECK(last == stats.virtual_size);
      q::check_same_as_qemu(img, out);
      fs::remove(out);
    }
  }
}

TEST_CASE("a small image is converted on the calling thread alone") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-qcopy");
  const fs::path img = tmp / "s.qcow2";
  q::create(img, "64M");
  q::io(img, {"write -P 0x01 0 2M", "write -P 0x02 40M 1M"});
  auto stats = convert_ok(img, tmp / "s.raw");
  CHECK(stats.threads == 1);
  q::check_same_as_qemu(img, tmp / "s.raw");
}

TEST_CASE("a plain image of any size is converted on the calling thread alone") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-qcopy");
  const fs::path raw = mixed_raw(tmp, "src.raw", 48);  // 32 MiB of data, none compressed
  const fs::path img = qcow2_of(raw, tmp / "plain.qcow2", "none");
  auto stats = convert_ok(img, tmp / "plain.raw");
  CHECK(stats.allocated_bytes == 32u << 20);
  CHECK(stats.compressed_bytes == 0);
  CHECK(stats.threads == 1);
  q::check_same_as_qemu(img, tmp / "plain.raw");
  // The same data compressed pays for threads: its 16 text MiB, and in each of the 16 random
  // MiB the cluster holding the zero block (deflate saves those 4 KiB); the rest stays plain.
  const fs::path zimg = qcow2_of(raw, tmp / "z.qcow2", "zlib");
  auto z = convert_ok(zimg, tmp / "z.raw");
  CHECK(z.compressed_bytes == (16u << 20) + 16 * 65536);
  CHECK(z.allocated_bytes == 32u << 20);
  CHECK(z.threads == std::min(std::max(1u, std::thread::hardware_concurrency()), 4u));
  q::check_same_as_qemu(zimg, tmp / "z.raw");
}

TEST_CASE("sync: the flushed output is the same, and still never replaces a file") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-qcopy");
  const fs::path img = qcow2_of(mixed_raw(tmp, "src.raw", 40), tmp / "z.qcow2", "zlib");
  d::ConvertOptions opts;
  opts.sync = true;
  convert_ok(img, tmp / "z.raw", opts);
  q::check_same_as_qemu(img, tmp / "z.raw");
  auto again = d::convert_qcow2_to_raw(img, tmp / "z.raw", opts);
  REQUIRE_FALSE(again.has_value());
  CHECK(again.error().message().find("already exists") != std::string::npos);
}

TEST_CASE("a corrupt compressed cluster far into a threaded conversion: error, nothing left") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-qcopy");
  const fs::path raw = tmp / "text.raw";
  {
    // 40 MiB of compressible text: every cluster compressed.
    std::string text;
    while (text.size() < (40u << 20))
      text += "a disk image for a virtual machine, line " + std::to_string(text.size()) + "\n";
    text.resize(40u << 20);
    chl::test::write_file(raw, text);
  }
  const fs::path img = qcow2_of(raw, tmp / "c.qcow2", "zlib");
  fs::remove(raw);
  // The last L2 entry in use: a compressed cluster near the end of the data.
  const std::uint64_t l1 = q::read_be(img, 40, 8);
  const std::uint64_t l2 = q::read_be(img, l1, 8) & 0x00fffffffffffe00ull;
  const std::uint64_t index = (36u << 20) / 65536;
  const std::uint64_t entry = q::read_be(img, l2 + 8 * index, 8);
  REQUIRE((entry & (1ull << 62)) != 0);
  const std::uint64_t host = entry & ((1ull << 54) - 1);
  for (int i = 0; i < 8; ++i) q::write_be(img, host + 8 * i, 8, 0xfffefdfcfbfaf9f8ull);
  d::ConvertOptions opts;
  opts.threads = 3;
  auto r = d::convert_qcow2_to_raw(img, tmp / "c.raw", opts);
  REQUIRE_FALSE(r.has_value());
  const std::string msg = r.error().message();
  INFO(msg);
  CHECK(msg.find("compressed cluster at host offset") != std::string::npos);
  CHECK(msg.find("deflate") != std::string::npos);
  CHECK(msg.find("c.qcow2") != std::string::npos);
  q::check_dir_holds_only(tmp.path(), {"c.qcow2"});
}

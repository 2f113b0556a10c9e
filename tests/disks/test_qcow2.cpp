// qcow2 -> raw conversion against qemu-img: images of every kind qemu writes (compat 0.10 and
// 1.1, cluster sizes 512 B to 2 MiB, zlib and zstd compression, preallocation, extended L2
// entries, backing chains), converted by us and by `qemu-img convert -O raw`, compared with
// cmp and `qemu-img compare`, and checked to be sparse.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <random>
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
using q::convert_ok;

TEST_CASE(
    "qcow2 v2 and v3 at cluster sizes 512 B to 2 MiB convert byte-identical to qemu-img and "
    "sparse") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-q2");
  for (const std::string compat : {"0.10", "1.1"}) {
    for (const std::uint64_t cluster : {512ull, 4096ull, 65536ull, 2097152ull}) {
      CAPTURE(compat);
      CAPTURE(cluster);
      const std::string name = "c" + compat + "-" + std::to_string(cluster);
      const fs::path img = tmp / (name + ".qcow2"), out = tmp / (name + ".raw");
      const std::uint64_t size = 16ull << 20;
      q::create(img, std::to_string(size),
                "compat=" + compat + ",cluster_size=" + std::to_string(cluster));
      q::io(img, q::mixed_writes(size));
      auto stats = convert_ok(img, out);
      CHECK(stats.source_format == d::ImageFormat::Qcow2);
      CHECK(stats.virtual_size == size);
      CHECK(stats.chain_length == 1);
      q::check_same_as_qemu(img, out);
      // Holes stay holes: far less than the virtual size is allocated.
      CHECK(q::allocated(out) < size / 2);
    }
  }
}

TEST_CASE("virtual size not a multiple of the cluster size converts exactly") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-q2");
  const std::uint64_t size = (16ull << 20) + 3 * 512;
  const fs::path img = tmp / "odd.qcow2", out = tmp / "odd.raw";
  q::create(img, std::to_string(size), "cluster_size=65536");
  q::io(img, q::mixed_writes(size));
  convert_ok(img, out);
  CHECK(q::size_of(out) == size);
  q::check_same_as_qemu(img, out);

  const fs::path comp = tmp / "oddc.qcow2", outc = tmp / "oddc.raw";
  q::must({"qemu-img", "convert", "-c", "-O", "qcow2", img.string(), comp.string()});
  convert_ok(comp, outc);
  q::check_same_as_qemu(comp, outc);
}

TEST_CASE("compressed clusters: zlib and zstd at several cluster sizes") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-q2");
  const std::uint64_t size = 16ull << 20;
  // A raw base with patterns, zeros, holes and incompressible random data (which qemu stores
  // uncompressed even with -c), so compressed and plain clusters mix.
  const fs::path base = tmp / "base.raw";
  q::must({"qemu-img", "create", "-q", "-f", "raw", base.string(), std::to_string(size)});
  q::io(base, q::mixed_writes(size), "raw");
  {
    std::mt19937_64 rng(42);
    std::string noise(512 * 1024, '\0');
    for (auto& c : noise) c = static_cast<char>(rng());
    int fd = ::open(base.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    REQUIRE(::pwrite(fd, noise.data(), noise.size(), 13 << 20) ==
            static_cast<ssize_t>(noise.size()));
    ::close(fd);
  }
  for (const std::string type : {"zlib", "zstd"}) {
    for (const std::uint64_t cluster : {4096ull, 65536ull, 2097152ull}) {
      CAPTURE(type);
      CAPTURE(cluster);
      const std::string name = type + "-" + std::to_string(cluster);
      const fs::path img = tmp / (name + ".qcow2"), out = tmp / (name + ".raw");
      q::must({"qemu-img", "convert", "-c", "-f", "raw", "-O", "qcow2", "-o",
               "cluster_size=" + std::to_string(cluster) + ",compression_type=" + type,
               base.string(), img.string()});
      // Plain clusters written on top of a compressed image.
      q::io(img, {"write -P 0x77 15M 64k"});
      auto info = chl::test::run_command({"qemu-img", "info", img.string()});
      CHECK(info.output.find("compression type: " + type) != std::string::npos);
      convert_ok(img, out);
      q::check_same_as_qemu(img, out);
    }
  }
}

TEST_CASE("preallocation=metadata and falloc images convert to sparse raw") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-q2");
  for (const std::string prealloc : {"metadata", "falloc"}) {
    CAPTURE(prealloc);
    const fs::path img = tmp / (prealloc + ".qcow2"), out = tmp / (prealloc + ".raw");
    const std::uint64_t size = 32ull << 20;
    q::create(img, std::to_string(size), "preallocation=" + prealloc);
    q::io(img, {"write -P 0x12 2M 256k", "write -z 8M 1M", "write -P 0x34 30M 64k"});
    convert_ok(img, out);
    q::check_same_as_qemu(img, out);
    CHECK(q::allocated(out) <= 1ull << 20);
  }
}

TEST_CASE("extended L2 entries: subcluster data, zero and unallocated subclusters") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-q2");
  for (const std::uint64_t cluster : {16384ull, 65536ull, 131072ull, 2097152ull}) {
    CAPTURE(cluster);
    const std::string name = "ext-" + std::to_string(cluster);
    const fs::path img = tmp / (name + ".qcow2"), out = tmp / (name + ".raw");
    const std::uint64_t size = 24ull << 20;
    q::create(img, std::to_string(size), "extended_l2=on,cluster_size=" + std::to_string(cluster));
    const std::uint64_t sc = cluster / 32;
    q::io(img, {
                   "write -P 0x31 " + std::to_string(sc) + " " +
                       std::to_string(3 * sc),  // subclusters 1-3
                   "write -z " + std::to_string(5 * sc) + " " + std::to_string(2 * sc),  // 5-6 zero
                   "write -P 0x32 " + std::to_string(cluster + 7 * sc) + " " + std::to_string(sc),
                   "write -P 0x33 4M 3M",
                   "write -z 5M 64k",
                   "discard 6M 1M",
                   "write -P 0x34 20M 100k",
               });
    auto info = chl::test::run_command({"qemu-img", "info", img.string()});
    CHECK(info.output.find("extended l2: true") != std::string::npos);
    convert_ok(img, out);
    q::check_same_as_qemu(img, out);
  }
}

TEST_CASE("a large sparse image converts without touching its holes") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-q2");
  const fs::path img = tmp / "big.qcow2", out = tmp / "big.raw";
  const std::uint64_t size = 1ull << 40;  // 1 TiB virtual
  q::create(img, "1T");
  q::io(img, {"write -P 0x42 0 64k", "write -P 0x43 512G 1M",
              "write -P 0x44 " + std::to_string(size - 65536) + " 64k"});
  auto stats = convert_ok(img, out);
  CHECK(stats.virtual_size == size);
  CHECK(stats.bytes_written == 65536 + (1u << 20) + 65536);
  CHECK(q::size_of(out) == size);
  CHECK(q::allocated(out) < (4ull << 20));
  auto cmpq = chl::test::run_command(
      {"qemu-img", "compare", "-q", "-f", "qcow2", "-F", "raw", img.string(), out.string()});
  INFO(cmpq.output);
  CHECK(cmpq.exit_code == 0);
}

TEST_CASE("thread count does not change the output, and progress reaches the total") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-q2");
  const fs::path img = tmp / "t.qcow2";
  const std::uint64_t size = 64ull << 20;
  q::create(img, std::to_string(size));
  q::io(img, {"write -P 0x01 0 20M", "write -P 0x02 33M 7M", "write -P 0x03 60M 4M"});
  const fs::path comp = tmp / "tc.qcow2";
  q::must({"qemu-img", "convert", "-c", "-O", "qcow2", img.string(), comp.string()});
  for (unsigned threads : {1u, 2u, 4u}) {
    CAPTURE(threads);
    const fs::path out = tmp / ("t" + std::to_string(threads) + ".raw");
    d::ConvertOptions opts;
    opts.threads = threads;
    std::uint64_t last = 0, calls = 0;
    bool monotonic = true;
    opts.progress = [&](const d::ConvertProgress& p) {
      monotonic = monotonic && p.done >= last && p.total == size;
      last = p.done;
      ++calls;
    };
    auto stats = convert_ok(comp, out, opts);
    CHECK(stats.threads == threads);
    CHECK(monotonic);
    CHECK(calls >= 1);
    CHECK(last == size);
    q::check_same_as_qemu(comp, out);
  }
}

TEST_CASE("backing files are refused by default and resolved with allow_backing") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-q2");
  const fs::path base = tmp / "base.qcow2", mid = tmp / "mid.qcow2", top = tmp / "top.qcow2";
  q::create(base, "16M", "cluster_size=4096");
  q::io(base, {"write -P 0x61 0 4M", "write -P 0x62 8M 4M"});
  q::must({"qemu-img", "create", "-q", "-f", "qcow2", "-b", "base.qcow2", "-F", "qcow2", "-o",
           "cluster_size=65536", mid.string(), "16M"});
  q::io(mid, {"write -P 0x63 1M 1M", "write -z 9M 1M"});
  // The top is larger than its backing chain: past 16 MiB it reads zeros.
  q::must({"qemu-img", "create", "-q", "-f", "qcow2", "-b", mid.string(), "-F", "qcow2", "-o",
           "cluster_size=2097152,extended_l2=on", top.string(), "32M"});
  q::io(top, {"write -P 0x64 2M 100k", "write -P 0x65 20M 1M"});

  const fs::path out = tmp / "top.raw";
  auto refused = d::convert_qcow2_to_raw(top, out);
  REQUIRE_FALSE(refused.has_value());
  const std::string msg = refused.error().message();
  INFO(msg);
  CHECK(msg.find("backing file") != std::string::npos);
  CHECK(msg.find("--allow-backing") != std::string::npos);
  CHECK(msg.find("mid.qcow2") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
  q::check_dir_holds_only(tmp.path(), {"base.qcow2", "mid.qcow2", "top.qcow2"});

  d::ConvertOptions opts;
  opts.allow_backing = true;
  auto stats = convert_ok(top, out, opts);
  CHECK(stats.chain_length == 3);
  q::check_same_as_qemu(top, out);
}

TEST_CASE("a raw backing file and a backing file without a format name") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-q2");
  const fs::path raw = tmp / "base.raw", over = tmp / "over.qcow2", out = tmp / "over.out";
  q::must({"qemu-img", "create", "-q", "-f", "raw", raw.string(), "8M"});
  q::io(raw, {"write -P 0x71 0 1M", "write -P 0x72 7M 1M"}, "raw");
  q::must({"qemu-img", "create", "-q", "-f", "qcow2", "-b", raw.string(), "-F", "raw",
           over.string(), "12M"});
  q::io(over, {"write -P 0x73 512k 1M"});
  d::ConvertOptions opts;
  opts.allow_backing = true;
  auto stats = convert_ok(over, out, opts);
  CHECK(stats.chain_length == 2);
  q::check_same_as_qemu(over, out);

  // Drop the backing format: the backing file's format is then detected by its content.
  const fs::path base2 = tmp / "b2.qcow2", over2 = tmp / "o2.qcow2", out2 = tmp / "o2.out";
  q::create(base2, "8M");
  q::io(base2, {"write -P 0x74 0 2M"});
  q::must({"qemu-img", "create", "-q", "-f", "qcow2", "-b", "b2.qcow2", "-F", "qcow2",
           over2.string(), "8M"});
  q::io(over2, {"write -P 0x75 1M 64k"});
  // Turn the backing format extension (0xe2792aca) into an unknown one, which readers skip.
  bool patched = false;
  for (std::uint64_t off = 104; off < 4096 && !patched; off += 8) {
    if (q::read_be(over2, off, 4) == 0xe2792acaull) {
      q::write_be(over2, off, 4, 0x12345678);
      patched = true;
    }
  }
  REQUIRE(patched);
  auto info = chl::test::run_command({"qemu-img", "info", "--backing-chain", over2.string()});
  CHECK(info.output.find("backing file format") == std::string::npos);
  convert_ok(over2, out2, opts);
  const fs::path ref2 = tmp / "o2.ref";
  q::must({"qemu-img", "convert", "-O", "raw", over2.string(), ref2.string()});
  CHECK(chl::test::run_command({"cmp", out2.string(), ref2.string()}).exit_code == 0);
}

TEST_CASE("raw input is passed through, or copied sparse when asked") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-q2");
  const fs::path raw = tmp / "disk.img", out = tmp / "copy.raw";
  q::must({"qemu-img", "create", "-q", "-f", "raw", raw.string(), "64M"});
  q::io(raw, {"write -P 0x01 1M 1M", "write -P 0x02 40M 64k"}, "raw");
  auto pass = convert_ok(raw, out);
  CHECK(pass.passthrough);
  CHECK(pass.source_format == d::ImageFormat::Raw);
  CHECK_FALSE(fs::exists(out));

  d::ConvertOptions opts;
  opts.copy_raw = true;
  auto copied = convert_ok(raw, out, opts);
  CHECK(copied.copied_raw);
  CHECK(copied.bytes_written == (1u << 20) + 65536);
  CHECK(chl::test::run_command({"cmp", raw.string(), out.string()}).exit_code == 0);
  CHECK(q::allocated(out) <= 2ull << 20);
}

TEST_CASE("an existing destination is never overwritten") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-q2");
  const fs::path img = tmp / "a.qcow2", out = tmp / "a.raw";
  q::create(img, "8M");
  q::io(img, {"write -P 0x01 0 1M"});
  chl::test::write_file(out, "precious");
  auto r = d::convert_qcow2_to_raw(img, out);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message().find("already exists") != std::string::npos);
  CHECK(chl::test::read_file(out) == "precious");
  q::check_dir_holds_only(tmp.path(), {"a.qcow2", "a.raw"});
}

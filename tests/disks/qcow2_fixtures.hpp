#pragma once
// Helpers for the qcow2 tests: images are made by qemu-img/qemu-io in each test (none are
// committed), compared with qemu-img's own conversion, and patched byte by byte to corrupt them.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "disks/convert.hpp"
#include "tests/support/test_support.hpp"

namespace chl::test::qcow2 {

namespace fs = std::filesystem;

// qemu-img and qemu-io (qemu-utils) are present.
inline bool have_qemu_tools() {
  return tool("qemu-img").has_value() && tool("qemu-io").has_value();
}

// Run a command that must succeed; fails the test with its output otherwise.
inline void must(const std::vector<std::string>& argv) {
  auto r = run_command(argv);
  std::string line;
  for (const auto& a : argv) line += a + " ";
  INFO("command: " << line << "\noutput: " << r.output);
  REQUIRE(r.exit_code == 0);
}

// qemu-img create -f qcow2 -o OPTIONS PATH SIZE
inline void create(const fs::path& p, const std::string& size, const std::string& options = "") {
  std::vector<std::string> argv{"qemu-img", "create", "-q", "-f", "qcow2"};
  if (!options.empty()) {
    argv.push_back("-o");
    argv.push_back(options);
  }
  argv.push_back(p.string());
  argv.push_back(size);
  must(argv);
}

// qemu-io -f qcow2 -c CMD... PATH
inline void io(const fs::path& p, const std::vector<std::string>& cmds,
               const std::string& fmt = "qcow2") {
  std::vector<std::string> argv{"qemu-io", "-f", fmt};
  for (const auto& c : cmds) {
    argv.push_back("-c");
    argv.push_back(c);
  }
  argv.push_back(p.string());
  must(argv);
}

// A varied layout in a 16+ MiB image: data of several patterns, zero writes, holes, data
// straddling cluster boundaries and at the very end.
inline std::vector<std::string> mixed_writes(std::uint64_t size) {
  std::vector<std::string> c{
      "write -P 0xab 0 4k",     "write -P 0x11 1M 64k",    "write -z 1100k 900k",
      "write -P 0x22 3M 1536k", "write -P 0x33 5000k 17k", "write -z 6M 1M",
      "write -P 0x44 8M 512",   "write -P 0x55 9M 2M",     "write -z 9500k 100k",
      "write -P 0x00 12M 64k",
  };
  c.push_back("write -P 0x66 " + std::to_string(size - 4096) + " 4096");
  return c;
}

inline std::uint64_t size_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return static_cast<std::uint64_t>(st.st_size);
}

inline std::uint64_t allocated(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return static_cast<std::uint64_t>(st.st_blocks) * 512;
}

// Our output equals qemu-img's (cmp and qemu-img compare), and is at least as sparse (give or
// take a few blocks).
inline void check_same_as_qemu(const fs::path& src, const fs::path& ours,
                               const std::string& src_fmt = "qcow2") {
  const fs::path ref = ours.string() + ".qemu";
  must({"qemu-img", "convert", "-f", src_fmt, "-O", "raw", src.string(), ref.string()});
  auto cmp = run_command({"cmp", ours.string(), ref.string()});
  INFO("cmp: " << cmp.output);
  CHECK(cmp.exit_code == 0);
  auto cmpq = run_command(
      {"qemu-img", "compare", "-q", "-f", "raw", "-F", "raw", ours.string(), ref.string()});
  INFO("qemu-img compare: " << cmpq.output);
  CHECK(cmpq.exit_code == 0);
  CHECK(size_of(ours) == size_of(ref));
  CHECK(allocated(ours) <= allocated(ref) + 64 * 1024);
  fs::remove(ref);
}

// convert_qcow2_to_raw that must succeed (the error shown otherwise).
inline disks::ConvertStats convert_ok(const fs::path& src, const fs::path& dst,
                                      const disks::ConvertOptions& opts = {}) {
  auto r = disks::convert_qcow2_to_raw(src, dst, opts);
  INFO("convert error: " << (r ? std::string() : r.error().message()));
  REQUIRE(r.has_value());
  return *r;
}

// Big-endian field access for patching images.
inline std::uint64_t read_be(const fs::path& p, std::uint64_t off, int bytes) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  unsigned char b[8] = {};
  REQUIRE(::pread(fd, b, static_cast<std::size_t>(bytes), static_cast<off_t>(off)) == bytes);
  ::close(fd);
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | b[i];
  return v;
}

inline void write_be(const fs::path& p, std::uint64_t off, int bytes, std::uint64_t v) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  unsigned char b[8] = {};
  for (int i = bytes - 1; i >= 0; --i) {
    b[i] = static_cast<unsigned char>(v & 0xff);
    v >>= 8;
  }
  REQUIRE(::pwrite(fd, b, static_cast<std::size_t>(bytes), static_cast<off_t>(off)) == bytes);
  ::close(fd);
}

// Nothing but `keep` in `dir` (no output, no temporary file left behind).
inline void check_dir_holds_only(const fs::path& dir, const std::vector<std::string>& keep) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const auto name = e.path().filename().string();
    bool expected = false;
    for (const auto& k : keep) expected = expected || k == name;
    INFO("unexpected file left: " << name);
    CHECK(expected);
  }
}

}  // namespace chl::test::qcow2

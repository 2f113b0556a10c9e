// Sizes, format detection, emptyDisk, PVC/hostDisk files and containerDisks.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "disks/container_disk.hpp"
#include "disks/disk_file.hpp"
#include "disks/empty_disk.hpp"
#include "disks/image_format.hpp"
#include "disks/quantity.hpp"
#include "tests/disks/qcow2_fixtures.hpp"
#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
namespace d = chl::disks;
namespace q = chl::test::qcow2;
using chl::test::skip;
using chl::test::TempDir;
using chl::test::write_file;

namespace {

// `len` bytes at `off` (disk images are too big to read whole).
std::string read_at(const fs::path& p, off_t off, std::size_t len) {
  std::string s(len, '\0');
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const ssize_t n = ::pread(fd, s.data(), len, off);
  ::close(fd);
  REQUIRE(n == static_cast<ssize_t>(len));
  return s;
}

}  // namespace

TEST_CASE("parse_quantity reads Kubernetes quantities as bytes") {
  struct Row {
    const char* text;
    std::uint64_t bytes;
  };
  const Row good[] = {
      {"0", 0},
      {"1048576", 1048576},
      {"1Ki", 1024},
      {"512Mi", 512ull << 20},
      {"1Gi", 1ull << 30},
      {"10Gi", 10ull << 30},
      {"2Ti", 2ull << 40},
      {"1Pi", 1ull << 50},
      {"1Ei", 1ull << 60},
      {"10G", 10000000000ull},
      {"1k", 1000},
      {"3M", 3000000},
      {"1T", 1000000000000ull},
      {"1.5Gi", 3ull << 29},
      {"0.5Ki", 512},
      {"1e3", 1000},
      {"1E6", 1000000},
      {"2E", 2000000000000000000ull},
      {"1500m", 2},  // 1.5 bytes, rounded up as Quantity.Value() does
      {"+5", 5},
      {"1.0001k", 1001},
  };
  for (const auto& row : good) {
    CAPTURE(row.text);
    auto v = d::parse_quantity(row.text);
    REQUIRE(v.has_value());
    CHECK(*v == row.bytes);
  }
  for (const char* bad :
       {"", "-1Gi", "Gi", "1Gb", "1 Gi", "1.2.3", "10X", "9Ei", "1e19", "99999999999999999999"}) {
    CAPTURE(bad);
    auto v = d::parse_quantity(bad);
    REQUIRE_FALSE(v.has_value());
    CHECK(v.error().message().find("invalid quantity") != std::string::npos);
  }
}

TEST_CASE("detect_format goes by content, never by name") {
  TempDir tmp("chl-df");
  write_file(tmp / "empty.qcow2", "");
  CHECK(*d::detect_format(tmp / "empty.qcow2") == d::ImageFormat::Raw);
  write_file(tmp / "looks.raw", std::string("QFI\xfb\0\0\0\x03", 8) + std::string(200, '\0'));
  CHECK(*d::detect_format(tmp / "looks.raw") == d::ImageFormat::Qcow2);
  write_file(tmp / "v1.img", std::string("QFI\xfb\0\0\0\x01", 8));
  CHECK(*d::detect_format(tmp / "v1.img") == d::ImageFormat::Qcow1);
  write_file(tmp / "x.qcow2", "KDMV" + std::string(600, 'x'));
  CHECK(*d::detect_format(tmp / "x.qcow2") == d::ImageFormat::Vmdk);
  write_file(tmp / "vhdx", "vhdxfile");
  CHECK(*d::detect_format(tmp / "vhdx") == d::ImageFormat::Vhdx);
  CHECK_FALSE(d::detect_format(tmp / "missing").has_value());
  if (!q::have_qemu_tools()) return skip("qemu-img not installed for the real-image half");
  for (const auto& [fmt, expect] :
       {std::pair{"qcow2", d::ImageFormat::Qcow2}, std::pair{"raw", d::ImageFormat::Raw},
        std::pair{"vmdk", d::ImageFormat::Vmdk}, std::pair{"vdi", d::ImageFormat::Vdi},
        std::pair{"vpc", d::ImageFormat::Vpc}, std::pair{"vhdx", d::ImageFormat::Vhdx},
        std::pair{"qed", d::ImageFormat::Qed}}) {
    CAPTURE(fmt);
    const fs::path p = tmp / (std::string("img-") + fmt + ".bin");
    q::must({"qemu-img", "create", "-q", "-f", fmt, p.string(), "4M"});
    auto got = d::detect_format(p);
    REQUIRE(got.has_value());
    CHECK(*got == expect);
  }
}

TEST_CASE(
    "create_empty_disk makes a sparse file, reuses the same size and never touches other data") {
  TempDir tmp("chl-ed");
  const fs::path p = tmp / "empty.img";
  auto made = d::create_empty_disk(p, 10ull << 30);
  REQUIRE(made.has_value());
  CHECK(made->created);
  CHECK(made->size == 10ull << 30);
  CHECK(fs::file_size(p) == 10ull << 30);
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  CHECK(st.st_blocks == 0);  // sparse: nothing allocated

  // Same VMI again (reboot, launcher restart): reused, and data written by the guest stays.
  {
    int fd = ::open(p.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    REQUIRE(::pwrite(fd, "guest data", 10, 4096) == 10);
    ::close(fd);
  }
  auto again = d::create_empty_disk(p, 10ull << 30);
  REQUIRE(again.has_value());
  CHECK_FALSE(again->created);
  CHECK(read_at(p, 4096, 10) == "guest data");

  // Another size: an error naming both, the file untouched.
  auto other = d::create_empty_disk(p, 1ull << 30);
  REQUIRE_FALSE(other.has_value());
  CHECK(other.error().message().find(
            "exists with 10737418240 bytes but 1073741824 were requested") != std::string::npos);
  CHECK(fs::file_size(p) == 10ull << 30);

  // Rounded up to whole sectors, like qemu-img.
  auto odd = d::create_empty_disk(tmp / "odd.img", 1000);
  REQUIRE(odd.has_value());
  CHECK(odd->size == 1024);
  CHECK(fs::file_size(tmp / "odd.img") == 1024);

  CHECK_FALSE(d::create_empty_disk(tmp / "zero.img", 0).has_value());
  fs::create_directory(tmp / "dir.img");
  auto dir = d::create_empty_disk(tmp / "dir.img", 1024);
  REQUIRE_FALSE(dir.has_value());
  CHECK(dir.error().message().find("not a regular file") != std::string::npos);
  auto nodir = d::create_empty_disk(tmp / "no" / "such" / "x.img", 1024);
  REQUIRE_FALSE(nodir.has_value());
  CHECK(nodir.error().message().find("No such file") != std::string::npos);
  q::check_dir_holds_only(tmp.path(), {"empty.img", "odd.img", "dir.img"});
}

TEST_CASE("check_disk_file: PVC and hostDisk files") {
  TempDir tmp("chl-pv");
  SUBCASE("missing file") {
    auto r = d::check_disk_file({tmp / "nope.img", std::nullopt, false, false});
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message().find("does not exist") != std::string::npos);
  }
  SUBCASE("DiskOrCreate creates a sparse file of the capacity, then finds it") {
    d::DiskFileRequest req{tmp / "host.img", 64ull << 20, false, true};
    auto r = d::check_disk_file(req);
    REQUIRE(r.has_value());
    CHECK(r->created);
    CHECK(r->size == 64ull << 20);
    CHECK(r->format == d::ImageFormat::Raw);
    auto again = d::check_disk_file(req);
    REQUIRE(again.has_value());
    CHECK_FALSE(again->created);
  }
  SUBCASE("DiskOrCreate without a capacity") {
    auto r = d::check_disk_file({tmp / "host.img", std::nullopt, false, true});
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message().find("no capacity") != std::string::npos);
  }
  SUBCASE("a PVC directory holds disk.img") {
    fs::create_directory(tmp / "pvc");
    write_file(tmp / "pvc" / "disk.img", std::string(1 << 20, '\1'));
    auto r = d::check_disk_file({tmp / "pvc", 1 << 20, false, false});
    REQUIRE(r.has_value());
    CHECK(r->path == tmp / "pvc" / "disk.img");
    CHECK(r->size == 1 << 20);
  }
  SUBCASE("smaller than the capacity") {
    write_file(tmp / "small.img", std::string(4096, '\0'));
    auto r = d::check_disk_file({tmp / "small.img", 8192, false, true});
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message().find("is 4096 bytes, smaller than the requested capacity of 8192") !=
          std::string::npos);
    CHECK(fs::file_size(tmp / "small.img") == 4096);
  }
  SUBCASE("not a file") {
    fs::create_directory(tmp / "d");
    auto r = d::check_disk_file({tmp / "d", std::nullopt, false, false});
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message().find("disk.img' does not exist") != std::string::npos);
  }
  SUBCASE("permissions") {
    if (::geteuid() == 0) return skip("running as root: file modes do not restrict access");
    write_file(tmp / "ro.img", std::string(4096, '\0'));
    fs::permissions(tmp / "ro.img", fs::perms::owner_read);
    CHECK(d::check_disk_file({tmp / "ro.img", std::nullopt, true, false}).has_value());
    auto r = d::check_disk_file({tmp / "ro.img", std::nullopt, false, false});
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message().find("not writable") != std::string::npos);
  }
}

TEST_CASE("find_container_disk_image: KubeVirt's disk/ layout") {
  TempDir tmp("chl-cd");
  fs::create_directories(tmp / "root" / "disk");
  auto none = d::find_container_disk_image(tmp / "root");
  REQUIRE_FALSE(none.has_value());
  CHECK(none.error().message().find("no image file") != std::string::npos);
  write_file(tmp / "root" / "disk" / "fedora.qcow2", "x");
  write_file(tmp / "root" / "disk" / ".hidden", "x");
  CHECK(*d::find_container_disk_image(tmp / "root") == tmp / "root" / "disk" / "fedora.qcow2");
  CHECK(*d::find_container_disk_image(tmp / "root" / "disk") ==
        tmp / "root" / "disk" / "fedora.qcow2");
  write_file(tmp / "root" / "disk" / "README", "x");
  CHECK(*d::find_container_disk_image(tmp / "root") == tmp / "root" / "disk" / "fedora.qcow2");
  write_file(tmp / "root" / "disk" / "other.img", "x");
  auto many = d::find_container_disk_image(tmp / "root");
  REQUIRE_FALSE(many.has_value());
  CHECK(many.error().message().find("fedora.qcow2, other.img") != std::string::npos);
  CHECK(*d::find_container_disk_image(tmp / "root" / "disk" / "other.img") ==
        tmp / "root" / "disk" / "other.img");
  CHECK_FALSE(d::find_container_disk_image(tmp / "missing").has_value());
}

TEST_CASE("prepare_container_disk: qcow2 converted into the state dir, raw used in place") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-cd");
  const fs::path root = tmp / "cd", state = tmp / "state";
  fs::create_directories(root / "disk");
  // Named .img but qcow2 inside: the content decides.
  const fs::path img = root / "disk" / "disk.img";
  q::create(img, "32M");
  q::io(img, {"write -P 0x5a 1M 2M", "write -P 0x5b 30M 1M"});

  d::ContainerDiskRequest req;
  req.volume_name = "containerdisk";
  req.source = root;
  req.state_dir = state;
  auto r = d::prepare_container_disk(req);
  INFO((r ? std::string() : r.error().message()));
  REQUIRE(r.has_value());
  CHECK(r->source_format == d::ImageFormat::Qcow2);
  CHECK(r->converted);
  CHECK_FALSE(r->read_only);
  CHECK(r->path == state / "containerdisk-containerdisk.raw");
  CHECK(r->size == 32ull << 20);
  q::check_same_as_qemu(img, r->path);

  // A second start of the same VMI reuses the converted file and what the guest wrote in it.
  {
    int fd = ::open(r->path.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    REQUIRE(::pwrite(fd, "written by the guest", 20, 0) == 20);
    ::close(fd);
  }
  auto again = d::prepare_container_disk(req);
  REQUIRE(again.has_value());
  CHECK(again->reused);
  CHECK_FALSE(again->converted);
  CHECK(read_at(again->path, 0, 20) == "written by the guest");

  // A file of another size in its place is not taken for a conversion.
  fs::resize_file(again->path, 1 << 20);
  auto wrong = d::prepare_container_disk(req);
  REQUIRE_FALSE(wrong.has_value());
  CHECK(wrong.error().message().find("exists but is not a 33554432-byte raw image") !=
        std::string::npos);

  // Raw: used in place, read-only; or copied when the guest may write.
  const fs::path rawroot = tmp / "rawcd";
  fs::create_directories(rawroot / "disk");
  const fs::path raw = rawroot / "disk" / "image.qcow2";  // raw content despite the name
  q::must({"qemu-img", "create", "-q", "-f", "raw", raw.string(), "16M"});
  q::io(raw, {"write -P 0x01 0 1M"}, "raw");
  d::ContainerDiskRequest rreq{"rawdisk", rawroot, state, false, {}};
  auto inplace = d::prepare_container_disk(rreq);
  REQUIRE(inplace.has_value());
  CHECK(inplace->read_only);
  CHECK(inplace->path == raw);
  CHECK_FALSE(inplace->converted);
  rreq.writable = true;
  auto copied = d::prepare_container_disk(rreq);
  REQUIRE(copied.has_value());
  CHECK_FALSE(copied->read_only);
  CHECK(copied->converted);
  CHECK(copied->path == state / "containerdisk-rawdisk.raw");
  CHECK(chl::test::run_command({"cmp", raw.string(), copied->path.string()}).exit_code == 0);
  CHECK(q::allocated(copied->path) <= 2ull << 20);

  d::ContainerDiskRequest bad{"../evil", rawroot, state, false, {}};
  auto evil = d::prepare_container_disk(bad);
  REQUIRE_FALSE(evil.has_value());
  CHECK(evil.error().message().find("invalid volume name") != std::string::npos);
}

TEST_CASE("prepare_container_disk refuses other formats and qcow2 with a backing file") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-cd");
  fs::create_directories(tmp / "cd" / "disk");
  q::must(
      {"qemu-img", "create", "-q", "-f", "vmdk", (tmp / "cd" / "disk" / "d.img").string(), "8M"});
  auto r = d::prepare_container_disk({"v", tmp / "cd", tmp / "state", false, {}});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message().find("is a vmdk image") != std::string::npos);

  fs::create_directories(tmp / "cd2" / "disk");
  q::create(tmp / "base.qcow2", "8M");
  q::must({"qemu-img", "create", "-q", "-f", "qcow2", "-b", (tmp / "base.qcow2").string(), "-F",
           "qcow2", (tmp / "cd2" / "disk" / "d.qcow2").string(), "8M"});
  auto b = d::prepare_container_disk({"b", tmp / "cd2", tmp / "state", false, {}});
  REQUIRE_FALSE(b.has_value());
  CHECK(b.error().message().find("backing file") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "state" / "containerdisk-b.raw"));
}

// The qcow2 overlay written for ephemeral volumes, checked by qemu-img (info, check, convert)
// and qemu-io: a clean v3 image whose reads fall through to the raw backing file, which the
// guest's writes never touch.
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "disks/convert.hpp"
#include "disks/qcow2_overlay.hpp"
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

std::string pattern(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7 + i / 4096) & 0xff);
  return s;
}

}  // namespace

TEST_CASE("overlay: qemu-img sees a clean qcow2 v3 over the raw backing file and reads its data") {
  if (!tool("qemu-img") || !tool("qemu-io")) {
    skip("needs qemu-img and qemu-io");
    return;
  }
  TempDir tmp("chlovl");
  // 3 MiB + 1 sector: not a whole number of clusters.
  const std::string data = pattern((3u << 20) + 512);
  write_file(tmp / "pvc.img", data);
  const fs::path ovl = tmp / "ephemeral" / "disk.qcow2";
  fs::create_directories(ovl.parent_path());

  auto o = d::create_overlay({tmp / "pvc.img", ovl});
  REQUIRE_MESSAGE(o, (o ? "" : o.error().message()));
  CHECK(o->created);
  CHECK(o->virtual_size == data.size());
  CHECK((fs::status(ovl).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write));

  auto info = run_command({*tool("qemu-img"), "info", "--output=json", ovl.string()});
  REQUIRE_MESSAGE(info.exit_code == 0, info.output);
  auto j = nlohmann::json::parse(info.output);
  CHECK(j["format"] == "qcow2");
  CHECK(j["virtual-size"] == data.size());
  CHECK(j["backing-filename"] == (tmp / "pvc.img").string());
  CHECK(j["backing-filename-format"] == "raw");
  CHECK(j["cluster-size"] == 65536);
  CHECK(j["format-specific"]["data"]["compat"] == "1.1");
  CHECK(j["format-specific"]["data"]["refcount-bits"] == 16);

  auto check = run_command({*tool("qemu-img"), "check", ovl.string()});
  INFO(check.output);
  CHECK(check.exit_code == 0);
  CHECK(check.output.find("No errors were found") != std::string::npos);

  // Reads fall through to the backing file: qemu-img's view is the backing data.
  auto conv = run_command(
      {*tool("qemu-img"), "convert", "-O", "raw", ovl.string(), (tmp / "q.raw").string()});
  REQUIRE_MESSAGE(conv.exit_code == 0, conv.output);
  CHECK(read_file(tmp / "q.raw") == data);
  // And ours, with the backing chain allowed.
  d::ConvertOptions co;
  co.allow_backing = true;
  co.sync = false;
  auto ours = d::convert_qcow2_to_raw(ovl, tmp / "o.raw", co);
  REQUIRE_MESSAGE(ours, (ours ? "" : ours.error().message()));
  CHECK(read_file(tmp / "o.raw") == data);

  // A guest write lands in the overlay; the backing file stays as it was.
  auto w = run_command({*tool("qemu-io"), "-f", "qcow2", "-c", "write -P 0xab 65536 131072",
                        ovl.string()});
  REQUIRE_MESSAGE(w.exit_code == 0, w.output);
  auto r1 = run_command({*tool("qemu-io"), "-f", "qcow2", "-c", "read -P 0xab 65536 131072",
                         ovl.string()});
  CHECK_MESSAGE(r1.output.find("Pattern verification failed") == std::string::npos, r1.output);
  CHECK(read_file(tmp / "pvc.img") == data);
  auto check2 = run_command({*tool("qemu-img"), "check", ovl.string()});
  CHECK_MESSAGE(check2.output.find("No errors were found") != std::string::npos, check2.output);
  auto cmp = run_command({*tool("qemu-img"), "compare", "-f", "qcow2", "-F", "raw",
                          ovl.string(), (tmp / "pvc.img").string()});
  CHECK(cmp.exit_code == 1);  // differs now, at the written range only
  CHECK(cmp.output.find("offset 65536") != std::string::npos);

  // A second start of the same VMI reuses it, with the guest's writes.
  auto again = d::create_overlay({tmp / "pvc.img", ovl});
  REQUIRE_MESSAGE(again, (again ? "" : again.error().message()));
  CHECK_FALSE(again->created);
  auto r2 = run_command({*tool("qemu-io"), "-f", "qcow2", "-c", "read -P 0xab 65536 131072",
                         ovl.string()});
  CHECK(r2.output.find("Pattern verification failed") == std::string::npos);
}

TEST_CASE("overlay: refused over a qcow2, over another backing file, and never overwrites") {
  TempDir tmp("chlovl");
  write_file(tmp / "a.img", pattern(1 << 20));
  write_file(tmp / "b.img", pattern(2 << 20));
  SUBCASE("existing overlay of another backing file") {
    REQUIRE(d::create_overlay({tmp / "a.img", tmp / "o.qcow2"}));
    const std::string before = read_file(tmp / "o.qcow2");
    auto r = d::create_overlay({tmp / "b.img", tmp / "o.qcow2"});
    REQUIRE_FALSE(r);
    CHECK(r.error().message().find("refusing to overwrite") != std::string::npos);
    CHECK(read_file(tmp / "o.qcow2") == before);
  }
  SUBCASE("existing file that is not an overlay") {
    write_file(tmp / "o.qcow2", "guest data");
    auto r = d::create_overlay({tmp / "a.img", tmp / "o.qcow2"});
    REQUIRE_FALSE(r);
    CHECK(read_file(tmp / "o.qcow2") == "guest data");
  }
  SUBCASE("a qcow2 backing image") {
    if (!tool("qemu-img")) {
      skip("needs qemu-img");
      return;
    }
    run_command({*tool("qemu-img"), "create", "-f", "qcow2", (tmp / "q.qcow2").string(), "1M"});
    auto r = d::create_overlay({tmp / "q.qcow2", tmp / "o.qcow2"});
    REQUIRE_FALSE(r);
    CHECK(r.error().message().find("needs a raw backing image") != std::string::npos);
    CHECK_FALSE(fs::exists(tmp / "o.qcow2"));
  }
  SUBCASE("missing backing file") {
    auto r = d::create_overlay({tmp / "nope.img", tmp / "o.qcow2"});
    REQUIRE_FALSE(r);
    CHECK(r.error().message().find("nope.img") != std::string::npos);
    CHECK_FALSE(fs::exists(tmp / "o.qcow2"));
  }
}

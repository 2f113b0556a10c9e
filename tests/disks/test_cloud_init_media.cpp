// cloud-init media written in-process, checked by the real tools: blkid (label and type),
// fsck.fat -n, xorriso -find, and extraction with isoinfo / osirrox / mtools compared byte for
// byte with what went in.
#include <doctest/doctest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "disks/cloud_init.hpp"
#include "disks/cloud_init_iso9660.hpp"
#include "disks/cloud_init_vfat.hpp"
#include "tests/disks/image_tools.hpp"
#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using chl::test::read_file;
using chl::test::run_command;
using chl::test::skip;
using chl::test::TempDir;
using chl::test::tool;
namespace d = chl::disks;

namespace {

std::string random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  // Make sure the awkward bytes are there whatever the seed.
  if (n >= 4) {
    s[0] = '\0';
    s[1] = static_cast<char>(0xff);
    s[2] = '\n';
    s[3] = '\r';
  }
  return s;
}

bool have(std::initializer_list<const char*> tools) {
  for (const char* t : tools) {
    if (!tool(t)) {
      skip(std::string("needs ") + t);
      return false;
    }
  }
  return true;
}

using chl::test::blkid;
using chl::test::iso_extract;

std::string fat_extract(const fs::path& img, const std::string& path, const fs::path& out) {
  fs::remove(out);
  auto r = run_command({*tool("mcopy"), "-n", "-i", img.string(), "::" + path, out.string()});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return read_file(out);
}

// genisoimage's verifier: directory records, path tables, Rock Ridge entries.
void check_isovfy_clean(const fs::path& img) {
  auto isovfy = tool("isovfy");
  if (!isovfy) return;
  auto r = run_command({*isovfy, "-i", img.string()});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("No errors found") != std::string::npos);
}

void check_fsck_clean(const fs::path& img) {
  auto r = run_command({*tool("fsck.fat"), "-n", "-v", img.string()});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("differ") == std::string::npos);
  CHECK(r.output.find("invalid") == std::string::npos);
  CHECK(r.output.find("Free cluster summary wrong") == std::string::npos);
}

d::CloudInitWriteOptions opts(d::CloudInitFormat f) {
  d::CloudInitWriteOptions o;
  o.format = f;
  o.mtime = 1700000000;
  o.durable = false;
  return o;
}

}  // namespace

TEST_CASE(
    "NoCloud ISO: blkid label and type, Joliet and Rock Ridge names, contents byte-identical") {
  if (!have({"blkid", "isoinfo", "xorriso", "osirrox"})) return;
  TempDir tmp("chlci");
  d::NoCloudData data;
  data.user_data = "#cloud-config\npassword: secret\nchpasswd: { expire: False }\n";
  data.meta_data = d::nocloud_meta_data("6a1a7f12-uid", "testvm");
  data.network_config = "version: 2\nethernets:\n  eth0:\n    dhcp4: true\n";
  auto img = tmp / "nocloud.iso";
  auto st = d::write_nocloud_image(img, data, opts(d::CloudInitFormat::iso9660));
  REQUIRE_MESSAGE(st, (st ? "" : st.error().message()));

  CHECK(blkid(img, "LABEL") == "cidata");
  CHECK(blkid(img, "TYPE") == "iso9660");
  // Padded past the 0x11000 bytes busybox's findfs reads before probing (sparse), and the
  // volume descriptor counts the padding: isoinfo's volume size is the file's size.
  CHECK(fs::file_size(img) >= 0x11000);
  check_isovfy_clean(img);
  auto info = run_command({*tool("isoinfo"), "-d", "-i", img.string()});
  CHECK(info.output.find("Volume size is: " + std::to_string(fs::file_size(img) / 2048)) != std::string::npos);
  INFO(info.output);
  CHECK(info.output.find("Volume id: cidata") != std::string::npos);
  CHECK(info.output.find("Joliet with UCS level 3 found") != std::string::npos);
  CHECK(info.output.find("Rock Ridge signatures version 1 found") != std::string::npos);

  auto find = run_command({*tool("xorriso"), "-indev", img.string(), "-find", "/", "-type", "f"});
  INFO(find.output);
  CHECK(find.exit_code == 0);
  for (const char* n : {"/user-data'", "/meta-data'", "/network-config'"})
    CHECK(find.output.find(n) != std::string::npos);

  // Rock Ridge names (the primary tree) and Joliet names (the supplementary tree).
  CHECK(iso_extract(img, "/user-data", "-R", tmp / "u.rr") == data.user_data);
  CHECK(iso_extract(img, "/meta-data", "-R", tmp / "m.rr") == data.meta_data);
  CHECK(iso_extract(img, "/network-config", "-J", tmp / "n.j") == data.network_config);
  CHECK(iso_extract(img, "/user-data", "-J", tmp / "u.j") == data.user_data);

  // osirrox extracts the whole tree with Rock Ridge names and modes.
  auto out = tmp / "x";
  auto x = run_command({*tool("osirrox"), "-indev", img.string(), "-extract", "/", out.string()});
  REQUIRE_MESSAGE(x.exit_code == 0, x.output);
  CHECK(read_file(out / "user-data") == data.user_data);
  CHECK(read_file(out / "meta-data") == data.meta_data);
  CHECK(read_file(out / "network-config") == data.network_config);
  CHECK((fs::status(out / "user-data").permissions() & fs::perms::owner_read) != fs::perms::none);
}

TEST_CASE("ISO: 1 MiB+ binary user-data and an empty file survive byte for byte") {
  if (!have({"blkid", "isoinfo", "osirrox"})) return;
  TempDir tmp("chlci");
  std::vector<d::MediaFile> files = {{"user-data", random_bytes((1u << 20) + 12345, 7)},
                                     {"meta-data", ""},
                                     {"vendor-data", random_bytes(2048, 9)}};  // exactly one sector
  d::Iso9660Options o;
  o.volume_id = "cidata";
  o.mtime = 1700000000;
  auto plan = d::plan_iso9660(files, o);
  REQUIRE_MESSAGE(plan, (plan ? "" : plan.error().message()));
  auto img = tmp / "big.iso";
  REQUIRE(d::write_image_file(img, *plan, {false, 0644}));
  CHECK(blkid(img, "TYPE") == "iso9660");
  check_isovfy_clean(img);
  auto out = tmp / "x";
  auto x = run_command({*tool("osirrox"), "-indev", img.string(), "-extract", "/", out.string()});
  REQUIRE_MESSAGE(x.exit_code == 0, x.output);
  CHECK(read_file(out / "user-data") == files[0].data);
  CHECK(fs::file_size(out / "meta-data") == 0);
  CHECK(read_file(out / "vendor-data") == files[2].data);
  CHECK(iso_extract(img, "/user-data", "-J", tmp / "u.j") == files[0].data);
}

TEST_CASE(
    "ISO: hundreds of entries, directories spanning sectors, clashing 8.3 names, deep nesting") {
  if (!have({"osirrox", "isoinfo"})) return;
  TempDir tmp("chlci");
  std::vector<d::MediaFile> files;
  // The same first eight characters everywhere: the level-1 names must be made unique.
  for (int i = 0; i < 300; ++i)
    files.push_back(
        {"openstack/latest/network_data_" + std::to_string(i) + ".json", "n" + std::to_string(i)});
  for (int i = 0; i < 40; ++i)
    files.push_back({"dir" + std::to_string(i) + "/x", std::to_string(i)});
  files.push_back({"a/b/c/d/e/f/g/deep-file", "deep"});
  d::Iso9660Options o;
  o.volume_id = "config-2";
  o.mtime = 1700000000;
  auto plan = d::plan_iso9660(files, o);
  REQUIRE_MESSAGE(plan, (plan ? "" : plan.error().message()));
  auto img = tmp / "many.iso";
  REQUIRE(d::write_image_file(img, *plan, {false, 0644}));
  check_isovfy_clean(img);
  auto out = tmp / "x";
  auto x = run_command({*tool("osirrox"), "-indev", img.string(), "-extract", "/", out.string()});
  REQUIRE_MESSAGE(x.exit_code == 0, x.output);
  for (const auto& f : files) {
    CAPTURE(f.path);
    CHECK(read_file(out / f.path) == f.data);
  }
  CHECK(iso_extract(img, "/openstack/latest/network_data_299.json", "-J", tmp / "j") == "n299");
  CHECK(iso_extract(img, "/a/b/c/d/e/f/g/deep-file", "-R", tmp / "r") == "deep");
}

TEST_CASE("ConfigDrive ISO: label config-2 and openstack/latest files") {
  if (!have({"blkid", "isoinfo", "osirrox", "xorriso"})) return;
  TempDir tmp("chlci");
  d::ConfigDriveData data;
  data.user_data = "#!/bin/sh\necho hello\n";
  data.meta_data_json =
      d::config_drive_meta_data("vm1", "default", "5d307ca9-b3ef-428c-8861-06e72d69f223", "vm1");
  data.network_data_json = R"({"links":[],"networks":[],"services":[]})";
  auto img = tmp / "cd.iso";
  REQUIRE(d::write_config_drive_image(img, data, opts(d::CloudInitFormat::iso9660)));
  CHECK(blkid(img, "LABEL") == "config-2");
  CHECK(blkid(img, "TYPE") == "iso9660");
  check_isovfy_clean(img);
  auto find = run_command({*tool("xorriso"), "-indev", img.string(), "-find", "/", "-type", "f"});
  INFO(find.output);
  CHECK(find.output.find("/openstack/latest/meta_data.json'") != std::string::npos);
  auto out = tmp / "x";
  auto x = run_command({*tool("osirrox"), "-indev", img.string(), "-extract", "/", out.string()});
  REQUIRE_MESSAGE(x.exit_code == 0, x.output);
  CHECK(read_file(out / "openstack/latest/user_data") == data.user_data);
  CHECK(read_file(out / "openstack/latest/meta_data.json") == data.meta_data_json);
  CHECK(read_file(out / "openstack/latest/network_data.json") == data.network_data_json);
  CHECK(iso_extract(img, "/openstack/latest/user_data", "-J", tmp / "u.j") == data.user_data);
}

TEST_CASE(
    "NoCloud vfat: blkid label and type, fsck.fat clean, long names, contents byte-identical") {
  if (!have({"blkid", "fsck.fat", "mcopy", "mdir"})) return;
  TempDir tmp("chlci");
  d::NoCloudData data;
  data.user_data = "#cloud-config\nruncmd:\n  - echo hi\n";
  data.meta_data = d::nocloud_meta_data("uid-1", "vm");
  data.network_config = "version: 2\n";
  auto img = tmp / "nocloud.img";
  auto st = d::write_nocloud_image(img, data, opts(d::CloudInitFormat::vfat));
  REQUIRE_MESSAGE(st, (st ? "" : st.error().message()));
  CHECK(blkid(img, "LABEL") == "cidata");
  CHECK(blkid(img, "TYPE") == "vfat");
  check_fsck_clean(img);
  auto dir = run_command({*tool("mdir"), "-i", img.string(), "::"});
  INFO(dir.output);
  for (const char* n : {"user-data", "meta-data", "network-config"})
    CHECK(dir.output.find(n) != std::string::npos);
  CHECK(fat_extract(img, "user-data", tmp / "u") == data.user_data);
  CHECK(fat_extract(img, "meta-data", tmp / "m") == data.meta_data);
  CHECK(fat_extract(img, "network-config", tmp / "n") == data.network_config);
}

TEST_CASE("vfat: 16 MiB binary user-data (FAT16) extracts byte-identical and fsck is clean") {
  if (!have({"blkid", "fsck.fat", "mcopy"})) return;
  TempDir tmp("chlci");
  d::NoCloudData data;
  data.user_data = random_bytes(d::kMaxUserDataBytes, 3);
  data.meta_data = d::nocloud_meta_data("uid-2", "big");
  auto img = tmp / "big.img";
  auto st = d::write_nocloud_image(img, data, opts(d::CloudInitFormat::vfat));
  REQUIRE_MESSAGE(st, (st ? "" : st.error().message()));
  CHECK(blkid(img, "TYPE") == "vfat");
  auto info = run_command({*tool("fsck.fat"), "-n", "-v", img.string()});
  CHECK(info.output.find("16 bit entries") != std::string::npos);
  check_fsck_clean(img);
  CHECK(fat_extract(img, "user-data", tmp / "u") == data.user_data);
}

TEST_CASE("vfat: many long and non-ASCII names in subdirectories, bigger clusters, empty files") {
  if (!have({"fsck.fat", "mcopy"})) return;
  TempDir tmp("chlci");
  std::vector<d::MediaFile> files;
  for (int i = 0; i < 120; ++i)
    files.push_back(
        {"openstack/latest/a-rather-long-file-name-number-" + std::to_string(i) + ".json",
         "content " + std::to_string(i)});
  files.push_back(
      {"openstack/content/0000", random_bytes(40u << 20, 5)});  // 40 MiB: 2 sectors a cluster
  files.push_back({"caf\xc3\xa9.txt", "unicode"});
  files.push_back({"EMPTY", ""});
  files.push_back({"UPPER.TXT", "plain 8.3"});
  d::VfatOptions o;
  o.label = "config-2";
  o.mtime = 1700000000;
  auto plan = d::plan_vfat(files, o);
  REQUIRE_MESSAGE(plan, (plan ? "" : plan.error().message()));
  auto img = tmp / "many.img";
  REQUIRE(d::write_image_file(img, *plan, {false, 0644}));
  check_fsck_clean(img);
  CHECK(blkid(img, "LABEL") == "config-2");
  CHECK(fat_extract(img, "openstack/latest/a-rather-long-file-name-number-119.json", tmp / "a") ==
        "content 119");
  CHECK(fat_extract(img, "openstack/latest/a-rather-long-file-name-number-0.json", tmp / "b") ==
        "content 0");
  CHECK(fat_extract(img, "openstack/content/0000", tmp / "c") == files[120].data);
  CHECK(fat_extract(img, "caf\xc3\xa9.txt", tmp / "d") == "unicode");
  CHECK(fat_extract(img, "EMPTY", tmp / "e").empty());
  CHECK(fat_extract(img, "UPPER.TXT", tmp / "f") == "plain 8.3");
}

TEST_CASE("ConfigDrive vfat: label config-2 and openstack/latest files") {
  if (!have({"blkid", "fsck.fat", "mcopy"})) return;
  TempDir tmp("chlci");
  d::ConfigDriveData data;
  data.user_data = "#cloud-config\n";
  data.meta_data_json = d::config_drive_meta_data("vm1", "ns", "u-u-i-d", "vm1");
  auto img = tmp / "cd.img";
  REQUIRE(d::write_config_drive_image(img, data, opts(d::CloudInitFormat::vfat)));
  CHECK(blkid(img, "LABEL") == "config-2");
  CHECK(blkid(img, "TYPE") == "vfat");
  check_fsck_clean(img);
  CHECK(fat_extract(img, "openstack/latest/user_data", tmp / "u") == data.user_data);
  CHECK(fat_extract(img, "openstack/latest/meta_data.json", tmp / "m") == data.meta_data_json);
}

TEST_CASE("user-data over 16 MiB is refused with a clear error and leaves no file") {
  for (auto f : {d::CloudInitFormat::iso9660, d::CloudInitFormat::vfat}) {
    TempDir tmp("chlci");
    d::NoCloudData data;
    data.user_data = std::string(d::kMaxUserDataBytes + 1, 'x');
    data.meta_data = "{}";
    auto img = tmp / "too-big.img";
    auto st = d::write_nocloud_image(img, data, opts(f));
    REQUIRE_FALSE(st);
    CHECK(st.error().message().find("user-data") != std::string::npos);
    CHECK(st.error().message().find("16777216") != std::string::npos);
    CHECK(fs::is_empty(tmp.path()));
  }
}

TEST_CASE("an existing output is never overwritten, and nothing else is left behind") {
  for (auto f : {d::CloudInitFormat::iso9660, d::CloudInitFormat::vfat}) {
    TempDir tmp("chlci");
    auto img = tmp / "out.img";
    chl::test::write_file(img, "precious");
    d::NoCloudData data{"#cloud-config\n", "{}", ""};
    auto st = d::write_nocloud_image(img, data, opts(f));
    REQUIRE_FALSE(st);
    CHECK(st.error().code == std::errc::file_exists);
    CHECK(st.error().message().find("exists") != std::string::npos);
    CHECK(read_file(img) == "precious");
    CHECK(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()) == 1);
  }
}

TEST_CASE("an output in a missing directory fails cleanly, durable writes succeed") {
  TempDir tmp("chlci");
  d::NoCloudData data{"#cloud-config\n", "{}", ""};
  auto st = d::write_nocloud_image(tmp / "nope" / "x.iso", data, opts(d::CloudInitFormat::iso9660));
  CHECK_FALSE(st);
  CHECK(fs::is_empty(tmp.path()));
  auto o = opts(d::CloudInitFormat::vfat);
  o.durable = true;
  REQUIRE(d::write_nocloud_image(tmp / "durable.img", data, o));
  CHECK(fs::file_size(tmp / "durable.img") > 0);
}

TEST_CASE("bad media paths are refused") {
  d::Iso9660Options o;
  o.volume_id = "cidata";
  CHECK_FALSE(d::plan_iso9660({{"../etc/passwd", "x"}}, o));
  CHECK_FALSE(d::plan_iso9660({{"/abs", "x"}}, o));
  CHECK_FALSE(d::plan_iso9660({{"a", "x"}, {"a", "y"}}, o));
  CHECK_FALSE(d::plan_iso9660({{"a", "x"}, {"a/b", "y"}}, o));
  d::VfatOptions v;
  v.label = "cidata";
  CHECK_FALSE(d::plan_vfat({{"a//b", "x"}}, v));
  v.label = "a-label-too-long";
  CHECK_FALSE(d::plan_vfat({{"a", "x"}}, v));
}

TEST_CASE("format names parse, the default is ISO 9660") {
  CHECK(d::parse_cloud_init_format("iso").value() == d::CloudInitFormat::iso9660);
  CHECK(d::parse_cloud_init_format("vfat").value() == d::CloudInitFormat::vfat);
  CHECK_FALSE(d::parse_cloud_init_format("ext4"));
  CHECK(d::kDefaultCloudInitFormat == d::CloudInitFormat::iso9660);
}

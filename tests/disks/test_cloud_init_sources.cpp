// Where cloud-init data comes from: inline, base64, or secret files mounted the way KubeVirt
// mounts them; KubeVirt's precedence; the size caps; the meta-data KubeVirt writes.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "disks/cloud_init.hpp"
#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
namespace d = chl::disks;
using chl::test::TempDir;
using chl::test::write_file;

TEST_CASE("base64: standard alphabet, whitespace ignored, padding optional, garbage refused") {
  CHECK(d::decode_base64("I2Nsb3VkLWNvbmZpZwo=").value() == "#cloud-config\n");
  CHECK(d::decode_base64("I2Nsb3Vk\nLWNvbmZp\r\nZwo=").value() == "#cloud-config\n");
  CHECK(d::decode_base64("I2Nsb3VkLWNvbmZpZwo").value() == "#cloud-config\n");
  CHECK(d::decode_base64("").value().empty());
  CHECK(d::decode_base64("AP8A/w==").value() == std::string("\x00\xff\x00\xff", 4));
  auto bad = d::decode_base64("I2Nsb3*VkLWNv");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message().find("offset 6") != std::string::npos);
  CHECK_FALSE(d::decode_base64("QQ=A"));   // data after padding
  CHECK_FALSE(d::decode_base64("Q"));      // truncated group
  CHECK_FALSE(d::decode_base64("QQ==="));  // too much padding
}

TEST_CASE(
    "inline data wins over base64, base64 is decoded, one of user or network data is needed") {
  d::CloudInitSource s;
  s.user_data = "#cloud-config\n";
  s.user_data_base64 = "aWdub3JlZA==";
  auto p = d::resolve_cloud_init_source(s);
  REQUIRE(p);
  CHECK(p->user_data == "#cloud-config\n");
  CHECK(p->network_data.empty());

  d::CloudInitSource b;
  b.user_data_base64 = "I2Nsb3VkLWNvbmZpZwo=";
  b.network_data_base64 = "dmVyc2lvbjogMgo=";
  p = d::resolve_cloud_init_source(b);
  REQUIRE(p);
  CHECK(p->user_data == "#cloud-config\n");
  CHECK(p->network_data == "version: 2\n");

  d::CloudInitSource n;
  n.network_data = "version: 2\n";
  CHECK(d::resolve_cloud_init_source(n));

  auto none = d::resolve_cloud_init_source({});
  REQUIRE_FALSE(none);
  CHECK(none.error().message().find("userData") != std::string::npos);

  d::CloudInitSource badb64;
  badb64.user_data_base64 = "!!!";
  auto e = d::resolve_cloud_init_source(badb64);
  REQUIRE_FALSE(e);
  CHECK(e.error().message().find("userDataBase64") != std::string::npos);
}

TEST_CASE(
    "secrets are read from the files KubeVirt mounts: userdata or userData, networkdata or "
    "networkData") {
  TempDir tmp("chlci");
  auto dir = tmp / "cloudinitdisk";
  fs::create_directories(dir);
  write_file(dir / "userData", "#cloud-config\nfrom: secret\n");
  write_file(dir / "networkdata", "version: 2\n");
  d::CloudInitSource s;
  s.user_data = "inline loses to the secret";
  s.user_data_secret_ref = true;
  s.network_data_secret_ref = true;
  s.secret_dir = dir;
  auto p = d::resolve_cloud_init_source(s);
  REQUIRE_MESSAGE(p, (p ? "" : p.error().message()));
  CHECK(p->user_data == "#cloud-config\nfrom: secret\n");
  CHECK(p->network_data == "version: 2\n");

  write_file(dir / "userdata", "lower case first");
  p = d::resolve_cloud_init_source(s);
  REQUIRE(p);
  CHECK(p->user_data == "lower case first");

  // A Kubernetes secret volume: keys are symlinks into ..data/.
  auto k8s = tmp / "k8s";
  fs::create_directories(k8s / "..data");
  write_file(k8s / "..data" / "userdata", "via symlink");
  fs::create_symlink("..data/userdata", k8s / "userdata");
  d::CloudInitSource ks;
  ks.user_data_secret_ref = true;
  ks.secret_dir = k8s;
  CHECK(d::resolve_cloud_init_source(ks).value().user_data == "via symlink");
}

TEST_CASE("a referenced secret that is not mounted is an error naming the paths tried") {
  TempDir tmp("chlci");
  d::CloudInitSource s;
  s.user_data_secret_ref = true;
  s.secret_dir = tmp / "nothing-here";
  auto p = d::resolve_cloud_init_source(s);
  REQUIRE_FALSE(p);
  const auto msg = p.error().message();
  CHECK(msg.find("user data secret") != std::string::npos);
  CHECK(msg.find((tmp / "nothing-here" / "userdata").string()) != std::string::npos);
  CHECK(msg.find((tmp / "nothing-here" / "userData").string()) != std::string::npos);
}

TEST_CASE(
    "size caps: 16 MiB of user data is fine, one byte more is a clear error, before and after "
    "base64") {
  d::CloudInitSource s;
  s.user_data = std::string(d::kMaxUserDataBytes, 'a');
  CHECK(d::resolve_cloud_init_source(s));
  s.user_data.push_back('a');
  auto e = d::resolve_cloud_init_source(s);
  REQUIRE_FALSE(e);
  CHECK(e.error().message().find("userData is 16777217 bytes") != std::string::npos);

  d::CloudInitSource b;
  b.user_data_base64 = std::string((d::kMaxUserDataBytes / 3 + 1) * 4, 'Q');
  auto eb = d::resolve_cloud_init_source(b);
  REQUIRE_FALSE(eb);
  CHECK(eb.error().message().find("userDataBase64") != std::string::npos);

  TempDir tmp("chlci");
  write_file(tmp / "userdata", std::string(d::kMaxUserDataBytes + 1, 'z'));
  d::CloudInitSource sec;
  sec.user_data_secret_ref = true;
  sec.secret_dir = tmp.path();
  auto es = d::resolve_cloud_init_source(sec);
  REQUIRE_FALSE(es);
  CHECK(es.error().message().find("larger than the limit") != std::string::npos);
}

TEST_CASE("meta-data as KubeVirt writes it, hostname and instance id rules") {
  CHECK(d::nocloud_meta_data("1234-uid", "myvm") ==
        R"({"instance-id":"1234-uid","local-hostname":"myvm"})");
  CHECK(d::nocloud_meta_data("a\"b", "") == R"({"instance-id":"a\"b"})");
  CHECK(d::config_drive_meta_data("vm", "ns", "u-1", "vm") ==
        R"({"instance_id":"vm.ns","hostname":"vm","uuid":"u-1"})");
  CHECK(d::config_drive_meta_data("vm.ns", "", "", "") == R"({"instance_id":"vm.ns"})");
  CHECK(d::kubevirt_hostname("web.example") == "web");
  CHECK(d::kubevirt_hostname(std::string(80, 'a')) == std::string(63, 'a'));
  CHECK(d::kubevirt_hostname("web", "custom-host") == "custom-host");
  CHECK(d::kubevirt_instance_id("fw-uuid", "vmi-uid") == "fw-uuid");
  CHECK(d::kubevirt_instance_id("", "vmi-uid") == "vmi-uid");
}

// `ch-launcher cloud-init` and `ch-launcher firmware` end to end: the real binary on VMI files,
// the media checked with the real tools.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using chl::test::launcher_binary;
using chl::test::read_file;
using chl::test::run_command;
using chl::test::skip;
using chl::test::TempDir;
using chl::test::tool;
using chl::test::write_file;

namespace {

const char* kVmi = R"(apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: web.example
  namespace: prod
  uid: 0c3a6d1e-1111-2222-3333-444455556666
spec:
  domain:
    firmware:
      uuid: 5d307ca9-b3ef-428c-8861-06e72d69f223
    devices:
      disks:
      - name: cloudinitdisk
        disk: {bus: virtio}
    resources:
      requests:
        memory: 128Mi
  volumes:
  - name: cloudinitdisk
    cloudInitNoCloud:
      userDataBase64: I2Nsb3VkLWNvbmZpZwpwYXNzd29yZDogeAo=
      networkDataSecretRef:
        name: netsecret
)";

std::string extract_iso(const fs::path& img, const std::string& path, const fs::path& out) {
  auto r = run_command(
      {"/bin/sh", "-c",
       "isoinfo -R -i '" + img.string() + "' -x '" + path + "' > '" + out.string() + "'"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return read_file(out);
}

}  // namespace

TEST_CASE(
    "cloud-init subcommand: NoCloud ISO from a VMI with base64 user data and a network secret") {
  if (!tool("isoinfo") || !tool("blkid")) {
    skip("needs isoinfo and blkid");
    return;
  }
  TempDir tmp("chlcli");
  write_file(tmp / "vmi.yaml", kVmi);
  fs::create_directories(tmp / "secrets" / "cloudinitdisk");
  write_file(tmp / "secrets" / "cloudinitdisk" / "networkData", "version: 2\n");
  auto img = tmp / "ci.iso";
  auto r = run_command({launcher_binary(), "cloud-init", "--vmi", (tmp / "vmi.yaml").string(),
                        "--out", img.string(), "--secret-dir", (tmp / "secrets").string()});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("NoCloud") != std::string::npos);
  auto label = run_command({*tool("blkid"), "-p", "-o", "value", "-s", "LABEL", img.string()});
  CHECK(label.output == "cidata\n");
  CHECK(extract_iso(img, "/user-data", tmp / "u") == "#cloud-config\npassword: x\n");
  CHECK(extract_iso(img, "/network-config", tmp / "n") == "version: 2\n");
  CHECK(extract_iso(img, "/meta-data", tmp / "m") ==
        R"({"instance-id":"5d307ca9-b3ef-428c-8861-06e72d69f223","local-hostname":"web"})");

  // Again onto the same file: refused, file untouched.
  auto before = read_file(img);
  auto again = run_command({launcher_binary(), "cloud-init", "--vmi", (tmp / "vmi.yaml").string(),
                            "--out", img.string(), "--secret-dir", (tmp / "secrets").string()});
  CHECK(again.exit_code != 0);
  CHECK(again.output.find("exists") != std::string::npos);
  CHECK(read_file(img) == before);
}

TEST_CASE("cloud-init subcommand: vfat format, missing secret, unknown volume, bad format") {
  TempDir tmp("chlcli");
  write_file(tmp / "vmi.yaml", kVmi);
  auto missing =
      run_command({launcher_binary(), "cloud-init", "--vmi", (tmp / "vmi.yaml").string(), "--out",
                   (tmp / "a.img").string(), "--secret-dir", (tmp / "none").string()});
  CHECK(missing.exit_code != 0);
  CHECK(missing.output.find("networkdata") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "a.img"));

  auto unknown = run_command({launcher_binary(), "cloud-init", "--vmi", (tmp / "vmi.yaml").string(),
                              "--volume", "other", "--out", (tmp / "b.img").string()});
  CHECK(unknown.exit_code != 0);
  CHECK(unknown.output.find("cloudinitdisk") != std::string::npos);

  auto badfmt = run_command({launcher_binary(), "cloud-init", "--vmi", (tmp / "vmi.yaml").string(),
                             "--out", (tmp / "c.img").string(), "--format", "ext4"});
  CHECK(badfmt.exit_code == 2);

  if (!tool("mtype")) {
    skip("needs mtools");
    return;
  }
  fs::create_directories(tmp / "s" / "cloudinitdisk");
  write_file(tmp / "s" / "cloudinitdisk" / "networkdata", "version: 2\n");
  auto ok = run_command({launcher_binary(), "cloud-init", "--vmi", (tmp / "vmi.yaml").string(),
                         "--out", (tmp / "d.img").string(), "--format", "vfat", "--secret-dir",
                         (tmp / "s").string()});
  INFO(ok.output);
  REQUIRE(ok.exit_code == 0);
  auto t = run_command({*tool("mtype"), "-i", (tmp / "d.img").string(), "::user-data"});
  CHECK(t.output == "#cloud-config\npassword: x\n");
}

TEST_CASE(
    "firmware subcommand: prints the firmware found, or names what is missing, and kernel boot") {
  TempDir tmp("chlcli");
  write_file(tmp / "vmi.yaml", kVmi);
  auto miss = run_command({launcher_binary(), "firmware", "--vmi", (tmp / "vmi.yaml").string(),
                           "--firmware-dir", (tmp / "fw").string()});
  CHECK(miss.exit_code != 0);
  CHECK(miss.output.find((tmp / "fw" / "hypervisor-fw").string()) != std::string::npos);

  // A plausible hypervisor-fw: an ELF64 with the PVH note.
  std::string elf(64 << 10, '\0');
  const unsigned char hdr[] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
  for (std::size_t i = 0; i < sizeof hdr; ++i) elf[i] = static_cast<char>(hdr[i]);
  elf[32] = 64;        // e_phoff
  elf[54] = 56;        // e_phentsize
  elf[56] = 1;         // e_phnum
  elf[64] = 4;         // PT_NOTE
  elf[64 + 9] = 0x02;  // p_offset 0x200
  elf[64 + 32] = 20;   // p_filesz
  const unsigned char note[] = {4, 0, 0,   0,   4,   0, 0, 0, 18,   0,
                                0, 0, 'X', 'e', 'n', 0, 0, 0, 0x10, 0};
  for (std::size_t i = 0; i < sizeof note; ++i) elf[0x200 + i] = static_cast<char>(note[i]);
  fs::create_directories(tmp / "fw");
  write_file(tmp / "fw" / "hypervisor-fw", elf);
  auto ok = run_command({launcher_binary(), "firmware", "--vmi", (tmp / "vmi.yaml").string(),
                         "--firmware-dir", (tmp / "fw").string()});
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  CHECK(ok.output.find("firmware: " + (tmp / "fw" / "hypervisor-fw").string()) !=
        std::string::npos);

  std::string kvmi = kVmi;
  kvmi.replace(kvmi.find("      uuid:"), 0,
               "      kernelBoot:\n        kernelArgs: console=ttyS0\n        container:\n"
               "          image: example/kernel\n          kernelPath: /boot/vmlinux\n");
  write_file(tmp / "kvmi.yaml", kvmi);
  fs::create_directories(tmp / "kb" / "boot");
  write_file(tmp / "kb" / "boot" / "vmlinux", elf);
  auto kb = run_command({launcher_binary(), "firmware", "--vmi", (tmp / "kvmi.yaml").string(),
                         "--volume", "kernel-boot=" + (tmp / "kb").string()});
  INFO(kb.output);
  CHECK(kb.exit_code == 0);
  CHECK(kb.output.find("kernel: " + fs::canonical(tmp / "kb" / "boot" / "vmlinux").string()) !=
        std::string::npos);
  CHECK(kb.output.find("cmdline: console=ttyS0") != std::string::npos);
  auto nodir = run_command({launcher_binary(), "firmware", "--vmi", (tmp / "kvmi.yaml").string()});
  CHECK(nodir.exit_code == 2);
  CHECK(nodir.output.find("kernel-boot=DIR") != std::string::npos);
}

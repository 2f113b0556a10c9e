// A real kernel reads the disks ch-launcher writes: the Linux test guest (Debian's cloud kernel +
// busybox initramfs, tests/guests/linux/init) under QEMU software emulation finds the cloud-init
// media by label (util-linux blkid -tLABEL=cidata, as cloud-init does, and busybox findfs,
// which skips disks under 68 KiB unless they are FAT: see check_found), mounts them and prints
// every file; the output must be exactly what we wrote. The media are attached as virtio-blk raw
// disks, as Cloud Hypervisor presents them (it has no CD-ROM). Also a raw disk made by our qcow2 ->
// raw conversion, holding an ext4 filesystem, is mounted and read. And the guest's console: typed
// lines answered, typed poweroff ends QEMU; the uncompressed vmlinux boots through PVH.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/child_process.hpp"
#include "common/unique_fd.hpp"
#include "disks/cloud_init.hpp"
#include "tests/support/linux_guest.hpp"
#include "tests/support/serial_child.hpp"
#include "tests/support/test_support.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace disks = chl::disks;
using chl::test::run_command;
using chl::test::TempDir;

namespace {

// TCG on a loaded 2-core machine: the guest needs ~4 s alone, far more when the other tests
// build and run; generous, never a timing assertion (and below scripts/test.sh's 300 s per test,
// so a hang is reported with the console output rather than killed silently).
constexpr auto kBootTimeout = 240s;

// Guest contents with a non-ASCII line, and names beyond 8.3 in nested directories.
const std::string kUserData =
    "#cloud-config\n"
    "# h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\n"
    "password: passw0rd\n"
    "chpasswd: { expire: False }\n"
    "runcmd:\n"
    "  - [ sh, -c, 'echo \"ran\" > /tmp/ran' ]\n";
const std::string kNetworkConfig = "version: 2\nethernets:\n  eth0:\n    dhcp4: true\n";
const std::string kLongName =
    "nested/deeper/still-deeper/a-file-name-well-beyond-eight-dot-three-h\xc3\xa9llo.txt";
const std::string kLongData = "a long nested path\nline two \xc3\xa9\n";

// QEMU running the Linux guest, its serial console on stdin/stdout.
class GuestVm : public chl::test::SerialChild {
 public:
  bool start(const chl::test::LinuxGuest& g, const std::string& cmdline,
             const std::vector<fs::path>& disks, bool use_vmlinux = false) {
    auto bin = chl::test::tool("qemu-system-x86_64");
    if (!bin) return false;
    std::vector<std::string> argv = {*bin, "-nodefaults", "-no-user-config", "-M", "q35", "-m", "256", "-display",
                                     "none", "-serial", "stdio", "-accel", "tcg", "-no-reboot", "-kernel",
                                     (use_vmlinux ? g.vmlinux : g.kernel).string(), "-initrd", g.initramfs.string(),
                                     "-append", std::string(chl::test::kLinuxGuestCmdline) + " " + cmdline};
    int i = 0;
    for (const auto& d : disks) {
      const std::string id = "d" + std::to_string(i++);
      argv.insert(argv.end(), {"-drive", "file=" + d.string() + ",format=raw,if=none,id=" + id + ",readonly=on",
                               "-device", "virtio-blk-pci,drive=" + id});
    }
    return SerialChild::start(std::move(argv));
  }
};

std::optional<chl::test::LinuxGuest> guest_or_skip() {
  if (!chl::test::tool("qemu-system-x86_64")) {
    chl::test::skip("qemu-system-x86_64 not installed (scripts/setup.sh installs qemu-system-x86)");
    return std::nullopt;
  }
  std::string why;
  auto g = chl::test::find_linux_guest(&why);
  if (!g) chl::test::skip(why);
  return g;
}

std::string sha256(const TempDir& tmp, const std::string& data) {
  const fs::path f = tmp / "sha256-input";
  chl::test::write_file(f, data);
  auto r = run_command({"sha256sum", f.string()});
  REQUIRE(r.exit_code == 0);
  return r.output.substr(0, 64);
}

// Boot the guest with `disks`, power off after printing; returns the console text (LF only).
std::string boot_and_print(const chl::test::LinuxGuest& g, const std::vector<fs::path>& disks,
                           const std::string& extra_cmdline = {}) {
  GuestVm vm;
  REQUIRE(vm.start(g, "poweroff " + extra_cmdline, disks));
  auto st = vm.wait_exit(kBootTimeout);
  INFO("console: " << vm.text());
  REQUIRE(st.has_value());
  CHECK(st->success());
  CHECK(vm.text().find("chl-guest: powering off") != std::string::npos);
  return vm.text();
}

// The section the guest printed for `label`, from "begin" to "end", or "" when absent.
std::string label_section(const std::string& text, const std::string& label) {
  const std::string begin = "----- chl-guest: begin LABEL=" + label + " -----\n";
  const std::string end = "----- chl-guest: end LABEL=" + label + " -----\n";
  auto b = text.find(begin);
  if (b == std::string::npos) return {};
  auto e = text.find(end, b);
  if (e == std::string::npos) return {};
  return text.substr(b + begin.size(), e - b - begin.size());
}

// The exact section the guest prints for `files` (sorted by path, as the guest's `sort` does).
std::string expected_section(const TempDir& tmp, const std::map<std::string, std::string>& files) {
  std::string s;
  for (const auto& [path, data] : files) {
    s += "----- chl-guest: file " + path + " (" + std::to_string(data.size()) + " bytes, sha256 " +
         sha256(tmp, data) + ") -----\n" + data + "\n----- chl-guest: end file " + path +
         " -----\n";
  }
  return s;
}

// Write `files` labelled `label` in `format` with the disks library (any file list, so that
// long nested names can be added beside the standard ones).
void write_media(const fs::path& out, const std::map<std::string, std::string>& files,
                 std::string_view label, disks::CloudInitFormat format) {
  std::vector<disks::MediaFile> media;
  for (const auto& [path, data] : files) media.push_back({path, data});
  auto plan = disks::plan_cloud_init_media(media, label, format, 1700000000);
  REQUIRE_MESSAGE(plan.has_value(), plan.error().message());
  auto st = disks::write_image_file(out, *plan);
  REQUIRE_MESSAGE(st.has_value(), st.error().message());
}

// busybox's volume_id (findfs) reads the first 0x11000 bytes of a disk before it probes for
// ISO 9660 or ext*, and skips the disk when that read comes up short: an image under 68 KiB is
// found only by util-linux blkid (what cloud-init runs). FAT is probed from the first sector.
constexpr std::uintmax_t kBusyboxProbeBytes = 0x11000;

// The guest found the disk `img` labelled `label` as /dev/vda: blkid always (cloud-init's way),
// busybox findfs when its probe can see it; and mounted it as `fstype`.
void check_found(const std::string& text, const std::string& label, const std::string& fstype,
                 const fs::path& img) {
  const bool findfs_sees_it = fstype == "vfat" || fs::file_size(img) >= kBusyboxProbeBytes;
  INFO("image " << img << ": " << fs::file_size(img) << " bytes");
  CHECK(text.find("chl-guest: LABEL=" + label + ": findfs " +
                  (findfs_sees_it ? "/dev/vda" : "none") + ", blkid /dev/vda\n") !=
        std::string::npos);
  CHECK(text.find("chl-guest: LABEL=" + label + " found on /dev/vda (" + fstype + ")\n") !=
        std::string::npos);
}

// NoCloud in `format`: the files write_nocloud_image() makes or, with `long_names`, the same plus
// a long nested name through the generic media writer.
void nocloud_case(disks::CloudInitFormat format, const std::string& fstype, bool long_names) {
  auto g = guest_or_skip();
  if (!g) return;
  TempDir tmp("chllg");
  disks::NoCloudData d;
  d.user_data = kUserData;
  d.meta_data = disks::nocloud_meta_data("5d307ca9-b3ef-428c-8861-06e72d69f223", "web");
  d.network_config = kNetworkConfig;
  std::map<std::string, std::string> expect = {
      {"user-data", d.user_data}, {"meta-data", d.meta_data}, {"network-config", d.network_config}};
  const fs::path img = tmp / "nocloud.img";
  if (long_names) {
    expect[kLongName] = kLongData;
    write_media(img, expect, disks::kNoCloudLabel, format);
  } else {
    disks::CloudInitWriteOptions wo;
    wo.format = format;
    auto st = disks::write_nocloud_image(img, d, wo);
    REQUIRE_MESSAGE(st.has_value(), st.error().message());
  }
  const std::string text = boot_and_print(*g, {img});
  INFO("console: " << text);
  check_found(text, "cidata", fstype, img);
  CHECK(label_section(text, "cidata") == expected_section(tmp, expect));
  CHECK(text.find("chl-guest: LABEL=config-2 not found") != std::string::npos);
}

void config_drive_case(disks::CloudInitFormat format, const std::string& fstype) {
  auto g = guest_or_skip();
  if (!g) return;
  TempDir tmp("chllg");
  disks::ConfigDriveData d;
  d.user_data = kUserData;
  d.meta_data_json = disks::config_drive_meta_data("web.example", "prod",
                                                   "5d307ca9-b3ef-428c-8861-06e72d69f223", "web");
  d.network_data_json = R"({"links":[],"networks":[],"services":[]})";
  const fs::path img = tmp / "configdrive.img";
  disks::CloudInitWriteOptions wo;
  wo.format = format;
  auto st = disks::write_config_drive_image(img, d, wo);
  REQUIRE_MESSAGE(st.has_value(), st.error().message());
  const std::map<std::string, std::string> expect = {
      {"openstack/latest/meta_data.json", d.meta_data_json},
      {"openstack/latest/network_data.json", d.network_data_json},
      {"openstack/latest/user_data", d.user_data}};

  const std::string text = boot_and_print(*g, {img});
  INFO("console: " << text);
  check_found(text, "config-2", fstype, img);
  CHECK(label_section(text, "config-2") == expected_section(tmp, expect));
  CHECK(text.find("chl-guest: LABEL=cidata not found") != std::string::npos);
}

}  // namespace

TEST_CASE("Linux guest: NoCloud as ISO 9660 is found by LABEL=cidata and read back exactly") {
  nocloud_case(disks::CloudInitFormat::iso9660, "iso9660", false);
}

TEST_CASE(
    "Linux guest: NoCloud as ISO 9660 with a long nested non-ASCII name is read back exactly") {
  nocloud_case(disks::CloudInitFormat::iso9660, "iso9660", true);
}

TEST_CASE("Linux guest: NoCloud as vfat is found by LABEL=cidata and read back exactly") {
  nocloud_case(disks::CloudInitFormat::vfat, "vfat", false);
}

TEST_CASE("Linux guest: NoCloud as vfat with a long nested non-ASCII name is read back exactly") {
  nocloud_case(disks::CloudInitFormat::vfat, "vfat", true);
}

TEST_CASE("Linux guest: ConfigDrive as ISO 9660 is found by LABEL=config-2 and read back exactly") {
  config_drive_case(disks::CloudInitFormat::iso9660, "iso9660");
}

TEST_CASE("Linux guest: ConfigDrive as vfat is found by LABEL=config-2 and read back exactly") {
  config_drive_case(disks::CloudInitFormat::vfat, "vfat");
}

TEST_CASE("Linux guest: media from the ch-launcher cloud-init CLI (default format) are read") {
  auto g = guest_or_skip();
  if (!g) return;
  TempDir tmp("chllg");
  chl::test::write_file(tmp / "vmi.yaml", R"(apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: web.example
  namespace: prod
  uid: 0c3a6d1e-1111-2222-3333-444455556666
spec:
  domain:
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
      userData: |
        #cloud-config
        # grüße
        hostname: web
)");
  const fs::path img = tmp / "ci.img";
  auto r = run_command({chl::test::launcher_binary(), "cloud-init", "--vmi",
                        (tmp / "vmi.yaml").string(), "--out", img.string()});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const std::string fstype =
      disks::kDefaultCloudInitFormat == disks::CloudInitFormat::iso9660 ? "iso9660" : "vfat";
  const std::map<std::string, std::string> expect = {
      {"meta-data",
       R"({"instance-id":"0c3a6d1e-1111-2222-3333-444455556666","local-hostname":"web"})"},
      {"user-data",
       "#cloud-config\n# gr\xc3\xbc\xc3\x9f"
       "e\nhostname: web\n"}};
  const std::string text = boot_and_print(*g, {img});
  INFO("console: " << text);
  check_found(text, "cidata", fstype, img);
  CHECK(label_section(text, "cidata") == expected_section(tmp, expect));
}

TEST_CASE(
    "Linux guest: a raw disk from ch-launcher disk convert (qcow2, compressed) is mounted and "
    "read") {
  auto g = guest_or_skip();
  if (!g) return;
  auto mke2fs = chl::test::tool("mke2fs");
  if (!mke2fs) mke2fs = chl::test::tool("/sbin/mke2fs");
  if (!mke2fs && fs::exists("/usr/sbin/mke2fs")) mke2fs = "/usr/sbin/mke2fs";
  auto qemu_img = chl::test::tool("qemu-img");
  if (!mke2fs || !qemu_img) {
    chl::test::skip("needs mke2fs (e2fsprogs) and qemu-img (qemu-utils)");
    return;
  }
  TempDir tmp("chllg");
  const std::map<std::string, std::string> files = {
      {"hello.txt", "hello from a converted disk\n"},
      {"dir/sub/na\xc3\xafve-file-name.txt", "second file, \xc3\xa9t\xc3\xa9\n"}};
  for (const auto& [path, data] : files) {
    fs::create_directories((tmp / "src" / path).parent_path());
    chl::test::write_file(tmp / "src" / path, data);
  }
  // A 32 MiB ext4 filesystem populated from src/, made qcow2 (compressed) by qemu-img.
  const fs::path raw = tmp / "fs.raw", qcow = tmp / "fs.qcow2", converted = tmp / "converted.raw";
  auto r = run_command({*mke2fs, "-q", "-F", "-t", "ext4", "-L", "chl-data", "-d",
                        (tmp / "src").string(), raw.string(), "32M"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  r = run_command(
      {*qemu_img, "convert", "-c", "-f", "raw", "-O", "qcow2", raw.string(), qcow.string()});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  r = run_command(
      {chl::test::launcher_binary(), "disk", "convert", qcow.string(), converted.string()});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  REQUIRE(fs::file_size(converted) == fs::file_size(raw));

  const std::string text = boot_and_print(*g, {converted}, "chl.show=chl-data");
  INFO("console: " << text);
  check_found(text, "chl-data", "ext4", converted);
  // Regular files only: ext4's empty lost+found is not listed.
  CHECK(label_section(text, "chl-data") == expected_section(tmp, files));
}

TEST_CASE("Linux guest: typed lines are answered and a typed poweroff ends QEMU") {
  auto g = guest_or_skip();
  if (!g) return;
  GuestVm vm;
  REQUIRE(vm.start(*g, "", {}));
  INFO("console: " << vm.text());
  REQUIRE(vm.wait_output("chl-guest: ready", kBootTimeout));
  vm.send("hello there \xc3\xa9\r");
  REQUIRE(vm.wait_output("chl-guest: read: hello there \xc3\xa9\r\n", 60s));
  vm.send("poweroff\r");
  auto st = vm.wait_exit(kBootTimeout);
  REQUIRE(st.has_value());
  CHECK(st->success());
  CHECK(vm.text().find("chl-guest: read: poweroff\nchl-guest: powering off") != std::string::npos);
}

TEST_CASE("Linux guest: the uncompressed vmlinux boots through its PVH entry") {
  auto g = guest_or_skip();
  if (!g) return;
  if (g->vmlinux.empty()) {
    chl::test::skip("vmlinux not extracted (lz4 not installed when the guest was built)");
    return;
  }
  GuestVm vm;
  REQUIRE(vm.start(*g, "poweroff", {}, true));
  auto st = vm.wait_exit(kBootTimeout);
  INFO("console: " << vm.text());
  REQUIRE(st.has_value());
  CHECK(st->success());
  CHECK(vm.text().find("chl-guest: init started") != std::string::npos);
  CHECK(vm.text().find("chl-guest: kernel " + g->kernel_release) != std::string::npos);
  CHECK(vm.text().find("chl-guest: powering off") != std::string::npos);
}

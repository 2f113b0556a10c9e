// Firmware selection: the (hypervisor, mode, secureBoot) table, the checks on the files found,
// clear errors for missing files, and kernel-boot paths that try to leave their directory.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "firmware/confined_path.hpp"
#include "firmware/image_check.hpp"
#include "firmware/payload.hpp"
#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
namespace fw = chl::firmware;
using chl::test::TempDir;
using chl::test::write_file;

namespace {

void put(std::string& s, std::size_t at, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    s[at + static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// A minimal ELF64 with one PT_NOTE segment holding a note (owner, type), padded to `size`.
std::string elf_with_note(const std::string& owner, std::uint32_t type,
                          std::size_t size = 64 << 10) {
  std::string note;
  std::string name = owner + std::string(1, '\0');
  note.resize(12);
  put(note, 0, name.size(), 4);
  put(note, 4, 4, 4);
  put(note, 8, type, 4);
  note += name;
  while (note.size() % 4) note.push_back('\0');
  note += std::string("\x00\x00\x10\x00", 4);  // the entry point
  std::string f(size, '\0');
  f[0] = 0x7f;
  f[1] = 'E';
  f[2] = 'L';
  f[3] = 'F';
  f[4] = 2;  // 64-bit
  f[5] = 1;  // little endian
  f[6] = 1;
  put(f, 16, 2, 2);                 // ET_EXEC
  put(f, 18, 62, 2);                // x86-64
  put(f, 32, 64, 8);                // e_phoff
  put(f, 52, 64, 2);                // e_ehsize
  put(f, 54, 56, 2);                // e_phentsize
  put(f, 56, 1, 2);                 // e_phnum
  put(f, 64, 4, 4);                 // PT_NOTE
  put(f, 64 + 8, 0x200, 8);         // p_offset
  put(f, 64 + 32, note.size(), 8);  // p_filesz
  f.replace(0x200, note.size(), note);
  return f;
}

std::string pvh_elf(std::size_t size = 64 << 10) { return elf_with_note("Xen", 18, size); }

std::string bzimage() {
  std::string f(8192, '\0');
  f[0x1fe] = 0x55;
  f[0x1ff] = static_cast<char>(0xaa);
  f.replace(0x202, 4, "HdrS");
  return f;
}

std::string uefi_flash(std::size_t size = 4 << 20) {
  std::string f(size, '\xff');
  f.replace(0, 0x28, std::string(0x28, '\0'));
  f.replace(0x28, 4, "_FVH");
  return f;
}

fw::PayloadRequest request(fw::Hypervisor hv, fw::BootMode mode, bool secure, const fs::path& dir) {
  fw::PayloadRequest r;
  r.hypervisor = hv;
  r.mode = mode;
  r.secure_boot = secure;
  r.search_dirs = {dir};
  return r;
}

}  // namespace

TEST_CASE("selection table: each hypervisor, mode and secureBoot picks its firmware") {
  TempDir tmp("chlfw");
  write_file(tmp / "CLOUDHV.fd", uefi_flash());
  write_file(tmp / "hypervisor-fw", pvh_elf());
  write_file(tmp / "OVMF_CODE_4M.fd", uefi_flash());
  write_file(tmp / "OVMF_VARS_4M.fd", uefi_flash(512 << 10));
  write_file(tmp / "OVMF_CODE_4M.secboot.fd", uefi_flash());
  write_file(tmp / "OVMF_VARS_4M.ms.fd", uefi_flash(512 << 10));

  struct Row {
    fw::Hypervisor hv;
    fw::BootMode mode;
    bool secure;
    const char* firmware;  // payload.firmware file name, or ""
    const char* code;      // OVMF code, or ""
    const char* vars;
  };
  const Row rows[] = {
      {fw::Hypervisor::cloud_hypervisor, fw::BootMode::efi, false, "CLOUDHV.fd", "", ""},
      {fw::Hypervisor::cloud_hypervisor, fw::BootMode::bios_or_none, false, "hypervisor-fw", "",
       ""},
      {fw::Hypervisor::qemu_kvm, fw::BootMode::efi, false, "", "OVMF_CODE_4M.fd",
       "OVMF_VARS_4M.fd"},
      {fw::Hypervisor::qemu_kvm, fw::BootMode::efi, true, "", "OVMF_CODE_4M.secboot.fd",
       "OVMF_VARS_4M.ms.fd"},
      {fw::Hypervisor::qemu_kvm, fw::BootMode::bios_or_none, false, "", "", ""},
  };
  for (const auto& row : rows) {
    CAPTURE(fw::to_string(row.hv));
    CAPTURE(fw::to_string(row.mode));
    CAPTURE(row.secure);
    auto p = fw::select_payload(request(row.hv, row.mode, row.secure, tmp.path()));
    REQUIRE_MESSAGE(p, (p ? "" : p.error().message()));
    CHECK(p->firmware.value_or("").filename() == row.firmware);
    CHECK(p->ovmf_code.value_or("").filename() == row.code);
    CHECK(p->ovmf_vars_template.value_or("").filename() == row.vars);
    CHECK_FALSE(p->kernel);
    CHECK(p->secure_boot == row.secure);
  }
}

TEST_CASE("Secure Boot on Cloud Hypervisor is refused with a clear reason") {
  TempDir tmp("chlfw");
  write_file(tmp / "CLOUDHV.fd", uefi_flash());
  auto p = fw::select_payload(
      request(fw::Hypervisor::cloud_hypervisor, fw::BootMode::efi, true, tmp.path()));
  REQUIRE_FALSE(p);
  CHECK(p.error().message().find("Secure Boot") != std::string::npos);
  CHECK(p.error().message().find("secureBoot: false") != std::string::npos);
}

TEST_CASE("missing firmware names the files looked for and the directories") {
  TempDir tmp("chlfw");
  auto p = fw::select_payload(
      request(fw::Hypervisor::cloud_hypervisor, fw::BootMode::efi, false, tmp.path()));
  REQUIRE_FALSE(p);
  const auto msg = p.error().message();
  CHECK(msg.find((tmp / "CLOUDHV.fd").string()) != std::string::npos);
  CHECK(msg.find("--firmware-dir") != std::string::npos);
  auto q =
      fw::select_payload(request(fw::Hypervisor::qemu_kvm, fw::BootMode::efi, false, tmp.path()));
  REQUIRE_FALSE(q);
  CHECK(q.error().message().find("OVMF_CODE_4M.fd") != std::string::npos);
  CHECK(q.error().message().find("OVMF_CODE.fd") != std::string::npos);
}

TEST_CASE(
    "search directories are tried in order, the first hit wins, defaults are the image's paths") {
  TempDir a("chlfw"), b("chlfw");
  write_file(b / "hypervisor-fw", pvh_elf());
  auto r = request(fw::Hypervisor::cloud_hypervisor, fw::BootMode::bios_or_none, false, a.path());
  r.search_dirs.push_back(b.path());
  auto p = fw::select_payload(r);
  REQUIRE(p);
  CHECK(*p->firmware == b / "hypervisor-fw");
  CHECK(fw::default_search_dirs(fw::Hypervisor::cloud_hypervisor) ==
        std::vector<fs::path>{"/usr/share/cloud-hypervisor"});
  CHECK(fw::default_search_dirs(fw::Hypervisor::qemu_kvm) ==
        std::vector<fs::path>{"/usr/share/OVMF"});
}

TEST_CASE("a launcher looks for CH firmware beside itself first (the bundle's share/cloud-hypervisor), then the default") {
  using V = std::vector<fs::path>;
  CHECK(fw::launcher_search_dirs(fw::Hypervisor::cloud_hypervisor, fs::path("/opt/ch-launcher/bin")) ==
        V{"/opt/ch-launcher/share/cloud-hypervisor", "/usr/share/cloud-hypervisor"});
  // Installed in /usr/bin: its share/ is the default, searched once.
  CHECK(fw::launcher_search_dirs(fw::Hypervisor::cloud_hypervisor, fs::path("/usr/bin")) ==
        V{"/usr/share/cloud-hypervisor"});
  CHECK(fw::launcher_search_dirs(fw::Hypervisor::cloud_hypervisor, std::nullopt) == V{"/usr/share/cloud-hypervisor"});
  // QEMU's OVMF is the distribution's, never the launcher's.
  CHECK(fw::launcher_search_dirs(fw::Hypervisor::qemu_kvm, fs::path("/opt/ch-launcher/bin")) == V{"/usr/share/OVMF"});
  // The first directory that has the file wins.
  TempDir root("chlfw");
  fs::create_directories(root / "bin");
  fs::create_directories(root / "share" / "cloud-hypervisor");
  write_file(root / "share" / "cloud-hypervisor" / "hypervisor-fw", pvh_elf());
  fw::PayloadRequest r;
  r.hypervisor = fw::Hypervisor::cloud_hypervisor;
  r.mode = fw::BootMode::bios_or_none;
  r.search_dirs = fw::launcher_search_dirs(fw::Hypervisor::cloud_hypervisor, root / "bin");
  auto p = fw::select_payload(r);
  REQUIRE_MESSAGE(p, p.error().message());
  CHECK(fs::equivalent(*p->firmware, root / "share" / "cloud-hypervisor" / "hypervisor-fw"));
}

TEST_CASE("OVMF falls back to the 2 MiB build, and a code file without its vars is an error") {
  TempDir tmp("chlfw");
  write_file(tmp / "OVMF_CODE.fd", uefi_flash(2 << 20));
  write_file(tmp / "OVMF_VARS.fd", uefi_flash(128 << 10));
  auto p =
      fw::select_payload(request(fw::Hypervisor::qemu_kvm, fw::BootMode::efi, false, tmp.path()));
  REQUIRE(p);
  CHECK(p->ovmf_code->filename() == "OVMF_CODE.fd");
  write_file(tmp / "OVMF_CODE_4M.fd", uefi_flash());
  auto q =
      fw::select_payload(request(fw::Hypervisor::qemu_kvm, fw::BootMode::efi, false, tmp.path()));
  REQUIRE_FALSE(q);
  CHECK(q.error().message().find("OVMF_VARS_4M.fd") != std::string::npos);
}

TEST_CASE("implausible firmware files are refused, naming the file and the reason") {
  TempDir tmp("chlfw");
  write_file(tmp / "CLOUDHV.fd", "tiny");
  auto p = fw::select_payload(
      request(fw::Hypervisor::cloud_hypervisor, fw::BootMode::efi, false, tmp.path()));
  REQUIRE_FALSE(p);
  CHECK(p.error().message().find("implausible size") != std::string::npos);
  write_file(tmp / "CLOUDHV.fd", std::string(1 << 20, 'x'));
  p = fw::select_payload(
      request(fw::Hypervisor::cloud_hypervisor, fw::BootMode::efi, false, tmp.path()));
  REQUIRE_FALSE(p);
  CHECK(p.error().message().find("_FVH") != std::string::npos);
  write_file(tmp / "hypervisor-fw", elf_with_note("GNU", 3));
  p = fw::select_payload(
      request(fw::Hypervisor::cloud_hypervisor, fw::BootMode::bios_or_none, false, tmp.path()));
  REQUIRE_FALSE(p);
  CHECK(p.error().message().find("PVH") != std::string::npos);
  if (::geteuid() != 0) {  // root reads anything
    write_file(tmp / "hypervisor-fw", pvh_elf());
    fs::permissions(tmp / "hypervisor-fw", fs::perms::none);
    p = fw::select_payload(
        request(fw::Hypervisor::cloud_hypervisor, fw::BootMode::bios_or_none, false, tmp.path()));
    CHECK_FALSE(p);
  }
}

TEST_CASE("kernel formats: PVH ELF and bzImage accepted, others refused with the reason") {
  TempDir tmp("chlfw");
  write_file(tmp / "vmlinux", pvh_elf());
  write_file(tmp / "bzImage", bzimage());
  write_file(tmp / "plain.elf", elf_with_note("GNU", 3));
  write_file(tmp / "junk", std::string(4096, 'j'));
  CHECK(fw::check_kernel(tmp / "vmlinux").value() == fw::KernelFormat::elf_pvh);
  CHECK(fw::check_kernel(tmp / "bzImage").value() == fw::KernelFormat::bzimage);
  auto e = fw::check_kernel(tmp / "plain.elf");
  REQUIRE_FALSE(e);
  CHECK(e.error().message().find("CONFIG_PVH") != std::string::npos);
  auto j = fw::check_kernel(tmp / "junk");
  REQUIRE_FALSE(j);
  CHECK(j.error().message().find("neither a bzImage") != std::string::npos);
  CHECK_FALSE(fw::check_kernel(tmp / "missing"));
}

TEST_CASE(
    "kernelBoot: kernel, initrd and cmdline from the directory, absolute paths taken inside it") {
  TempDir tmp("chlfw");
  fs::create_directories(tmp / "boot");
  write_file(tmp / "boot" / "vmlinuz", bzimage());
  write_file(tmp / "boot" / "initrd.img", "initrd");
  fs::create_symlink("boot/vmlinuz", tmp / "vmlinuz");  // relative links inside are fine
  fw::PayloadRequest r;
  r.mode = fw::BootMode::kernel_boot;
  r.kernel_boot =
      fw::KernelBootRequest{tmp.path(), "/vmlinuz", "/boot/initrd.img", "console=ttyS0"};
  auto p = fw::select_payload(r);
  REQUIRE_MESSAGE(p, (p ? "" : p.error().message()));
  CHECK(*p->kernel == fs::canonical(tmp / "boot" / "vmlinuz"));
  CHECK(*p->initramfs == fs::canonical(tmp / "boot" / "initrd.img"));
  CHECK(p->cmdline == "console=ttyS0");
  CHECK(p->kernel_format == fw::KernelFormat::bzimage);
  CHECK_FALSE(p->firmware);
  CHECK(fw::describe(*p).find("kernel: ") != std::string::npos);
}

TEST_CASE("kernelBoot paths that try to leave the directory are refused") {
  TempDir outside("chlfw"), tmp("chlfw");
  write_file(outside / "secret", bzimage());
  fs::create_directories(tmp / "boot");
  fs::create_symlink(outside / "secret", tmp / "abs-link");  // absolute, pointing out
  fs::create_symlink("../" + outside.path().filename().string() + "/secret", tmp / "rel-link");
  fs::create_symlink(outside.path(), tmp / "dir-link");  // a directory outside
  fs::create_symlink("/proc/self/root/etc/passwd", tmp / "magic");
  for (const char* bad :
       {"../secret", "boot/../../secret", "/abs-link", "rel-link", "dir-link/secret", "magic"}) {
    CAPTURE(bad);
    auto r = fw::resolve_confined(tmp.path(), bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().message().find(bad) != std::string::npos);
  }
  auto dotdot = fw::resolve_confined(tmp.path(), "boot/../../secret");
  CHECK(dotdot.error().message().find("'..' is not allowed") != std::string::npos);
  auto out = fw::resolve_confined(tmp.path(), "abs-link");
  CHECK(out.error().message().find("outside the directory") != std::string::npos);
  CHECK_FALSE(fw::resolve_confined(tmp.path(), "boot"));  // a directory, not a file
  CHECK_FALSE(fw::resolve_confined(tmp.path(), "/"));     // the directory itself
  CHECK_FALSE(fw::resolve_confined(tmp.path(), "missing"));
  fw::PayloadRequest r;
  r.mode = fw::BootMode::kernel_boot;
  r.kernel_boot = fw::KernelBootRequest{tmp.path(), "../secret", "", ""};
  auto p = fw::select_payload(r);
  REQUIRE_FALSE(p);
  CHECK(p.error().message().find("kernelPath") != std::string::npos);
  r.kernel_boot = fw::KernelBootRequest{tmp.path(), "", "", ""};
  CHECK_FALSE(fw::select_payload(r));
  r.kernel_boot.reset();
  CHECK_FALSE(fw::select_payload(r));
}

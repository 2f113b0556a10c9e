#pragma once
// Where the Linux test guest is (built by scripts/build-guests.sh linux, CMake target
// linux_guest): Debian's cloud kernel and the busybox initramfs whose /init prints the
// cloud-init disks (tests/guests/linux/init, docs/guests.md). Header-only so any test can use it
// without a new link dependency.
//
//   std::string why;
//   auto g = chl::test::find_linux_guest(&why);
//   if (!g) { chl::test::skip(why); return; }
//   qemu ... -kernel g->kernel -initrd g->initramfs -append chl::test::kLinuxGuestCmdline
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "tests/support/test_support.hpp"

namespace chl::test {

struct LinuxGuest {
  std::filesystem::path kernel;     // vmlinuz: bzImage (QEMU -kernel)
  std::filesystem::path initramfs;  // initramfs.cpio.gz (newc, gzip)
  std::filesystem::path vmlinux;    // the uncompressed ELF with the PVH note (Cloud Hypervisor
                                    // --kernel; QEMU -kernel too); empty when not built (no lz4)
  std::string kernel_release;       // "6.1.0-50-cloud-amd64"
};

// The kernel command line the tests use: the serial console, no kernel chatter on it, reboot
// (QEMU -no-reboot: exit) instead of hanging on a panic. Append `poweroff` to power off once the
// disks are printed, `chl.show=LABEL[,LABEL]` to print more disks than cidata and config-2.
inline constexpr const char* kLinuxGuestCmdline = "console=ttyS0 quiet panic=-1";

// The directory holding the guest: $CHL_LINUX_GUEST_DIR, else <build dir>/guests/linux.
inline std::filesystem::path linux_guest_dir() {
  if (const char* d = std::getenv("CHL_LINUX_GUEST_DIR"); d != nullptr && *d != '\0') return d;
  return binary_dir() / "guests" / "linux";
}

// The guest's files, or nullopt with the reason in *why (to pass to skip()).
inline std::optional<LinuxGuest> find_linux_guest(std::string* why = nullptr) {
  const std::filesystem::path dir = linux_guest_dir();
  LinuxGuest g{dir / "vmlinuz", dir / "initramfs.cpio.gz", dir / "vmlinux", {}};
  std::error_code ec;
  if (!std::filesystem::is_regular_file(g.kernel, ec) ||
      !std::filesystem::is_regular_file(g.initramfs, ec)) {
    if (why != nullptr)
      *why = "Linux test guest not built in " + dir.string() +
             " (scripts/build-guests.sh linux: needs busybox-static, cpio and the Debian kernel "
             "package via apt-get download; offline builds skip it)";
    return std::nullopt;
  }
  if (!std::filesystem::is_regular_file(g.vmlinux, ec)) g.vmlinux.clear();
  std::ifstream rel(dir / "kernel-release");
  std::getline(rel, g.kernel_release);
  return g;
}

}  // namespace chl::test

#pragma once
// Plausibility checks on boot files before a VMM is pointed at them: a kernel is an ELF64 with a
// PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY, type 18, owner "Xen") or an x86 bzImage ("HdrS" at
// 0x202); UEFI firmware is a flash image starting with an EFI firmware volume ("_FVH" at 0x28)
// of a plausible size; rust-hypervisor-firmware is a PVH ELF. Every check opens the file (so it
// is readable) and names the file and what was wrong.
#include <cstdint>
#include <filesystem>
#include <string_view>

#include "common/error.hpp"

namespace chl::firmware {

enum class KernelFormat { elf_pvh, bzimage };
std::string_view to_string(KernelFormat f);

// The kernel's format, or an error naming why it is not bootable by direct kernel boot.
common::Result<KernelFormat> check_kernel(const std::filesystem::path& path);
// A UEFI flash image (CLOUDHV.fd, OVMF_CODE*.fd, OVMF_VARS*.fd).
common::Status check_uefi_flash(const std::filesystem::path& path);
// rust-hypervisor-firmware (`hypervisor-fw`): an ELF with a PVH note, 16 KiB to 16 MiB.
common::Status check_pvh_firmware(const std::filesystem::path& path);
// An initramfs: a readable, non-empty regular file.
common::Status check_initrd(const std::filesystem::path& path);

}  // namespace chl::firmware

#pragma once
// What a VM boots, chosen from plain inputs (the VMI model maps spec.domain.firmware onto them):
//
//   hypervisor  mode         secureBoot  boots
//   CH          efi          false       payload.firmware = CLOUDHV.fd (CH docs/uefi.md)
//   CH          efi          true        error: CLOUDHV.fd has no Secure Boot
//   CH          bios / none  -           payload.firmware = hypervisor-fw (rust-hypervisor-fw)
//   qemu-kvm    efi          false       OVMF_CODE_4M.fd + OVMF_VARS_4M.fd (Debian's ovmf)
//   qemu-kvm    efi          true        OVMF_CODE_4M.secboot.fd + OVMF_VARS_4M.ms.fd
//   qemu-kvm    bios / none  -           QEMU's own SeaBIOS (nothing to pass)
//   either      kernel_boot  -           payload.kernel / initramfs / cmdline from the
//                                        kernel-boot directory, confined to it
//
// Firmware is looked up by file name in the search directories, first hit wins; every file found
// is checked (readable, plausible size and format). A miss names the files and the directories.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "firmware/image_check.hpp"

namespace chl::firmware {

enum class Hypervisor { cloud_hypervisor, qemu_kvm };
enum class BootMode { efi, bios_or_none, kernel_boot };
std::string_view to_string(Hypervisor h);
std::string_view to_string(BootMode m);

inline constexpr std::string_view kDefaultCloudHypervisorFirmwareDir =
    "/usr/share/cloud-hypervisor";
inline constexpr std::string_view kDefaultOvmfDir = "/usr/share/OVMF";
// The default search directories for a hypervisor.
std::vector<std::filesystem::path> default_search_dirs(Hypervisor h);
// Where a launcher installed in `own_dir` (its executable's directory; nullopt: unknown) looks
// when no --firmware-dir is given: for Cloud Hypervisor first <own_dir>/../share/cloud-hypervisor
// (the firmware installed with it: the bundle's share/cloud-hypervisor/, docs/deploy.md), then the
// default; the same directory once (/usr/bin/../share/cloud-hypervisor is the default). QEMU: the default.
std::vector<std::filesystem::path> launcher_search_dirs(Hypervisor h,
                                                        const std::optional<std::filesystem::path>& own_dir);

struct KernelBootRequest {
  std::filesystem::path dir;  // the kernel-boot container's files (--volume kernel-boot=DIR)
  std::string kernel_path;    // kernelBoot.container.kernelPath (required)
  std::string initrd_path;    // kernelBoot.container.initrdPath (optional)
  std::string cmdline;        // kernelBoot.kernelArgs
};

struct PayloadRequest {
  Hypervisor hypervisor = Hypervisor::cloud_hypervisor;
  BootMode mode = BootMode::bios_or_none;
  bool secure_boot = false;  // efi.secureBoot (KubeVirt defaults it to true when efi is given)
  std::optional<KernelBootRequest> kernel_boot;    // required for BootMode::kernel_boot
  std::vector<std::filesystem::path> search_dirs;  // empty: default_search_dirs(hypervisor)
};

struct BootPayload {
  // Cloud Hypervisor's payload object (and QEMU's -kernel/-initrd/-append for kernel boot).
  std::optional<std::filesystem::path> firmware;
  std::optional<std::filesystem::path> kernel;
  std::optional<KernelFormat> kernel_format;
  std::optional<std::filesystem::path> initramfs;
  std::string cmdline;
  // QEMU UEFI: the read-only code flash and the template the per-VM variable store is copied from.
  std::optional<std::filesystem::path> ovmf_code;
  std::optional<std::filesystem::path> ovmf_vars_template;
  bool secure_boot = false;
  // One line: what boots ("UEFI firmware (CLOUDHV.fd)", "direct kernel boot (bzImage)").
  std::string summary;
};

common::Result<BootPayload> select_payload(const PayloadRequest& req);

// Human-readable lines for `ch-launcher firmware`: what would boot, and from where.
std::string describe(const BootPayload& p);

}  // namespace chl::firmware

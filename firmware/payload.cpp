#include "firmware/payload.hpp"

#include <unistd.h>

#include <array>

#include "firmware/confined_path.hpp"

namespace chl::firmware {

using common::fail;
using common::Result;
using common::Status;

std::string_view to_string(Hypervisor h) {
  return h == Hypervisor::cloud_hypervisor ? "cloud-hypervisor" : "qemu-kvm";
}

std::string_view to_string(BootMode m) {
  switch (m) {
    case BootMode::efi:
      return "efi";
    case BootMode::bios_or_none:
      return "bios";
    case BootMode::kernel_boot:
      return "kernelBoot";
  }
  return "?";
}

std::vector<std::filesystem::path> default_search_dirs(Hypervisor h) {
  if (h == Hypervisor::cloud_hypervisor) return {std::string(kDefaultCloudHypervisorFirmwareDir)};
  return {std::string(kDefaultOvmfDir)};
}

std::vector<std::filesystem::path> launcher_search_dirs(Hypervisor h,
                                                        const std::optional<std::filesystem::path>& own_dir) {
  auto dirs = default_search_dirs(h);
  if (h != Hypervisor::cloud_hypervisor || !own_dir || own_dir->empty()) return dirs;
  const auto beside = (*own_dir / ".." / "share" / "cloud-hypervisor").lexically_normal();
  if (beside != dirs.front().lexically_normal()) dirs.insert(dirs.begin(), beside);
  return dirs;
}

namespace {

enum class Check { uefi_flash, pvh_elf };

// One way to satisfy a (hypervisor, mode, secureBoot) row: a firmware file and, for QEMU's
// split OVMF, the variable store template that goes with it. Candidates are tried in order.
struct Candidate {
  std::string_view code;
  std::string_view vars;  // "" when there is no separate variable store
  Check check;
};

struct Rule {
  Hypervisor hv;
  BootMode mode;
  bool secure;
  std::string_view what;              // for messages and the summary
  std::string_view refusal;           // non-empty: this combination is an error
  std::vector<Candidate> candidates;  // empty and no refusal: nothing to load
};

const std::vector<Rule>& rules() {
  static const std::vector<Rule> table = {
      // Cloud Hypervisor's EDK2 build, given as payload.firmware (docs/uefi.md: --firmware).
      {Hypervisor::cloud_hypervisor,
       BootMode::efi,
       false,
       "UEFI firmware",
       "",
       {{"CLOUDHV.fd", "", Check::uefi_flash}}},
      // CLOUDHV.fd is built without Secure Boot (and CH has no SMM): refuse rather than boot
      // insecurely.
      {Hypervisor::cloud_hypervisor,
       BootMode::efi,
       true,
       "UEFI Secure Boot firmware",
       "Cloud Hypervisor's firmware (CLOUDHV.fd) has no Secure Boot; set "
       "spec.domain.firmware.bootloader.efi.secureBoot: false or run this VMI on qemu-kvm",
       {}},
      // rust-hypervisor-firmware, a PVH ELF, also given as payload.firmware.
      {Hypervisor::cloud_hypervisor,
       BootMode::bios_or_none,
       false,
       "rust-hypervisor-firmware",
       "",
       {{"hypervisor-fw", "", Check::pvh_elf}}},
      {Hypervisor::cloud_hypervisor,
       BootMode::bios_or_none,
       true,
       "rust-hypervisor-firmware",
       "",
       {{"hypervisor-fw", "", Check::pvh_elf}}},
      // Debian's ovmf package: the 4 MiB builds first, the 2 MiB ones as a fallback.
      {Hypervisor::qemu_kvm,
       BootMode::efi,
       false,
       "UEFI firmware (OVMF)",
       "",
       {{"OVMF_CODE_4M.fd", "OVMF_VARS_4M.fd", Check::uefi_flash},
        {"OVMF_CODE.fd", "OVMF_VARS.fd", Check::uefi_flash}}},
      {Hypervisor::qemu_kvm,
       BootMode::efi,
       true,
       "UEFI Secure Boot firmware (OVMF)",
       "",
       {{"OVMF_CODE_4M.secboot.fd", "OVMF_VARS_4M.ms.fd", Check::uefi_flash},
        {"OVMF_CODE.secboot.fd", "OVMF_VARS.ms.fd", Check::uefi_flash}}},
      // QEMU brings SeaBIOS itself.
      {Hypervisor::qemu_kvm, BootMode::bios_or_none, false, "SeaBIOS (QEMU's own)", "", {}},
      {Hypervisor::qemu_kvm, BootMode::bios_or_none, true, "SeaBIOS (QEMU's own)", "", {}},
  };
  return table;
}

Status run_check(Check c, const std::filesystem::path& p) {
  return c == Check::uefi_flash ? check_uefi_flash(p) : check_pvh_firmware(p);
}

bool present(const std::filesystem::path& p) { return ::access(p.c_str(), F_OK) == 0; }

Result<BootPayload> kernel_boot(const PayloadRequest& req) {
  if (!req.kernel_boot)
    return fail(std::errc::invalid_argument,
                "kernelBoot: no kernel-boot directory given (--volume kernel-boot=DIR)");
  const auto& kb = *req.kernel_boot;
  if (kb.dir.empty())
    return fail(std::errc::invalid_argument,
                "kernelBoot: no kernel-boot directory given (--volume kernel-boot=DIR)");
  if (kb.kernel_path.empty())
    return fail(std::errc::invalid_argument, "kernelBoot: container.kernelPath is empty");
  BootPayload p;
  auto kernel = resolve_confined(kb.dir, kb.kernel_path);
  if (!kernel) return tl::unexpected(kernel.error().wrap("kernelBoot kernelPath"));
  auto format = check_kernel(*kernel);
  if (!format) return tl::unexpected(format.error().wrap("kernelBoot kernelPath"));
  p.kernel = *kernel;
  p.kernel_format = *format;
  if (!kb.initrd_path.empty()) {
    auto initrd = resolve_confined(kb.dir, kb.initrd_path);
    if (!initrd) return tl::unexpected(initrd.error().wrap("kernelBoot initrdPath"));
    if (auto s = check_initrd(*initrd); !s)
      return tl::unexpected(s.error().wrap("kernelBoot initrdPath"));
    p.initramfs = *initrd;
  }
  p.cmdline = kb.cmdline;
  p.summary = "direct kernel boot (" + std::string(to_string(*format)) + ")";
  return p;
}

}  // namespace

Result<BootPayload> select_payload(const PayloadRequest& req) {
  if (req.mode == BootMode::kernel_boot) return kernel_boot(req);
  const Rule* rule = nullptr;
  for (const auto& r : rules())
    if (r.hv == req.hypervisor && r.mode == req.mode && r.secure == req.secure_boot) rule = &r;
  if (!rule)
    return fail(std::errc::invalid_argument, "no firmware rule for this combination (bug)");
  if (!rule->refusal.empty()) return fail(std::errc::not_supported, std::string(rule->refusal));

  BootPayload p;
  p.secure_boot = req.secure_boot && req.mode == BootMode::efi;
  p.summary = std::string(rule->what);
  if (rule->candidates.empty()) return p;

  const auto dirs = req.search_dirs.empty() ? default_search_dirs(req.hypervisor) : req.search_dirs;
  std::string looked;
  for (const auto& c : rule->candidates) {
    for (const auto& dir : dirs) {
      const auto code = dir / std::string(c.code);
      looked += (looked.empty() ? "" : ", ") + code.string();
      if (!present(code)) continue;
      if (auto s = run_check(c.check, code); !s)
        return tl::unexpected(s.error().wrap(std::string(rule->what)));
      if (!c.vars.empty()) {
        const auto vars = dir / std::string(c.vars);
        if (!present(vars))
          return fail(std::errc::no_such_file_or_directory,
                      std::string(rule->what) + ": found " + code.string() +
                          " but not its variable store " + vars.string());
        if (auto s = check_uefi_flash(vars); !s)
          return tl::unexpected(s.error().wrap(std::string(rule->what)));
        p.ovmf_code = code;
        p.ovmf_vars_template = vars;
      } else {
        p.firmware = code;
      }
      p.summary += " (" + std::string(c.code) + ")";
      return p;
    }
  }
  std::string dirlist;
  for (const auto& d : dirs) dirlist += (dirlist.empty() ? "" : ", ") + d.string();
  return fail(std::errc::no_such_file_or_directory,
              std::string(rule->what) + " for " + std::string(to_string(req.hypervisor)) +
                  " not found: looked for " + looked + " (search directories: " + dirlist +
                  "; install it there or pass --firmware-dir)");
}

std::string describe(const BootPayload& p) {
  std::string out = "boot: " + p.summary + "\n";
  if (p.firmware) out += "firmware: " + p.firmware->string() + "\n";
  if (p.ovmf_code) out += "ovmf code: " + p.ovmf_code->string() + "\n";
  if (p.ovmf_vars_template) out += "ovmf vars template: " + p.ovmf_vars_template->string() + "\n";
  if (p.kernel) out += "kernel: " + p.kernel->string() + "\n";
  if (p.initramfs) out += "initramfs: " + p.initramfs->string() + "\n";
  if (p.kernel) out += "cmdline: " + p.cmdline + "\n";
  if (p.secure_boot) out += "secure boot: yes\n";
  return out;
}

}  // namespace chl::firmware

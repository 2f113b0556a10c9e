// `ch-launcher firmware`: what a VMI would boot (firmware, or kernel/initramfs/cmdline) and from
// where, with the files checked — without starting anything.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/registry.hpp"
#include "vmi/parser.hpp"
#include "common/module_loader.hpp"
#include "firmware/payload.hpp"

namespace {

namespace fw = chl::firmware;

int fail(const std::string& msg, int code = 1) {
  std::fprintf(stderr, "ch-launcher firmware: %s\n", msg.c_str());
  return code;
}

int run(const std::vector<std::string>& argv) {
  chl::cli::Args args({"--vmi", "--firmware-dir", "--hypervisor", "--volume"}, {});
  if (!args.parse(argv)) return chl::cli::usage_error("firmware", args.error());
  auto vmi_file = args.get("--vmi");
  if (!vmi_file) return chl::cli::usage_error("firmware", "--vmi FILE is required");

  auto text = chl::vmi::read_manifest(*vmi_file);
  if (!text) return fail(text.error().message());
  auto parsed = chl::vmi::parse_vmi(*text);
  if (parsed.fatal || !parsed.problems.empty()) {
    for (const auto& p : parsed.problems) std::fprintf(stderr, "%s\n", chl::vmi::to_string(p).c_str());
    return fail(*vmi_file + ": not a valid VirtualMachineInstance", 2);
  }
  const chl::vmi::Vmi& vmi = parsed.vmi;
  const auto& firmware = vmi.spec.domain.firmware;

  std::string hv = vmi.spec.hypervisor.empty() ? args.get_or("--hypervisor", "cloud-hypervisor")
                                               : vmi.spec.hypervisor;
  fw::PayloadRequest req;
  if (hv == "cloud-hypervisor") {
    req.hypervisor = fw::Hypervisor::cloud_hypervisor;
  } else if (hv == "qemu-kvm") {
    req.hypervisor = fw::Hypervisor::qemu_kvm;
  } else {
    return chl::cli::usage_error("firmware",
                                 "unknown hypervisor '" + hv + "' (cloud-hypervisor or qemu-kvm)");
  }
  for (const auto& d : args.all("--firmware-dir")) req.search_dirs.emplace_back(d);
  // As a launch looks (cli/run_launcher.cpp): the launcher's own share/cloud-hypervisor first.
  if (req.search_dirs.empty()) req.search_dirs = fw::launcher_search_dirs(req.hypervisor, chl::common::own_directory());

  if (firmware.kernel_boot.present && firmware.kernel_boot.has_container) {
    req.mode = fw::BootMode::kernel_boot;
    fw::KernelBootRequest kb;
    for (const auto& v : args.all("--volume")) {
      auto eq = v.find('=');
      if (eq != std::string::npos && v.substr(0, eq) == "kernel-boot") kb.dir = v.substr(eq + 1);
    }
    if (kb.dir.empty())
      return chl::cli::usage_error(
          "firmware", "the VMI boots a kernel: give its directory with --volume kernel-boot=DIR");
    kb.kernel_path = firmware.kernel_boot.kernel_path;
    kb.initrd_path = firmware.kernel_boot.initrd_path;
    kb.cmdline = firmware.kernel_boot.kernel_args;
    req.kernel_boot = kb;
  } else if (firmware.bootloader == chl::vmi::Bootloader::Efi) {
    req.mode = fw::BootMode::efi;
    req.secure_boot = firmware.efi_secure_boot.value_or(true);  // KubeVirt's default
  } else {
    req.mode = fw::BootMode::bios_or_none;
  }

  auto payload = fw::select_payload(req);
  if (!payload) return fail(payload.error().message());
  std::printf("hypervisor: %s\n%s", hv.c_str(), fw::describe(*payload).c_str());
  return 0;
}

chl::cli::Registrar reg(
    {"firmware", "show what a VMI would boot (firmware or kernel) and from where",
     "usage: ch-launcher firmware --vmi FILE [--firmware-dir DIR]... [--hypervisor "
     "cloud-hypervisor|qemu-kvm]\n"
     "                           [--volume kernel-boot=DIR]\n"
     "  bootloader.efi -> CLOUDHV.fd (Cloud Hypervisor, as payload.firmware) or OVMF (qemu-kvm);\n"
     "  bios or nothing -> hypervisor-fw (rust-hypervisor-firmware) or QEMU's SeaBIOS;\n"
     "  kernelBoot -> kernelPath/initrdPath inside the kernel-boot directory (never outside it).\n"
     "  Default firmware directories: <launcher dir>/../share/cloud-hypervisor then\n"
     "  /usr/share/cloud-hypervisor (CH), /usr/share/OVMF (qemu-kvm).\n"
     "  Every file found is checked; a missing one is named with the directories searched.",
     run});

}  // namespace

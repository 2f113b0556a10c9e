#pragma once
// KVM or software emulation (TCG) for the QEMU driver, decided once per launch and explained.
// An openable /dev/kvm is not proof that KVM is usable: on machines whose KVM is the nested
// PVM module (/sys/module/kvm_pvm present) ordinary guest kernels crash, so `auto` picks TCG
// there with a warning; `--accel kvm` forces KVM (the project's PVH test guest does boot under it).
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace chl::libvirt {

enum class Accel { Kvm, Tcg };
enum class AccelRequest { Auto, Kvm, Tcg };

std::string_view to_string(Accel a);  // "kvm", "tcg"
// "auto", "kvm", "tcg" (what --accel takes); nullopt otherwise.
std::optional<AccelRequest> accel_request_from_string(std::string_view s);

struct AccelChoice {
  Accel accel = Accel::Tcg;
  std::string why;  // one sentence for the log and `status`
  // KVM is the nested PVM module: libvirt's host-model/host-passthrough and checked named
  // models fail there (QEMU cannot set MSR 0x10a; libvirt sees a host CPU with `svm` it cannot
  // give), so a forced KVM domain gets QEMU's plain qemu64 CPU, unchecked (docs/qemu/daemon.md).
  bool nested_pvm = false;
};

struct AccelProbePaths {
  std::filesystem::path dev_kvm = "/dev/kvm";
  std::filesystem::path sys_module = "/sys/module";
};

// Probe (for Auto) or take the request; never fails: a forced choice that the host cannot honour
// is reported in `why` and fails later, at domain start, with libvirt's words.
AccelChoice choose_accel(AccelRequest request, const AccelProbePaths& paths = {});

}  // namespace chl::libvirt

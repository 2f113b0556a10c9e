#include "drivers/libvirt/accel_probe.hpp"

#include <fcntl.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/unique_fd.hpp"

namespace chl::libvirt {

std::string_view to_string(Accel a) { return a == Accel::Kvm ? "kvm" : "tcg"; }

std::optional<AccelRequest> accel_request_from_string(std::string_view s) {
  if (s == "auto") return AccelRequest::Auto;
  if (s == "kvm") return AccelRequest::Kvm;
  if (s == "tcg") return AccelRequest::Tcg;
  return std::nullopt;
}

AccelChoice choose_accel(AccelRequest request, const AccelProbePaths& paths) {
  if (request == AccelRequest::Tcg)
    return {Accel::Tcg, "software emulation (TCG) forced by --accel tcg"};
  common::UniqueFd kvm(::open(paths.dev_kvm.c_str(), O_RDWR | O_CLOEXEC));
  const int open_errno = errno;
  std::error_code ec;
  const bool pvm = std::filesystem::exists(paths.sys_module / "kvm_pvm", ec);
  if (request == AccelRequest::Kvm) {
    std::string why = "KVM forced by --accel kvm";
    if (!kvm)
      why += " (but " + paths.dev_kvm.string() + " cannot be opened: " + std::strerror(open_errno) +
             ")";
    else if (pvm)
      why +=
          " (nested PVM KVM: ordinary guest kernels may crash under it; the guest gets QEMU's "
          "qemu64 CPU)";
    return {Accel::Kvm, why, pvm};
  }
  if (!kvm)
    return {Accel::Tcg, "software emulation (TCG): " + paths.dev_kvm.string() +
                            " cannot be opened (" + std::strerror(open_errno) + ")"};
  const int version = ::ioctl(kvm.get(), KVM_GET_API_VERSION, 0);
  if (version != KVM_API_VERSION)
    return {Accel::Tcg, "software emulation (TCG): " + paths.dev_kvm.string() +
                            " answers KVM API version " + std::to_string(version) + ", not " +
                            std::to_string(KVM_API_VERSION)};
  if (pvm)
    return {Accel::Tcg,
            "software emulation (TCG): KVM here is the nested PVM module (" +
                (paths.sys_module / "kvm_pvm").string() +
                " present), under which ordinary guest kernels crash; --accel kvm forces it"};
  return {Accel::Kvm, "KVM: " + paths.dev_kvm.string() + " opens and answers API version " +
                          std::to_string(version)};
}

}  // namespace chl::libvirt

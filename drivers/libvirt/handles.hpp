#pragma once
// RAII for libvirt's C handles: every vir*Ptr the launcher holds is one of these, freed by its
// own vir*Free/virConnectClose. Also the one way to read libvirt's last error into an Error.
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include <memory>
#include <string>
#include <string_view>

#include "common/error.hpp"

namespace chl::libvirt {

struct VirConnectCloser {
  void operator()(virConnectPtr c) const noexcept { (void)virConnectClose(c); }
};
struct VirDomainFreer {
  void operator()(virDomainPtr d) const noexcept { (void)virDomainFree(d); }
};
// virDomainGetXMLDesc and friends return malloc'd strings.
struct VirStringFreer {
  void operator()(char* s) const noexcept { std::free(s); }
};

using VirConnect = std::unique_ptr<virConnect, VirConnectCloser>;
using VirDomain = std::unique_ptr<virDomain, VirDomainFreer>;
using VirString = std::unique_ptr<char, VirStringFreer>;

// libvirt's last error on this thread as text ("" when none).
inline std::string libvirt_last_error() {
  const char* m = virGetLastErrorMessage();
  return m ? std::string(m) : std::string();
}

// An Error "what: <libvirt's message>" (code io_error; operation_not_supported and
// invalid_argument when libvirt says so).
inline tl::unexpected<common::Error> libvirt_fail(std::string_view what) {
  std::errc code = std::errc::io_error;
  if (virErrorPtr e = virGetLastError()) {
    if (e->code == VIR_ERR_NO_SUPPORT || e->code == VIR_ERR_OPERATION_UNSUPPORTED)
      code = std::errc::operation_not_supported;
    else if (e->code == VIR_ERR_XML_ERROR || e->code == VIR_ERR_INVALID_ARG ||
             e->code == VIR_ERR_CONFIG_UNSUPPORTED)
      code = std::errc::invalid_argument;
    else if (e->code == VIR_ERR_OPERATION_INVALID)
      code = std::errc::operation_not_permitted;
  }
  return common::fail(code, std::string(what) + ": " + libvirt_last_error());
}

}  // namespace chl::libvirt

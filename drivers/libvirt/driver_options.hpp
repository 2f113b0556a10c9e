#pragma once
// What the QEMU/KVM driver (libvirt_driver.hpp) is created with. Kept apart from the driver, with
// no libvirt header, because the launcher fills it in (run.cpp) and hands it to the libvirt module
// (libvirt_module.hpp) without linking libvirt itself.
#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "drivers/libvirt/accel_probe.hpp"

namespace chl::libvirt {

struct LibvirtDriverOptions {
  std::string uri = "qemu:///system";
  std::string domain_name;  // <namespace>_<name>
  std::string domain_xml;   // domain_xml.hpp
  std::filesystem::path state_dir;
  AccelChoice accel;
  std::string emulator;                                      // for status
  std::string daemon;                                        // which libvirtd, for status
  std::filesystem::path qemu_pid_dir = "/run/libvirt/qemu";  // libvirt's <name>.pid files
  std::function<void(pid_t)> on_vmm_started;                 // called on the worker thread
  // The pod's taps the domain XML names (managed='no'). libvirtd opens them by name in its own
  // network namespace, so with any tap it must share the launcher's (the pod's): checked before
  // the domain is created.
  std::vector<std::string> taps;
  // The domain is created with VIR_DOMAIN_START_AUTODESTROY (libvirtd destroys it when the
  // launcher's connection closes, however the launcher died), except for a VMI that may live
  // migrate: libvirt refuses to migrate an auto-destroy domain ("domain is marked for auto
  // destroy", qemu_migration.c), so KubeVirt's LiveMigratable VMIs do without it.
  bool autodestroy = true;
  // A live-migration target: no domain is created; libvirt creates the incoming one
  // (receive_migration), whose first events are Started/Migrated then Resumed/Migrated.
  bool incoming = false;
  // The socket the libvirt daemon answers on (the target links the proxy's path to it).
  std::filesystem::path daemon_socket = "/run/libvirt/libvirt-sock";
};

}  // namespace chl::libvirt

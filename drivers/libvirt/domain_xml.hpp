#pragma once
// The QEMU driver's half of translation: a LaunchPlan (plan.hpp) and its VMI become a libvirt
// domain XML document for QEMU (what virDomainCreateXML is given and `render --hypervisor
// qemu-kvm` prints). Pure: nothing is started or written; disk headers may be read to tell
// qcow2 from raw.
//
// Choices (docs/qemu/daemon.md): name `<namespace>_<name>` and uuid from the VMI as KubeVirt does;
// q35; the serial console on a PTY (the launcher's console bridge serves virt-serial0 from it,
// as on the Cloud Hypervisor path); pvpanic (ISA); on_crash destroy; QEMU runs with the
// launcher's own uid:gid through a static DAC seclabel without relabelling, so files in the
// 0700 state directory need no chown.
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "drivers/libvirt/accel_probe.hpp"
#include "launcher/plan.hpp"
#include "vmi/vmi.hpp"
#include "common/xml_escape.hpp"
#include "launcher/launch_options.hpp"

namespace chl::libvirt {

struct DomainXmlOptions {
  Accel accel = Accel::Tcg;
  // KVM on nested PVM (AccelChoice::nested_pvm): QEMU's qemu64 CPU, unchecked, whatever model
  // the VMI asks for.
  bool plain_cpu = false;
  std::string emulator;  // "" = libvirt's default for the arch (qemu-system-x86_64)
  // QEMU's uid:gid (static DAC label, no relabelling); nullopt = the daemon's default user.
  std::optional<std::pair<uid_t, gid_t>> run_as;
  std::string ovmf_dir = "/usr/share/OVMF";  // OVMF_CODE*.fd / OVMF_VARS*.fd (Debian `ovmf`)
  bool detect_image_format = true;           // read disk headers (qcow2 magic) when the file exists
  // The launcher's state directory, recorded in the domain's <metadata> (kLauncherMetadataUri)
  // so that a later launcher can tell its own leftover domain from another launcher's live one
  // of the same name. "" = no metadata element.
  std::string state_dir;
  // SMBIOS system fields (manufacturer, product, version, sku, family); unset: KubeVirt's
  // defaults, manufacturer KubeVirt and product None.
  std::optional<launcher::SmbiosSystem> smbios;
  std::uint32_t mem_balloon_stats_period = 0;  // seconds; 0 = no <stats> in the balloon
};

// The XML namespace of ch-launcher's element in <metadata>:
//   <chl:launcher xmlns:chl='URI'><chl:state-dir>PATH</chl:state-dir></chl:launcher>
inline constexpr const char* kLauncherMetadataUri = "https://ch-launcher.dev/xmlns/domain/1";

// "<namespace>_<name>", KubeVirt's libvirt domain name.
std::string domain_name(const vmi::Vmi& vmi);

// Escape text for XML character data and attribute values (common/xml_escape.hpp).
using common::xml_escape;

std::string to_domain_xml(const vmi::Vmi& vmi, const launcher::LaunchPlan& plan, const DomainXmlOptions& opts);

// A hotplug volume for virDomainAttachDevice: raw, on the domain's virtio-scsi controller at
// `target` (sdX), aliased "ua-<id>" so that it is detached by that alias.
struct HotplugDisk {
  std::string id;
  std::string path;
  bool block = false;  // a block device (<source dev>) rather than a file
  bool readonly = false;
  std::string target;
};
std::string hotplug_disk_xml(const HotplugDisk& d);

// The first sdX target none of `used` ("sda", "vdb"…) holds.
std::string free_scsi_target(const std::vector<std::string>& used);

}  // namespace chl::libvirt

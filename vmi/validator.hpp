#pragma once
// Checking a parsed VMI: what it means (names, references, sizes) and whether the chosen
// hypervisor can serve it (against hypervisor_capabilities.hpp). Every problem is returned at
// once, each "spec.<path>: <reason>".
#include <string>
#include <string_view>
#include <tl/expected.hpp>

#include "vmi/hypervisor_capabilities.hpp"
#include "vmi/vmi.hpp"

namespace chl::vmi {

// Facts about the machine the VM would run on.
struct HostFacts {
  std::string arch = "x86_64";  // uname machine
  // The launcher may make threads SCHED_FIFO (priority 1): CAP_SYS_NICE in its effective set,
  // or RLIMIT_RTPRIO >= 1 (sched(7)). Needed for spec.domain.cpu.realtime on cloud-hypervisor.
  bool realtime_scheduling = true;
};
HostFacts current_host();

// The largest guest memory accepted (16 TiB) and disk size (256 TiB).
inline constexpr std::int64_t kMaxGuestMemory = std::int64_t{16} << 40;
inline constexpr std::int64_t kMaxDiskSize = std::int64_t{256} << 40;

// Which hypervisor serves `vmi`: spec.hypervisor when set, else `fallback` (the launcher's
// --hypervisor). A name no description has is a violation.
tl::expected<const HypervisorCapabilities*, Violation> select_hypervisor(const Vmi& vmi,
                                                                         std::string_view fallback);

// Every violation of `vmi` for `caps` on `host`; empty when the VMI can run.
Violations validate(const Vmi& vmi, const HypervisorCapabilities& caps, const HostFacts& host = {});

// Parse, select the hypervisor and validate in one go: the VMI and its hypervisor, or every
// problem found (parse problems first, then the rest, without duplicates).
// The VMI is defaulted first as KubeVirt's virt-api does (defaults.hpp), so a manifest and the
// same VMI as virt-handler sends it are checked, and launch, alike.
struct CheckedVmi {
  Vmi vmi;  // defaulted
  const HypervisorCapabilities* caps = nullptr;
  // Accepted but served differently, for the user to know (a log line, a line from
  // validate/run, a Kubernetes event in virt-launcher mode): "spec.…: <note>".
  Violations warnings;
};
tl::expected<CheckedVmi, Violations> check_vmi(std::string_view text,
                                               std::string_view fallback_hypervisor,
                                               const HostFacts& host = {});

// check_vmi on a file ("-" = stdin): the VMI, or the text to print (every problem, one a line,
// prefixed with the file name; or why the file could not be read). Warnings are left to the
// caller (format_warnings).
tl::expected<CheckedVmi, std::string> check_vmi_file(const std::string& path,
                                                     std::string_view fallback_hypervisor,
                                                     const HostFacts& host = {});

// One line: "default/vmi-fedora on cloud-hypervisor: 2 vCPUs, 1Gi memory, 2 disks, 1 interface,
// boot bios".
std::string vmi_summary(const Vmi& vmi, const HypervisorCapabilities& caps);

// Violations one a line, each prefixed with `source` ("vmi.yaml: spec.x: reason").
std::string format_violations(const Violations& v, const std::string& source);
// Warnings one a line: "warning: vmi.yaml: spec.x: note".
std::string format_warnings(const Violations& w, const std::string& source);

// Name rules (Kubernetes): a DNS-1123 label (volumes, disks, interfaces, networks) and a DNS-1123
// subdomain (metadata.name).
bool is_dns1123_label(std::string_view s);
bool is_dns1123_subdomain(std::string_view s);

// "02:00:00:00:00:01" style MAC (also '-' separated); false on anything else.
bool parse_mac(std::string_view text, unsigned char out[6]);

}  // namespace chl::vmi

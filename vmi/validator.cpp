#include "vmi/validator.hpp"

#include <sys/resource.h>
#include <sys/utsname.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#include "vmi/checker.hpp"
#include "vmi/defaults.hpp"
#include "vmi/parser.hpp"
#include "vmi/quantity.hpp"

namespace chl::vmi {

bool is_alnum_lower(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

bool has_dotdot_component(std::string_view p) {
  std::size_t start = 0;
  while (start <= p.size()) {
    std::size_t end = p.find('/', start);
    if (end == std::string_view::npos) end = p.size();
    if (p.substr(start, end - start) == "..") return true;
    start = end + 1;
  }
  return false;
}

std::string kernel_arch(std::string_view a) {
  if (a == "amd64" || a == "x86_64") return "x86_64";
  if (a == "arm64" || a == "aarch64") return "aarch64";
  if (a == "ppc64le") return "ppc64le";
  if (a == "s390x") return "s390x";
  return std::string(a);
}

Violations Checker::run() {
  check_metadata();
  const VmiSpec& s = vmi_.spec;
  if (!s.has_domain) {
    add("spec.domain",
        "missing; a VirtualMachineInstance needs spec.domain (cpu, memory, devices)");
  } else {
    check_arch();
    check_cpu();
    check_memory();
    check_firmware();
    check_disks();
    check_interfaces();
    check_devices();
    check_features();
    check_clock();
    if (s.domain.launch_security) require(Feature::LaunchSecurity, "spec.domain.launchSecurity");
    if (s.domain.io_threads_policy) {
      const std::string& pol = s.domain.io_threads_policy_name;
      if (pol == "supplementalPool")
        require(Feature::IoThreadsSupplementalPool, "spec.domain.ioThreadsPolicy");
      else if (pol == "shared" || pol == "auto")
        require(Feature::IoThreadsPolicy, "spec.domain.ioThreadsPolicy");
      else
        add("spec.domain.ioThreadsPolicy",
            "unknown policy \"" + pol + "\"; expected shared, auto or supplementalPool");
    }
  }
  check_volumes();
  check_networks();
  if (!s.resource_claims.empty()) add("spec.resourceClaims", kDraNotSupported);
  check_access_credentials();
  if (s.termination_grace_period_seconds && *s.termination_grace_period_seconds < 0) {
    add("spec.terminationGracePeriodSeconds", "must not be negative");
  }
  if (!s.hostname.empty() && !is_dns1123_label(s.hostname)) {
    add("spec.hostname", "\"" + s.hostname + "\" is not a valid host name (a DNS-1123 label)");
  }
  return std::move(out_);
}

void Checker::check_access_credentials() {
  const auto& creds = vmi_.spec.access_credentials;
  for (std::size_t i = 0; i < creds.size(); ++i) {
    const AccessCredential& c = creds[i];
    const std::string p = "spec.accessCredentials[" + std::to_string(i) + "]";
    if (c.ssh_public_key == c.user_password) {
      add(p, "exactly one of sshPublicKey or userPassword must be set");
      continue;
    }
    const std::string tp = p + (c.ssh_public_key ? ".sshPublicKey" : ".userPassword");
    if (!c.has_secret) {
      add(tp + ".source", "exactly one source (secret) must be set");
    } else if (c.secret_name.empty()) {
      add(tp + ".source.secret.secretName", "required");
    } else if (!is_dns1123_subdomain(c.secret_name)) {
      add(tp + ".source.secret.secretName", "\"" + c.secret_name + "\" is not a valid Secret name");
    }
    const std::string mp = tp + ".propagationMethod";
    const int methods = int{c.qemu_guest_agent} + int{c.no_cloud} + int{c.config_drive};
    if (methods != 1) {
      add(mp, "exactly one propagation method must be set");
      continue;
    }
    // The Secret reaches the guest only through the agent here: cloud-init's public-keys from
    // accessCredentials are not written (docs/disks/cloud-init.md).
    if (c.no_cloud)
      add(mp + ".noCloud",
          "not supported by ch-launcher: access credentials reach the guest through qemuGuestAgent "
          "only");
    if (c.config_drive)
      add(mp + ".configDrive",
          "not supported by ch-launcher: access credentials reach the guest through qemuGuestAgent "
          "only");
    if (c.qemu_guest_agent && c.ssh_public_key && c.users.empty())
      add(mp + ".qemuGuestAgent.users",
          "requires at least one user to be present in the users list");
    for (std::size_t u = 0; u < c.users.size(); ++u)
      if (c.users[u].empty() || c.users[u].find_first_of(":/\n") != std::string::npos)
        add(mp + ".qemuGuestAgent.users[" + std::to_string(u) + "]",
            "\"" + c.users[u] + "\" is not a user name");
  }
}

namespace {

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// CAP_SYS_NICE (bit 23) in /proc/self/status's CapEff, or RLIMIT_RTPRIO >= 1. Unknown counts as
// able: the start then fails with the kernel's own EPERM, naming the thread.
bool can_schedule_realtime() {
  constexpr unsigned kCapSysNice = 23;
  if (rlimit rt{}; ::getrlimit(RLIMIT_RTPRIO, &rt) == 0 && rt.rlim_cur >= 1) return true;
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    const unsigned long long eff = std::strtoull(line.c_str() + 7, nullptr, 16);
    return ((eff >> kCapSysNice) & 1ULL) != 0;
  }
  return true;
}

}  // namespace

HostFacts current_host() {
  HostFacts h;
  struct utsname u {};
  if (::uname(&u) == 0) h.arch = u.machine;
  h.realtime_scheduling = can_schedule_realtime();
  return h;
}

bool is_dns1123_label(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  if (!is_alnum_lower(s.front()) || !is_alnum_lower(s.back())) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return is_alnum_lower(c) || c == '-'; });
}

bool is_dns1123_subdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  std::size_t start = 0;
  while (true) {
    std::size_t dot = s.find('.', start);
    std::string_view label =
        s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty() || !is_alnum_lower(label.front()) || !is_alnum_lower(label.back()))
      return false;
    if (!std::all_of(label.begin(), label.end(),
                     [](char c) { return is_alnum_lower(c) || c == '-'; }))
      return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool parse_mac(std::string_view text, unsigned char out[6]) {
  if (text.size() != 17) return false;
  const char sep = text[2];
  if (sep != ':' && sep != '-') return false;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (int i = 0; i < 6; ++i) {
    const std::size_t o = static_cast<std::size_t>(i) * 3;
    if (i > 0 && text[o - 1] != sep) return false;
    int hi = hex(text[o]), lo = hex(text[o + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return true;
}

tl::expected<CheckedVmi, std::string> check_vmi_file(const std::string& path,
                                                     std::string_view fallback_hypervisor,
                                                     const HostFacts& host) {
  auto text = read_manifest(path);
  if (!text) return tl::unexpected(text.error().message() + "\n");
  auto checked = check_vmi(*text, fallback_hypervisor, host);
  if (!checked)
    return tl::unexpected(format_violations(checked.error(), path == "-" ? "<stdin>" : path));
  return std::move(*checked);
}

namespace {
// The guest memory as the user wrote it ("1024M"), from where KubeVirt takes it.
std::string memory_text(const Vmi& vmi) {
  const Domain& d = vmi.spec.domain;
  if (d.memory.guest) return d.memory.guest->text;
  if (d.resources.limit_memory) return d.resources.limit_memory->text;
  if (d.resources.request_memory) return d.resources.request_memory->text;
  return "no";
}
}  // namespace

std::string vmi_summary(const Vmi& vmi, const HypervisorCapabilities& caps) {
  const CpuTopology t = cpu_topology(vmi);
  const auto plural = [](std::size_t n, const char* one) {
    return std::to_string(n) + " " + one + (n == 1 ? "" : "s");
  };
  const Firmware& fw = vmi.spec.domain.firmware;
  std::string boot = fw.kernel_boot.present             ? "kernel"
                     : fw.bootloader == Bootloader::Efi ? "efi"
                                                        : "bios";
  std::size_t nics = vmi.spec.domain.devices.interfaces.size();
  if (nics == 0 && vmi.spec.networks.empty() &&
      vmi.spec.domain.devices.autoattach_pod_interface.value_or(true)) {
    nics = 1;  // KubeVirt's default pod interface
  }
  // Filesystems only when there are some (virtiofs, each on its virtiofs container's socket).
  std::string fss;
  for (const auto& f : vmi.spec.domain.devices.filesystems)
    fss += (fss.empty() ? "" : ", ") + f.name;
  if (!fss.empty())
    fss = ", " + plural(vmi.spec.domain.devices.filesystems.size(), "filesystem") +
          " (virtiofs: " + fss + ")";
  return vmi.metadata.namespace_ + "/" + vmi.metadata.name + " on " + std::string(caps.name) +
         ": " + plural(t.vcpus(), "vCPU") + ", " + memory_text(vmi) + " memory, " +
         plural(vmi.spec.domain.devices.disks.size(), "disk") + ", " + plural(nics, "interface") +
         fss + ", boot " + boot;
}

std::string format_warnings(const Violations& w, const std::string& source) {
  std::string out;
  for (const auto& x : w) out += "warning: " + source + ": " + to_string(x) + "\n";
  return out;
}

std::string format_violations(const Violations& v, const std::string& source) {
  std::string s;
  for (const auto& x : v) s += source + ": " + to_string(x) + "\n";
  return s;
}

tl::expected<const HypervisorCapabilities*, Violation> select_hypervisor(
    const Vmi& vmi, std::string_view fallback) {
  const bool from_spec = !vmi.spec.hypervisor.empty();
  const std::string name = from_spec ? vmi.spec.hypervisor : std::string(fallback);
  if (const auto* caps = find_hypervisor(name)) return caps;
  return tl::unexpected(
      Violation{from_spec ? "spec.hypervisor" : "--hypervisor",
                "unknown hypervisor \"" + name + "\"; expected one of " + hypervisor_names()});
}

Violations validate(const Vmi& vmi, const HypervisorCapabilities& caps, const HostFacts& host) {
  return Checker(vmi, caps, host).run();
}

tl::expected<CheckedVmi, Violations> check_vmi(std::string_view text,
                                               std::string_view fallback_hypervisor,
                                               const HostFacts& host) {
  ParseOutcome parsed = parse_vmi(text);
  if (parsed.fatal) return tl::unexpected(std::move(parsed.problems));
  apply_kubevirt_defaults(parsed.vmi);
  Violations all = std::move(parsed.problems);
  const std::size_t parse_count = all.size();
  auto caps = select_hypervisor(parsed.vmi, fallback_hypervisor);
  if (!caps) {
    all.push_back(caps.error());
    return tl::unexpected(std::move(all));
  }
  Violations warnings = fit_hotplug_headroom(parsed.vmi, (*caps)->max_vcpus, kMaxGuestMemory);
  Checker checker(parsed.vmi, **caps, host);
  for (auto& v : checker.run()) {
    // A field the parser already rejected is absent from the model: do not report it twice
    // ("bad quantity" then "missing").
    bool duplicate = false;
    for (std::size_t i = 0; i < parse_count && !duplicate; ++i) {
      const std::string& pp = all[i].path;
      duplicate =
          pp == v.path ||
          (starts_with(v.message, "missing") &&
           (starts_with(pp, "spec.domain.memory") || starts_with(pp, "spec.domain.resources")) &&
           (starts_with(v.path, "spec.domain.memory") ||
            starts_with(v.path, "spec.domain.resources")));
    }
    if (!duplicate) all.push_back(std::move(v));
  }
  if (!all.empty()) return tl::unexpected(std::move(all));
  warnings.insert(warnings.end(), checker.warnings().begin(), checker.warnings().end());
  return CheckedVmi{std::move(parsed.vmi), *caps, std::move(warnings)};
}

}  // namespace chl::vmi

#pragma once
// The validator's rule set: Checker walks one VMI against one hypervisor's capabilities and
// collects every problem. Not part of vmi/'s interface: only the validator's files include it
// (validator.cpp: run() and the entry points; validate_domain.cpp, validate_devices.cpp,
// validate_volumes.cpp: the rules for each section of the VMI).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "vmi/hypervisor_capabilities.hpp"
#include "vmi/quantity.hpp"
#include "vmi/validator.hpp"
#include "vmi/vmi.hpp"

namespace chl::vmi {

// The refusal of KubeVirt's Dynamic Resource Allocation form of GPUs and host devices, on
// both hypervisors: the launcher cannot yet read the device a claim allocated.
inline constexpr const char* kDraNotSupported =
    "DRA devices (claimName/requestName with spec.resourceClaims) are not supported by ch-launcher "
    "yet: "
    "the launcher does not read which device a resource claim allocated; use deviceName (a device "
    "plugin's resource) on qemu-kvm";

// a-z or 0-9.
bool is_alnum_lower(char c);
// A path with a ".." component.
bool has_dotdot_component(std::string_view p);
// The kernel's name for an architecture ("amd64" -> "x86_64").
std::string kernel_arch(std::string_view a);

class Checker {
 public:
  Checker(const Vmi& vmi, const HypervisorCapabilities& caps, const HostFacts& host)
      : vmi_(vmi), caps_(caps), host_(host) {}

  Violations run();
  // What run() accepted but served differently ("<path>: <note>"), after run().
  [[nodiscard]] const Violations& warnings() const { return warnings_; }

 private:
  void add(std::string path, std::string msg) { out_.push_back({std::move(path), std::move(msg)}); }

  // Refuse `f` at `path` when the hypervisor cannot serve it; warn when it serves it differently
  // (unless `quiet`: the value came from KubeVirt's defaulting, not from the document).
  void require(Feature f, const std::string& path, bool quiet = false) {
    const FeatureSupport& s = caps_.support(f);
    if (!s.supported)
      add(path, std::string(s.note));
    else if (s.warn && !quiet)
      warnings_.push_back({path, std::string(s.note)});
  }

  // A name that must be a DNS-1123 label; `what` for the message.
  bool check_label(const std::string& name, const std::string& path) {
    if (name.empty()) {
      add(path, "required");
      return false;
    }
    if (name.find('/') != std::string::npos || name.find("..") != std::string::npos) {
      add(path, "\"" + name + "\" must not contain '/' or '..'");
      return false;
    }
    if (!is_dns1123_label(name)) {
      add(path, "\"" + name +
                    "\" is not a valid name: at most 63 lowercase letters, digits and '-', "
                    "starting and ending with a letter or digit");
      return false;
    }
    return true;
  }

  // Record `name` at `path` in `seen`; report a duplicate.
  void unique(std::map<std::string, std::string>& seen, const std::string& name,
              const std::string& path, const std::string& field_path) {
    if (name.empty()) return;
    auto [it, inserted] = seen.emplace(name, path);
    if (!inserted) add(field_path, "duplicate name \"" + name + "\" (also " + it->second + ")");
  }

  void check_metadata();
  // spec.accessCredentials: KubeVirt's admitter's rules (vmi-create-admitter.go
  // validateAccessCredentials), and only the qemuGuestAgent propagation.
  void check_access_credentials();

  void check_arch();

  void check_cpu();

  void check_memory();

  void check_firmware();

  void check_disks();

  void boot_order(std::int64_t order, const std::string& who, const std::string& path) {
    auto [it, inserted] = boot_orders_.emplace(order, who);
    if (!inserted) add(path, std::to_string(order) + " is also the boot order of " + it->second);
  }

  void check_interfaces();

  void check_networks();

  void check_devices();

  void check_features();

  void check_clock();

  void check_volumes();

  void disk_size(const std::optional<Quantity>& q, const std::string& path, bool required) {
    if (!q) {
      if (required) add(path, "required, e.g. 10Gi");
      return;
    }
    if (q->value <= 0)
      add(path, "must be positive, got " + q->text);
    else if (q->value > kMaxDiskSize)
      add(path, q->text + " is more than the 256Ti a disk may have");
  }

  static bool is_uuid(std::string_view s) {
    if (s.size() != 36) return false;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      if (i == 8 || i == 13 || i == 18 || i == 23) {
        if (c != '-') return false;
      } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
        return false;
      }
    }
    return true;
  }

  const Vmi& vmi_;
  const HypervisorCapabilities& caps_;
  const HostFacts& host_;
  std::map<std::int64_t, std::string> boot_orders_;
  Violations out_;
  Violations warnings_;
};

}  // namespace chl::vmi

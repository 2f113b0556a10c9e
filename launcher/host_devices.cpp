#include "launcher/host_devices.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace chl::launcher {
namespace {

// "0000:81:00.1": domain:bus:slot.function in hex, as the device plugins write it (KubeVirt's
// device.NewPciAddressField parses the same form).
bool is_pci_address(std::string_view a) {
  static constexpr std::string_view kShape = "xxxx:xx:xx.x";
  if (a.size() != kShape.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (kShape[i] == 'x' ? !std::isxdigit(static_cast<unsigned char>(a[i])) : a[i] != kShape[i])
      return false;
  }
  return true;
}

bool is_uuid(std::string_view u) {
  if (u.size() != 36) return false;
  for (std::size_t i = 0; i < u.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? u[i] != '-' : !std::isxdigit(static_cast<unsigned char>(u[i]))) return false;
  }
  return true;
}

// KubeVirt's AddressPool: resource -> addresses left; Pop takes the first and removes it from
// every resource.
class AddressPool {
 public:
  AddressPool(std::string_view prefix, const std::vector<std::string>& resources,
              const std::map<std::string, std::string>& env) {
    for (const auto& r : resources) {
      auto it = env.find(resource_env_var(prefix, r));
      if (it == env.end()) continue;  // KubeVirt logs "<VAR> not set for resource <r>" and goes on
      std::string v = it->second;
      if (!v.empty() && v.back() == ',') v.pop_back();
      std::vector<std::string> list;
      std::size_t at = 0;
      while (!v.empty() && at <= v.size()) {
        const std::size_t comma = std::min(v.find(',', at), v.size());
        list.push_back(v.substr(at, comma - at));
        at = comma + 1;
      }
      by_resource_[r] = std::move(list);
    }
  }
  std::string pop(const std::string& resource) {
    auto it = by_resource_.find(resource);
    if (it == by_resource_.end() || it->second.empty()) return {};
    const std::string a = it->second.front();
    for (auto& [_, list] : by_resource_)
      list.erase(std::remove(list.begin(), list.end(), a), list.end());
    return a;
  }

 private:
  std::map<std::string, std::vector<std::string>> by_resource_;
};

}  // namespace

std::string resource_env_var(std::string_view prefix, std::string_view resource) {
  std::string out(prefix);
  out += '_';
  for (char c : resource) {
    if (c == '/' || c == '.')
      out += '_';
    else
      out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return out;
}

tl::expected<std::vector<PlannedHostDevice>, vmi::Violations> plan_host_devices(
    const vmi::Vmi& vmi, const std::map<std::string, std::string>& env) {
  std::vector<PlannedHostDevice> out;
  vmi::Violations problems;
  // Host devices and GPUs are pooled apart, as virt-launcher does (generic and gpu packages).
  for (const bool gpu : {false, true}) {
    std::vector<const vmi::HostDevice*> devs;
    std::vector<std::string> resources;
    for (const auto& h : vmi.spec.domain.devices.host_devices) {
      if (h.gpu != gpu || h.device_name.empty()) continue;
      devs.push_back(&h);
      if (std::find(resources.begin(), resources.end(), h.device_name) == resources.end())
        resources.push_back(h.device_name);
    }
    if (devs.empty()) continue;
    AddressPool pci(kPciResourcePrefix, resources, env);
    AddressPool mdev(kMdevResourcePrefix, resources, env);
    const std::string list = gpu ? "spec.domain.devices.gpus" : "spec.domain.devices.hostDevices";
    std::vector<bool> placed(devs.size(), false);
    auto take = [&](AddressPool& pool, bool is_mdev) {
      for (std::size_t i = 0; i < devs.size(); ++i) {
        if (placed[i]) continue;
        const std::string a = pool.pop(devs[i]->device_name);
        if (a.empty()) continue;
        const std::string path = list + "[" + std::to_string(i) + "]";
        const std::string var = resource_env_var(is_mdev ? kMdevResourcePrefix : kPciResourcePrefix,
                                                 devs[i]->device_name);
        if (is_mdev ? !is_uuid(a) : !is_pci_address(a)) {
          problems.push_back(
              {path, var + " gives \"" + a + "\", which is not " +
                         (is_mdev ? "a mediated device UUID" : "a PCI address (0000:81:00.1)")});
          placed[i] = true;
          continue;
        }
        PlannedHostDevice d;
        d.name = devs[i]->name;
        d.alias = (gpu ? "gpu-" : "hostdevice-") + devs[i]->name;
        d.resource = devs[i]->device_name;
        d.gpu = gpu;
        d.mdev = is_mdev;
        d.address = a;
        d.sysfs_path = (is_mdev ? "/sys/bus/mdev/devices/" : "/sys/bus/pci/devices/") + a + "/";
        out.push_back(std::move(d));
        placed[i] = true;
      }
    };
    take(pci, false);
    take(mdev, true);
    for (std::size_t i = 0; i < devs.size(); ++i) {
      if (placed[i]) continue;
      problems.push_back(
          {list + "[" + std::to_string(i) + "]",
           "no device of resource \"" + devs[i]->device_name + "\" left for \"" + devs[i]->name +
               "\": " + resource_env_var(kPciResourcePrefix, devs[i]->device_name) + " and " +
               resource_env_var(kMdevResourcePrefix, devs[i]->device_name) +
               " (set by KubeVirt's device plugin) list no more addresses"});
    }
  }
  if (!problems.empty()) return tl::unexpected(std::move(problems));
  return out;
}

std::map<std::string, std::string> device_plugin_env(char** envp) {
  std::map<std::string, std::string> out;
  for (char** e = envp; e && *e; ++e) {
    const std::string_view kv(*e);
    const std::size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view name = kv.substr(0, eq);
    auto starts = [&](std::string_view p) {
      return name.size() > p.size() + 1 && name.substr(0, p.size()) == p && name[p.size()] == '_';
    };
    if (starts(kPciResourcePrefix) || starts(kMdevResourcePrefix))
      out.emplace(name, kv.substr(eq + 1));
  }
  return out;
}

}  // namespace chl::launcher

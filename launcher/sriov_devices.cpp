#include "launcher/sriov_devices.hpp"

#include <map>
#include <nlohmann/json.hpp>

namespace chl::launcher {
namespace {

// "0000:65:00.2", as device.NewPciAddressField (hwutil.ParsePciAddress) takes it.
bool pci_address_shape(std::string_view a) {
  static constexpr std::string_view kShape = "xxxx:xx:xx.x";
  if (a.size() != kShape.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const bool hex = (a[i] >= '0' && a[i] <= '9') || (a[i] >= 'a' && a[i] <= 'f') ||
                     (a[i] >= 'A' && a[i] <= 'F');
    if (kShape[i] == 'x' ? !hex : a[i] != kShape[i]) return false;
  }
  return true;
}

}  // namespace

tl::expected<std::vector<PlannedHostDevice>, vmi::Violations> plan_sriov_devices(
    const vmi::Vmi& vmi, std::string_view network_info) {
  std::vector<std::size_t> sriov;
  const auto& ifaces = vmi.spec.domain.devices.interfaces;
  for (std::size_t i = 0; i < ifaces.size(); ++i)
    if (ifaces[i].binding == vmi::Binding::Sriov) sriov.push_back(i);
  if (sriov.empty()) return std::vector<PlannedHostDevice>{};
  auto where = [&](std::size_t i) {
    return "spec.domain.devices.interfaces[" + std::to_string(i) + "].sriov";
  };
  const std::string file(kNetworkInfoPath);
  vmi::Violations problems;
  // NewPCIAddressPoolWithNetworkStatus: network -> the pci-address of its deviceInfo, when set.
  std::map<std::string, std::string> pool;
  // A missing or empty file (the caller gives "") leaves the pool empty, as
  // newPCIAddressPoolWithNetworkStatusFromFile does for a file it cannot read.
  const bool absent = network_info.find_first_not_of(" \t\r\n") == std::string_view::npos;
  const auto doc =
      absent ? nlohmann::json::object() : nlohmann::json::parse(network_info, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    problems.push_back(
        {where(sriov.front()), "the pod's network-info (" + file +
                                   ") is not JSON: failed to unmarshal network-info annotation"});
    return tl::unexpected(std::move(problems));
  }
  if (doc.contains("interfaces") && doc["interfaces"].is_array()) {
    for (const auto& e : doc["interfaces"]) {
      if (!e.is_object() || !e.contains("network") || !e["network"].is_string()) continue;
      const auto di = e.find("deviceInfo");
      if (di == e.end() || !di->is_object() || !di->contains("pci") || !(*di)["pci"].is_object())
        continue;
      const auto& pci = (*di)["pci"];
      if (pci.contains("pci-address") && pci["pci-address"].is_string() &&
          !pci["pci-address"].get<std::string>().empty())
        pool[e["network"].get<std::string>()] = pci["pci-address"].get<std::string>();
    }
  }
  if (pool.empty()) {
    // sriov/hostdev.go: "found no SR-IOV networks to PCI-Address mapping".
    problems.push_back({where(sriov.front()),
                        "found no SR-IOV networks to PCI-Address mapping in the pod's "
                        "network-info (" +
                            file + ", KubeVirt's kubevirt.io/network-info annotation)"});
    return tl::unexpected(std::move(problems));
  }
  std::vector<PlannedHostDevice> out;
  for (const std::size_t i : sriov) {
    const auto& iface = ifaces[i];
    // PCIAddressWithNetworkStatusPool.Pop(iface.Name): the interface's network has its name.
    auto it = pool.find(iface.name);
    if (it == pool.end()) {
      problems.push_back(
          {where(i), "PCI-Address for SR-IOV network \"" + iface.name + "\" not found in " + file});
      continue;
    }
    const std::string a = it->second;
    pool.erase(it);
    if (!pci_address_shape(a)) {
      problems.push_back({where(i), file + " gives network \"" + iface.name +
                                        "\" the PCI address \"" + a +
                                        "\", which is not one (0000:65:00.2)"});
      continue;
    }
    PlannedHostDevice d;
    d.name = iface.name;
    d.alias = "sriov-" + iface.name;
    d.resource = iface.name;
    d.address = a;
    d.sysfs_path = "/sys/bus/pci/devices/" + a + "/";
    out.push_back(std::move(d));
  }
  if (!problems.empty()) return tl::unexpected(std::move(problems));
  return out;
}

}  // namespace chl::launcher

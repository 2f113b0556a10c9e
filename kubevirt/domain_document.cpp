#include "kubevirt/domain_document.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "network/mac.hpp"
#include "network/plan.hpp"
#include "vmi/parser.hpp"

namespace chl::kubevirt {

using Json = nlohmann::json;

namespace {

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// KubeVirt's converter writes model "virtio" as virtio-non-transitional (the default
// useVirtioTransitional=false, converter/network: translateModel); others as they are.
std::string domain_model(const std::string& vmi_model) {
  if (vmi_model.empty() || vmi_model == "virtio") return "virtio-non-transitional";
  return vmi_model;
}

// The tap's MTU as the kernel has it (/sys/class/net/<tap>/mtu): the pod's, set by virt-handler's
// phase 1 (tap-device-maker.go); what the guest's NIC is on.
std::optional<unsigned> tap_mtu(const std::string& tap) {
  if (tap.empty() || tap.find('/') != std::string::npos) return std::nullopt;
  std::ifstream in("/sys/class/net/" + tap + "/mtu");
  unsigned mtu = 0;
  if (in >> mtu && mtu > 0) return mtu;
  return std::nullopt;
}

// j[key] when it is an object/array, else an empty one (a null or a missing key alike).
Json object_at(const Json& j, const char* key) {
  if (j.is_object() && j.contains(key) && j[key].is_object()) return j[key];
  return Json::object();
}
Json array_at(const Json& j, const char* key) {
  if (j.is_object() && j.contains(key) && j[key].is_array()) return j[key];
  return Json::array();
}
std::string string_at(const Json& j, const char* key) {
  if (j.is_object() && j.contains(key) && j[key].is_string()) return j[key].get<std::string>();
  return {};
}

}  // namespace

std::string disk_target_name(const std::string& prefix, std::size_t n) {
  // vda … vdz, vdaa … vdzz, as libvirt's virDiskNameFromIndex and KubeVirt's makeDeviceName.
  std::string suffix;
  for (std::size_t i = n + 1; i > 0; i = (i - 1) / 26)
    suffix.insert(suffix.begin(), static_cast<char>('a' + (i - 1) % 26));
  return prefix + suffix;
}

DomainDocument document_of(const vmi::Vmi& v, const std::string& hypervisor) {
  DomainDocument d;
  d.vmi_name = v.metadata.name;
  d.vmi_namespace = v.metadata.namespace_;
  d.vmi_uid = v.metadata.uid;
  d.uuid = v.spec.domain.firmware.uuid.empty() ? v.metadata.uid : v.spec.domain.firmware.uuid;
  d.grace_period_seconds = v.spec.termination_grace_period_seconds.value_or(30);
  d.machine = v.spec.domain.machine_type;
  const std::int64_t mem = vmi::guest_memory_bytes(v).value_or(0);
  d.memory_kib = static_cast<std::uint64_t>(mem / 1024);
  d.current_memory_kib = d.memory_kib;
  d.vcpus = static_cast<unsigned>(vmi::cpu_topology(v).vcpus());
  d.acpi = v.spec.domain.features.acpi.value_or(true);
  const bool multiqueue = v.spec.domain.devices.network_interface_multiqueue.value_or(false);
  // The pod's links by name, which say whether a secondary Multus network's interface has
  // KubeVirt's hashed name or an older pod's ordinal one (network::pod_interface_name).
  network::PodFacts pod;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/net", ec)) {
    network::PodLink link;
    link.name = e.path().filename().string();
    pod.links[link.name] = link;
  }
  for (const auto& i : v.spec.domain.devices.interfaces) {
    // SR-IOV interfaces are host devices (HostDevices, alias "sriov-<name>"), not interfaces. On
    // Cloud Hypervisor they are listed once CH has attached the VF (apply_vmm_info), never from
    // the VMI alone.
    if (i.binding == vmi::Binding::Sriov) {
      if (hypervisor != "cloud-hypervisor") d.sriov_interfaces.push_back(i.name);
      continue;
    }
    DomainInterface di;
    di.name = i.name;
    // The MAC the network plan gives the guest NIC (network/plan.cpp): the VMI's, or the one
    // derived from the VMI's uid; lowercase, as Go's net.HardwareAddr and libvirt write it.
    const auto mac = network::parse_mac(i.mac_address);
    di.mac = mac ? network::format_mac(*mac)
                 : network::format_mac(network::generated_mac(v.metadata.uid, i.name));
    di.mac = lowercase(di.mac);
    di.model = domain_model(i.model);
    const auto net = std::find_if(v.spec.networks.begin(), v.spec.networks.end(),
                                  [&i](const vmi::Network& n) { return n.name == i.name; });
    if (net != v.spec.networks.end()) {
      di.target_device = network::tap_name_for(network::pod_interface_name(v, *net, &pod));
      di.mtu = tap_mtu(di.target_device);
    }
    if (multiqueue && (i.model.empty() || i.model == "virtio") && d.vcpus > 1)
      di.queues = std::min(d.vcpus, 256u);
    d.interfaces.push_back(std::move(di));
  }
  for (const auto& k : v.spec.domain.devices.disks) {
    DomainDisk dd;
    dd.name = k.name;
    dd.device = k.device == vmi::DiskDevice::Cdrom ? "cdrom" : "disk";
    // Cloud Hypervisor serves virtio-blk only; libvirt's bus comes with its live XML.
    dd.bus = hypervisor == "qemu-kvm" && !k.bus.empty() ? k.bus : "virtio";
    dd.read_only = k.readonly;
    d.disks.push_back(std::move(dd));
  }
  // The guest agent channel: virt-handler reads only its Target (vm.go:665-674); the agent
  // itself is another room's (docs/kubevirt/guest-agent.md).
  d.agent_channel = true;
  d.agent_state = "disconnected";
  return d;
}

bool apply_vmm_info(DomainDocument& d, const Json& info,
                    const std::map<std::string, std::string>& hotplug_ids,
                    const std::set<std::string>& keep) {
  const Json before = to_domain_json(d);
  const Json config = object_at(info, "config");
  // Disks: by the VMM's device id (the volume name, or the hotplug id naming it).
  std::map<std::string, const Json*> by_name;
  std::map<std::string, std::string> target_of;
  std::set<std::string> hot_scsi;
  const Json disks = array_at(config, "disks");
  std::size_t n = 0;
  for (const auto& k : disks) {
    if (!k.is_object()) continue;
    std::string id = string_at(k, "id");
    if (auto h = hotplug_ids.find(id); h != hotplug_ids.end()) {
      id = h->second;
      if (string_at(k, "target").rfind("sd", 0) == 0)
        hot_scsi.insert(id);  // libvirt's, on virtio-scsi
    }
    by_name[id] = &k;
    // libvirt names its targets; Cloud Hypervisor does not: the guest's virtio-blk driver names
    // them in PCI order, which is the order of the config (CH adds devices as listed, hotplugged
    // ones after).
    const std::string target = string_at(k, "target");
    target_of[id] = target.empty() ? disk_target_name("vd", n) : target;
    ++n;
  }
  for (auto& dd : d.disks) {
    if (keep.count(dd.name)) continue;
    auto it = by_name.find(dd.name);
    if (it == by_name.end()) {
      dd.source.clear();
      dd.target_device.clear();
      continue;
    }
    const Json& k = *it->second;
    dd.source = string_at(k, "path");
    std::error_code ec;
    dd.block_device = !dd.source.empty() && std::filesystem::is_block_file(dd.source, ec);
    dd.target_device = target_of[dd.name];
    if (hot_scsi.count(dd.name)) dd.bus = "scsi";
    if (k.contains("readonly") && k["readonly"].is_boolean())
      dd.read_only = k["readonly"].get<bool>();
  }
  // Interfaces: Cloud Hypervisor's net ids are "net-<interface>" (network/vmm_handoff.cpp);
  // libvirt's come from the alias ("ua-<interface>", the prefix dropped by live_interfaces).
  for (const auto& nc : array_at(config, "net")) {
    if (!nc.is_object()) continue;
    std::string id = string_at(nc, "id");
    if (id.rfind("net-", 0) == 0) id.erase(0, 4);
    auto di = std::find_if(d.interfaces.begin(), d.interfaces.end(),
                           [&id](const DomainInterface& i) { return i.name == id; });
    if (di == d.interfaces.end()) continue;
    if (auto mac = string_at(nc, "mac"); !mac.empty()) di->mac = lowercase(mac);
    if (auto tap = string_at(nc, "tap"); !tap.empty()) di->target_device = tap;
    if (auto model = string_at(nc, "model"); !model.empty()) di->model = model;
    if (nc.contains("mtu") && nc["mtu"].is_number_unsigned() && nc["mtu"].get<unsigned>() > 0)
      di->mtu = nc["mtu"].get<unsigned>();
    else if (auto mtu = tap_mtu(di->target_device))
      di->mtu =
          mtu;  // CH given no `mtu` (it would need CAP_NET_ADMIN): the tap's, which the guest has
  }
  // VFIO devices: only those Cloud Hypervisor has really attached. vm.create keeps devices[] in
  // the config before any is opened (and a failed vm.boot leaves them there); a device enters
  // the device tree only once add_vfio_device has opened it (vmm/src/device_manager.rs
  // 3987-3997, v52.0), with its guest PCI address; vm.add-device adds it to the config after
  // (vm.rs:2209-2222). So: in the config and in the device tree.
  d.host_devices.clear();
  const Json tree = object_at(info, "device_tree");
  for (const auto& dc : array_at(config, "devices")) {
    const std::string id = string_at(dc, "id");
    if (id.empty() || !tree.contains(id)) continue;
    std::string path = string_at(dc, "path");
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    DomainHostDevice h;
    h.alias = id;
    h.mdev = path.rfind("/sys/bus/mdev/devices/", 0) == 0;
    h.source = std::filesystem::path(path).filename().string();
    h.guest_bdf = string_at(tree[id], "pci_bdf");
    d.host_devices.push_back(std::move(h));
  }
  if (const std::string machine = string_at(info, "machine"); !machine.empty()) d.machine = machine;
  return to_domain_json(d) != before;
}

}  // namespace chl::kubevirt

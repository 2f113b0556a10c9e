// LauncherHandler's hotplug (launcher_handler.hpp): volumes through Sync, CPU and memory through
// SyncVirtualMachineCPUs/Memory, SR-IOV VFs through HotplugHostDevices, each applied on the
// service's loop and told to virt-handler.
#include "kubevirt/launcher_hotplug.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "common/log.hpp"
#include "kubevirt/launcher_handler.hpp"
#include "launcher/launcher_service.hpp"
#include "launcher/sriov_devices.hpp"
#include "vmi/parser.hpp"

namespace chl::kubevirt {

using common::fail;
using common::Result;
using common::Status;
using Json = nlohmann::json;

namespace {

std::string join_paths(const std::vector<std::string>& v) {
  std::string all;
  for (const auto& s : v) all += (all.empty() ? "" : "; ") + s;
  return all;
}

// The interfaces of the VMI's status whose infoSource has "multus-status" (KubeVirt's
// vmispec.ContainsInfoSource: the sources joined by ", ").
std::set<std::string> multus_status_interfaces(const Json& vmi) {
  std::set<std::string> out;
  const Json status = vmi.value("status", Json::object());
  for (const auto& i : status.value("interfaces", Json::array())) {
    if (!i.is_object() || !i.contains("infoSource") || !i["infoSource"].is_string()) continue;
    std::stringstream sources(i["infoSource"].get<std::string>());
    for (std::string src; std::getline(sources, src, ',');) {
      src.erase(0, src.find_first_not_of(' '));
      if (src == "multus-status") out.insert(i.value("name", ""));
    }
  }
  return out;
}

// The entry named `name` of the array `key` of `parent`; null when none.
Json named_entry(const Json& parent, const char* key, const std::string& name) {
  if (!parent.is_object() || !parent.contains(key) || !parent[key].is_array()) return nullptr;
  for (const auto& e : parent[key])
    if (e.is_object() && e.value("name", "") == name) return e;
  return nullptr;
}

// Add `entry` to the array `key` of `parent` unless it has one of that name.
void add_named_entry(Json& parent, const char* key, const Json& entry) {
  if (entry.is_null() || !named_entry(parent, key, entry.value("name", "")).is_null()) return;
  if (!parent.contains(key) || !parent[key].is_array()) parent[key] = Json::array();
  parent[key].push_back(entry);
}

}  // namespace

std::map<std::string, bool> hotplug_volumes(const Json& vmi) {
  std::map<std::string, bool> out;
  const Json status = vmi.value("status", Json::object());
  for (const auto& v : status.value("volumeStatus", Json::array())) {
    if (!v.is_object() || !v.contains("hotplugVolume") || v["hotplugVolume"].is_null()) continue;
    const std::string phase = v.value("phase", "");
    out[v.value("name", "")] = phase == "HotplugVolumeMounted" || phase == "Ready";
  }
  return out;
}

Json without_hotplug_volumes(Json vmi) {
  const auto hot = hotplug_volumes(vmi);
  if (hot.empty() || !vmi.contains("spec")) return vmi;
  // (A list left empty goes: the VMI that ran may have had none.)
  auto drop = [&hot](Json& parent, const char* key) {
    if (!parent.is_object() || !parent.contains(key) || !parent[key].is_array()) return;
    Json kept = Json::array();
    for (auto& e : parent[key])
      if (!e.is_object() || !hot.count(e.value("name", ""))) kept.push_back(std::move(e));
    if (kept.empty()) parent.erase(key);
    else parent[key] = std::move(kept);
  };
  Json& spec = vmi["spec"];
  drop(spec, "volumes");
  if (spec.contains("domain") && spec["domain"].contains("devices")) drop(spec["domain"]["devices"], "disks");
  return vmi;
}

Status LauncherHandler::sync_hotplug_volumes(const Json& vmi) {
  const auto hot = hotplug_volumes(vmi);
  std::map<std::string, Json> disks;  // the VMI's disks by name
  for (const auto& d : vmi["spec"]["domain"]["devices"].value("disks", Json::array()))
    if (d.is_object()) disks[d.value("name", "")] = d;
  std::map<std::string, std::string> attached;
  {
    std::lock_guard lock(mu_);
    attached = hotplugged_;
  }
  bool changed = false;
  // Detach first: a volume replaced under the same name comes back below.
  for (const auto& [name, id] : attached) {
    auto h = hot.find(name);
    if (h != hot.end() && h->second && disks.count(name)) continue;
    CHL_TRY_VOID(command("detaching hotplug volume " + name,
                         [id = id](auto& s, auto reply) { s.remove_device(id, std::move(reply)); }));
    // Cloud Hypervisor drops the disk from its config at once but keeps the device until the
    // guest ejects it (vmm/src/vm.rs Vm::remove_device, device_manager.rs eject_device): while
    // its device tree has the id the domain keeps the disk (on_device_removed drops it).
    auto st = on_service("domain devices", [](auto& s, auto reply) { s.status(std::move(reply)); });
    const bool still_there = st && st->contains("info") && (*st)["info"].is_object() &&
                             (*st)["info"].contains("device_tree") && (*st)["info"]["device_tree"].is_object() &&
                             (*st)["info"]["device_tree"].contains(id);
    std::lock_guard lock(mu_);
    hotplugged_.erase(name);
    if (still_there && !ejected_.erase(id)) {
      CHL_LOG_INFO("hotplug volume {}: detached; the VMM keeps device {} until the guest ejects it", name, id);
      detaching_[id] = name;
      continue;
    }
    ejected_.erase(id);
    drop_disk_locked(name);
    changed = true;
  }
  for (const auto& [name, mounted] : hot) {
    if (!mounted || !disks.count(name) || attached.count(name)) continue;
    // virt-handler's mount: <dir>/<volume>.img for a filesystem volume, <dir>/<volume> for a
    // block one (pkg/hotplug-disk).
    namespace fs = std::filesystem;
    const fs::path dir(opts_.hotplug_disk_dir);
    std::error_code ec;
    fs::path path = dir / (name + ".img");
    bool block = false;
    if (!fs::is_regular_file(path, ec)) {
      path = dir / name;
      block = fs::is_block_file(path, ec);
      if (!block)
        return fail(std::errc::no_such_file_or_directory,
                    "hotplug volume " + name + ": not mounted into the pod (neither " + (dir / (name + ".img")).string() +
                        " nor a block device " + path.string() + ")");
    }
    const Json& d = disks[name];
    const bool readonly = d.value("disk", Json::object()).value("readonly", false);
    const std::string id = "hotplug-" + name;
    const Json config = {{"path", path.string()}, {"readonly", readonly}, {"id", id}};
    CHL_TRY_VOID(command("attaching hotplug volume " + name,
                         [config](auto& s, auto reply) { s.add_disk(config, std::move(reply)); }));
    std::lock_guard lock(mu_);
    hotplugged_[name] = id;
    DomainDisk dd;
    dd.name = name;
    dd.source = path.string();
    dd.block_device = block;
    dd.read_only = readonly;
    doc_.disks.push_back(std::move(dd));
    changed = true;
  }
  // virt-handler learns the new disks from a domain update, with the source and the target the
  // VMM gave them (a hotplug volume is Ready only once its Target.Device is set, vm.go:488-520).
  if (changed) {
    if (auto st = refresh_devices(true); !st)
      CHL_LOG_WARN("virt-handler: the hotplugged disks' targets could not be read from the VMM: {}",
                   st.error().message());
  }
  return {};
}

void LauncherHandler::drop_disk_locked(const std::string& name) {
  std::erase_if(doc_.disks, [&name](const DomainDisk& d) { return d.name == name; });
}

void LauncherHandler::on_device_removed(const std::string& id) {
  std::lock_guard lock(mu_);
  if (id.empty()) {  // every device still detaching went with the VM
    if (detaching_.empty()) return;
    for (const auto& [dev, name] : detaching_) drop_disk_locked(name);
    detaching_.clear();
    if (notify_ && phase_ == Phase::Running) send_locked(DomainEventType::Modified);
    return;
  }
  auto it = detaching_.find(id);
  if (it == detaching_.end()) {
    // The guest was quicker than the detach's own look at the device tree.
    if (ejected_.size() >= 64) ejected_.clear();
    ejected_.insert(id);
    return;
  }
  CHL_LOG_INFO("hotplug volume {}: the guest ejected device {}: the domain no longer has it", it->second, id);
  drop_disk_locked(it->second);
  detaching_.erase(it);
  if (notify_ && phase_ == Phase::Running) send_locked(DomainEventType::Modified);
}

LauncherHandler::Hotplug LauncherHandler::hotplug_now() const {
  std::lock_guard lock(mu_);
  return hotplug_;
}

std::vector<std::string> LauncherHandler::beyond_headroom(const Hotplug& h, const vmi::Vmi& want) {
  std::vector<std::string> why;
  const auto t = vmi::cpu_topology(want);
  if (t.cores != h.cores) why.push_back("spec.domain.cpu.cores: " + std::to_string(t.cores) + " (was " + std::to_string(h.cores) + "): only sockets can change while the VM runs");
  if (t.threads != h.threads) why.push_back("spec.domain.cpu.threads: " + std::to_string(t.threads) + " (was " + std::to_string(h.threads) + "): only sockets can change while the VM runs");
  if (t.sockets > h.max_sockets)
    why.push_back("spec.domain.cpu.sockets: " + std::to_string(t.sockets) + " is more than the " +
                  std::to_string(h.max_sockets) + " (maxSockets) the VM was started with");
  const std::int64_t mem = vmi::guest_memory_bytes(want).value_or(h.memory);
  if (mem > h.max_memory)
    why.push_back("spec.domain.memory.guest: " + std::to_string(mem) + " bytes is more than the " +
                  std::to_string(h.max_memory) + " (maxGuest) the VM was started with");
  if (mem < h.memory)
    why.push_back("spec.domain.memory.guest: " + std::to_string(mem) + " bytes is less than the " +
                  std::to_string(h.memory) + " the VM has: memory cannot be unplugged");
  return why;
}

Status LauncherHandler::hotplug(const std::string& what, std::optional<std::uint32_t> vcpus,
                                std::optional<std::int64_t> memory) {
  std::optional<std::uint64_t> bytes;
  if (memory) bytes = static_cast<std::uint64_t>(*memory);
  CHL_TRY_VOID(command(what, [vcpus, bytes](auto& s, auto reply) { s.resize(vcpus, bytes, std::move(reply)); }));
  std::lock_guard lock(mu_);
  if (vcpus) doc_.vcpus = *vcpus;
  if (memory) {
    hotplug_.memory = *memory;
    doc_.memory_kib = doc_.current_memory_kib = static_cast<std::uint64_t>(*memory / 1024);
  }
  // virt-handler learns the domain's new size from its next event, as from libvirt's.
  if (notify_ && phase_ == Phase::Running) notify_->send_domain_event(to_domain_json(doc_).dump(), DomainEventType::Modified);
  return {};
}

// What of `vmi_json` is beyond the running VM's headroom, for the fields under `field` only
// ("spec.domain.cpu", "spec.domain.memory"), as one refusal naming them; the VMI when within.
Result<vmi::Vmi> LauncherHandler::within_headroom(std::string_view vmi_json, const std::string& what,
                                                  const std::string& field) {
  CHL_TRY_VOID(this_pods_vmi(vmi_json));
  auto want = vmi::parse_vmi(vmi_json).vmi;
  auto why = beyond_headroom(hotplug_now(), want);
  std::erase_if(why, [&field](const std::string& w) { return w.rfind(field, 0) != 0; });
  if (!why.empty()) return fail(std::errc::invalid_argument, what + ": " + join_paths(why));
  return want;
}

// SyncVirtualMachineCPUs: the VMI's sockets, within maxSockets (cores and threads fixed), as
// CH's vm.resize desired_vcpus. SyncVirtualMachineMemory: memory.guest, within maxGuest, never
// less, as desired_ram.
Status LauncherHandler::sync_cpus(std::string_view vmi_json) {
  CHL_TRY(const vmi::Vmi want, within_headroom(vmi_json, "CPU hotplug", "spec.domain.cpu"));
  return hotplug("CPU hotplug", static_cast<std::uint32_t>(vmi::cpu_topology(want).vcpus()), std::nullopt);
}

Status LauncherHandler::sync_memory(std::string_view vmi_json) {
  CHL_TRY(const vmi::Vmi want, within_headroom(vmi_json, "memory hotplug", "spec.domain.memory"));
  const auto mem = vmi::guest_memory_bytes(want);
  if (!mem) return fail(std::errc::invalid_argument, "memory hotplug: the VMI sets no guest memory (spec.domain.memory.guest)");
  return hotplug("memory hotplug", std::nullopt, *mem);
}

// HotplugHostDevices, as virt-launcher's hotPlugHostDevices (KubeVirt d923fdb
// pkg/virt-launcher/virtwrap/manager.go:720-749): the host devices of the VMI's SR-IOV interfaces
// that have the multus-status source (sriov/hostdev.go CreateHostDevices:44-65), their VFs from
// the pod's network-info, less those whose alias the domain has (GetHostDevicesToAttach:223-233,
// here: Cloud Hypervisor's device tree), each attached (hostdevice/hotplug.go AttachHostDevices:
// every one tried, the failures joined). Unlike virt-launcher, which answers at once and only logs
// the outcome of its goroutine (manager.go:703-718), the answer waits for the attach and carries
// Cloud Hypervisor's error chain.
Status LauncherHandler::hotplug_host_devices(std::string_view vmi_json) {
  static const std::string kPrefix = "failed to hot-plug host-devices";
  CHL_TRY(const Json doc, this_pods_vmi(vmi_json));
  if (opts_.hypervisor != "cloud-hypervisor")
    return fail(std::errc::operation_not_supported,
                kPrefix + ": not supported by " + opts_.hypervisor + " (the libvirt path refuses SR-IOV interfaces)");
  // One at a time, as virt-launcher's hotplugHostDevicesInProgress (manager.go:704-708).
  std::unique_lock busy(host_device_hotplug_mu_, std::try_to_lock);
  if (!busy.owns_lock()) return fail(std::errc::device_or_resource_busy, "hot-plug host-devices is in progress");
  vmi::Vmi vmi = vmi::parse_vmi(vmi_json).vmi;
  const auto with_status = multus_status_interfaces(doc);
  std::erase_if(vmi.spec.domain.devices.interfaces, [&with_status](const vmi::Interface& i) {
    return i.binding == vmi::Binding::Sriov && !with_status.count(i.name);
  });
  // A network-info file that cannot be read gives no VF (newPCIAddressPoolWithNetworkStatusFromFile).
  std::string network_info;
  if (std::ifstream f(opts_.network_info_path); f) {
    std::ostringstream text;
    text << f.rdbuf();
    network_info = text.str();
  }
  auto planned = launcher::plan_sriov_devices(vmi, network_info);
  if (!planned) {
    std::vector<std::string> why;
    for (const auto& v : planned.error()) why.push_back(v.path + ": " + v.message);
    return fail(std::errc::invalid_argument, kPrefix + ": " + join_paths(why));
  }
  if (planned->empty()) return {};
  CHL_TRY(const Json st, on_service(kPrefix, [](auto& s, auto reply) { s.status(std::move(reply)); }));
  const Json info = st.value("info", Json::object());
  const Json tree = info.is_object() ? info.value("device_tree", Json::object()) : Json::object();
  std::vector<std::string> failed;
  std::vector<std::string> present;  // the SR-IOV interfaces whose VF the VM has now
  bool added = false;
  for (const auto& d : *planned) {
    if (tree.is_object() && tree.contains(d.alias)) {
      present.push_back(d.name);
      continue;
    }
    auto r = on_service("attaching host-device " + d.alias + " (" + d.address + ")",
                        [d](auto& s, auto reply) { s.add_host_device(d.alias, d.sysfs_path, std::move(reply)); });
    if (!r) {
      CHL_LOG_ERROR("{}", r.error().message());
      failed.push_back(r.error().message());
      continue;
    }
    CHL_LOG_INFO("hot-plugged host-device {} ({})", d.alias, d.address);
    present.push_back(d.name);
    added = true;
  }
  {
    // A later Sync carries these interfaces: they are part of the running domain now.
    std::lock_guard lock(mu_);
    const Json& spec = doc["spec"];
    for (const auto& name : present) {
      if (!launched_spec_.contains("domain")) launched_spec_["domain"] = Json::object();
      Json& domain = launched_spec_["domain"];
      if (!domain.contains("devices")) domain["devices"] = Json::object();
      add_named_entry(domain["devices"], "interfaces",
                      named_entry(spec.value("domain", Json::object()).value("devices", Json::object()), "interfaces", name));
      add_named_entry(launched_spec_, "networks", named_entry(spec, "networks", name));
    }
  }
  // virt-handler reads the interfaces' status from the domain's HostDevices (netstat.go:313-323):
  // the domain as the VMM has it now, only what it attached.
  if (added) {
    if (auto r = refresh_devices(true); !r)
      CHL_LOG_WARN("virt-handler: the hot-plugged host-devices could not be read from the VMM: {}", r.error().message());
  }
  if (!failed.empty()) return fail(std::errc::io_error, kPrefix + ": " + join_paths(failed));
  return {};
}

}  // namespace chl::kubevirt

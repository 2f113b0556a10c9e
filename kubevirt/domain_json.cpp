#include "kubevirt/domain_json.hpp"

#include <ctime>

#include "kubevirt/kubevirt_state.hpp"

namespace chl::kubevirt {

using nlohmann::json;

std::string domain_name(const std::string& vmi_namespace, const std::string& vmi_name) {
  return vmi_namespace + "_" + vmi_name;
}

std::string kubernetes_time(Timestamp t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

// api.Alias marshals as {"Name", "UserDefined"}; the "ua-" prefix exists only in the XML.
json user_alias(const std::string& name) { return {{"Name", name}, {"UserDefined", true}}; }

json interface_json(const DomainInterface& i) {
  json driver = nullptr;  // nil: one queue pair (netstat.go:292-297)
  if (i.queues > 1) driver = {{"Name", "vhost"}, {"Queues", i.queues}};
  return {
      {"Type", i.type},
      {"Target", i.target_device.empty() ? json(nullptr)
                                         : json{{"Device", i.target_device}, {"Managed", "no"}}},
      {"Model", {{"Type", i.model}}},
      {"MAC", i.mac.empty() ? json(nullptr) : json{{"MAC", i.mac}}},
      {"MTU", i.mtu ? json{{"Size", std::to_string(*i.mtu)}} : json(nullptr)},
      {"LinkState", nullptr},  // nil: "up" (netstat.go:300-308)
      {"Alias", user_alias(i.name)},
      {"Driver", driver},
  };
}

json disk_json(const DomainDisk& d) {
  json source = json::object();
  if (!d.source.empty()) source[d.block_device ? "Dev" : "File"] = d.source;
  json target = {{"Bus", d.bus}};
  if (!d.target_device.empty()) target["Device"] = d.target_device;
  return {
      {"Device", d.device},
      {"Type", d.block_device ? "block" : "file"},
      {"Source", source},
      {"Target", target},
      {"ReadOnly", d.read_only ? json::object() : json(nullptr)},
      {"Alias", user_alias(d.name)},
  };
}

// The guest agent channel as KubeVirt's converter writes it (converter.go,
// "org.qemu.guest_agent.0").
json channels_json(const DomainDocument& d) {
  if (!d.agent_channel) return nullptr;
  json source = nullptr;
  if (!d.agent_channel_path.empty()) source = {{"Mode", "bind"}, {"Path", d.agent_channel_path}};
  return json::array(
      {{{"Type", "unix"},
        {"Source", source},
        {"Target",
         {{"Name", "org.qemu.guest_agent.0"}, {"Type", "virtio"}, {"State", d.agent_state}}}}});
}

// An SR-IOV VF as KubeVirt's converter writes its host device (converter/network: sriov).
json sriov_json(const std::string& iface) {
  return {{"Type", "pci"}, {"Managed", "no"}, {"Alias", user_alias("sriov-" + iface)}};
}

// A Go slice: null when empty, as encoding/json writes a nil slice.
template <typename T, typename F>
json slice(const std::vector<T>& items, F&& to_json) {
  if (items.empty()) return nullptr;
  json a = json::array();
  for (const auto& i : items) a.push_back(to_json(i));
  return a;
}

// "0000:81:00.1" as api.Address (device.NewPciAddressField, device/pciaddress.go:27-40:
// Type "pci", each field "0x" and its hex digits); null when it is not one.
json pci_address_json(const std::string& a) {
  if (a.size() != 12 || a[4] != ':' || a[7] != ':' || a[10] != '.') return nullptr;
  return {{"Type", "pci"},
          {"Domain", "0x" + a.substr(0, 4)},
          {"Bus", "0x" + a.substr(5, 2)},
          {"Slot", "0x" + a.substr(8, 2)},
          {"Function", "0x" + a.substr(11, 1)}};
}

// A passed-through device as KubeVirt's hostdevice package writes it (hostdev.go:140-194); the
// guest address as libvirt's live XML has it (<address type='pci' .../>).
json host_device_json(const DomainHostDevice& h) {
  json j = {{"Alias", user_alias(h.alias)},
            {"Address", h.guest_bdf.empty() ? json(nullptr) : pci_address_json(h.guest_bdf)}};
  if (h.mdev) {
    j["Type"] = "mdev";
    j["Mode"] = "subsystem";
    j["Model"] = "vfio-pci";
    j["Source"] = {{"Address", {{"UUID", h.source}}}};
  } else {
    j["Type"] = "pci";
    j["Managed"] = "no";
    j["Source"] = {{"Address", pci_address_json(h.source)}};
  }
  return j;
}

json host_devices_json(const DomainDocument& d) {
  json all = slice(d.sriov_interfaces, sriov_json);
  for (const auto& h : d.host_devices) {
    if (all.is_null()) all = json::array();
    all.push_back(host_device_json(h));
  }
  return all;
}

// api.FilesystemDevice as converter/storage/virtiofs.go fills it; no json tags, so Go's field
// names, and Source.Dir (no omitempty) written empty.
json filesystem_json(const DomainFilesystem& f) {
  return {
      {"Type", "mount"},
      {"AccessMode", "passthrough"},
      {"Source", {{"Dir", ""}, {"Socket", f.socket}}},
      {"Target", {{"Dir", f.name}}},
      {"Driver", {{"Type", "virtiofs"}, {"Queue", "1024"}}},
      {"Binary", nullptr},
  };
}

json migration_json(const std::optional<DomainMigration>& m) {
  if (!m) return nullptr;
  auto time = [](const std::optional<Timestamp>& t) { return t ? json(kubernetes_time(*t)) : json(nullptr); };
  return {{"UID", m->uid},       {"StartTimestamp", time(m->start)},   {"EndTimestamp", time(m->end)},
          {"Completed", m->completed}, {"Failed", m->failed}, {"FailureReason", m->failure_reason},
          {"AbortStatus", m->abort_status}, {"Mode", m->mode}};
}

json metadata_json(const DomainDocument& d, bool with_grace_period) {
  json grace = nullptr;
  if (with_grace_period) {
    grace = {
        {"DeletionGracePeriodSeconds", d.grace_period_seconds},
        {"DeletionTimestamp",
         d.grace_period_start ? json(kubernetes_time(*d.grace_period_start)) : json(nullptr)},
        // virt-launcher leaves it unset (nil) until SIGTERM marks it true
        {"MarkedForGracefulShutdown", d.marked_for_graceful_shutdown ? json(true) : json(nullptr)},
    };
  }
  return {{"KubeVirt",
           {{"UID", d.vmi_uid},
            {"GracePeriod", grace},
            {"Migration", migration_json(d.migration)},
            {"Backup", nullptr},
            {"AccessCredential",
             d.access_credential ? json{{"Succeeded", d.access_credential->succeeded},
                                        {"Message", d.access_credential->message}}
                                 : json(nullptr)},
            {"MemoryDump", nullptr}}}};
}

json guest_interface_json(const GuestInterfaceStatus& i) {
  return {{"Mac", i.mac},
          {"Ip", i.ip},
          {"IPs", i.ips.empty() ? json(nullptr) : json(i.ips)},
          {"InterfaceName", i.interface_name}};
}

json status_json(const DomainDocument& d) {
  const KubevirtState s = to_kubevirt_state(d.state, d.reason);
  json panic = nullptr;
  if (d.panic) {
    panic = {{"Type", d.panic->type}};
    for (std::size_t i = 0; i < d.panic->args.size(); ++i)
      panic["Arg" + std::to_string(i + 1)] = d.panic->args[i];
  }
  return {
      {"Status", s.status},
      {"Reason", s.reason},
      {"Interfaces", slice(d.guest_interfaces, guest_interface_json)},
      {"OSInfo",
       {{"Name", d.os_info.name},
        {"KernelRelease", d.os_info.kernel_release},
        {"Version", d.os_info.version},
        {"PrettyName", d.os_info.pretty_name},
        {"VersionId", d.os_info.version_id},
        {"KernelVersion", d.os_info.kernel_version},
        {"Machine", d.os_info.machine},
        {"Id", d.os_info.id}}},
      {"FSFreezeStatus", {{"Status", d.fs_freeze_status}}},
      {"GuestPanicInfo", panic},
      {"PanicCount", d.panic_count},
  };
}

json spec_json(const DomainDocument& d) {
  const std::uint64_t current = d.current_memory_kib ? d.current_memory_kib : d.memory_kib;
  return {
      {"Type", d.hypervisor_type},
      {"Name", domain_name(d.vmi_namespace, d.vmi_name)},
      {"UUID", d.uuid},
      {"Memory", {{"Value", d.memory_kib}, {"Unit", "KiB"}}},
      {"CurrentMemory", {{"Value", current}, {"Unit", "KiB"}}},
      {"OS", {{"Type", {{"OS", "hvm"}, {"Arch", d.arch}, {"Machine", d.machine}}}}},
      {"Devices",
       {{"Interfaces", slice(d.interfaces, interface_json)},
        {"Disks", slice(d.disks, disk_json)},
        {"Filesystems", slice(d.filesystems, filesystem_json)},
        {"Channels", channels_json(d)},
        {"HostDevices", host_devices_json(d)}}},
      {"Metadata", metadata_json(d, true)},
      {"Features", d.acpi ? json{{"ACPI", json::object()}} : json(nullptr)},
      {"VCPU", {{"Placement", "static"}, {"CPUs", d.vcpus}}},
  };
}

}  // namespace

json to_domain_json(const DomainDocument& d) {
  json meta = {{"name", d.vmi_name}, {"namespace", d.vmi_namespace}};
  if (!d.vmi_uid.empty()) meta["uid"] = d.vmi_uid;
  if (d.deletion_timestamp) meta["deletionTimestamp"] = kubernetes_time(*d.deletion_timestamp);
  json spec = d.state == events::DomainState::NoState ? json{{"Metadata", metadata_json(d, false)}}
                                                      : spec_json(d);
  return {
      {"kind", "Domain"},
      {"apiVersion", "1.2.2"},  // what KubeVirt's launcher writes in the
                                // Domain's TypeMeta
      {"ObjectMeta", meta},
      {"Spec", spec},
      {"Status", status_json(d)},
  };
}

}  // namespace chl::kubevirt

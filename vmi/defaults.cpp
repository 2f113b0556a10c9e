#include "vmi/defaults.hpp"

#include <algorithm>
#include <cstdint>
#include <set>

#include "vmi/quantity.hpp"

namespace chl::vmi {
namespace {

Quantity bytes_quantity(std::int64_t bytes) {
  Quantity q;
  q.text = format_bytes_quantity(bytes);
  q.value = bytes;
  // Thousandths, saturated: a bytes value this large has no use for them (fuzz_vmi found the
  // overflow with a guest size near 2^62).
  q.milli = bytes > INT64_MAX / 1000 ? INT64_MAX : bytes * 1000;
  return q;
}

// setDefaultResourceRequests: a CPU limit without a request is also the request.
void default_resources(Resources& r) {
  if (r.limit_cpu && r.limit_cpu->value > 0 && !r.request_cpu) r.request_cpu = r.limit_cpu;
}

// setGuestMemory: the guest size from the memory request, else the limit, else one huge page.
void default_guest_memory(Memory& m, const Resources& r) {
  if (m.guest) return;
  if (r.request_memory && r.request_memory->value > 0) m.guest = r.request_memory;
  else if (r.limit_memory && r.limit_memory->value > 0) m.guest = r.limit_memory;
  else if (m.hugepages_page_size) m.guest = m.hugepages_page_size;
}

// SetDefaultGuestCPUTopology: sockets from the CPU limit (else request, else 1), one core and
// one thread each, when no topology is given at all.
void default_topology(Cpu& c, const Resources& r) {
  if (c.cores || c.sockets || c.threads) return;
  std::uint32_t sockets = 1;
  const auto& q = r.limit_cpu ? r.limit_cpu : r.request_cpu;
  if (q && q->value > 0 && q->value <= 0xffffffffLL) sockets = static_cast<std::uint32_t>(q->value);
  c.sockets = sockets;
  c.cores = 1;
  c.threads = 1;
}

// util.SetDefaultVolumeDisk: a volume that no disk or filesystem names gets a disk of its name.
void default_volume_disks(VmiSpec& s) {
  std::set<std::string> named;
  for (const auto& d : s.domain.devices.disks) named.insert(d.name);
  for (const auto& f : s.domain.devices.filesystems) named.insert(f.name);
  for (const auto& v : s.volumes) {
    if (v.name.empty() || named.count(v.name)) continue;
    Disk d;
    d.name = v.name;
    s.domain.devices.disks.push_back(std::move(d));
    named.insert(v.name);
  }
}

// setDefaultAmd64DisksBus: SATA for every disk, cdrom and lun that names no bus.
void default_disk_buses(Devices& dev) {
  for (auto& d : dev.disks) {
    if (!d.bus.empty() || d.device == DiskDevice::Floppy) continue;
    d.bus = kDefaultDiskBus;
    d.bus_defaulted = true;
  }
}

// setDefaults_Input (staging/src/kubevirt.io/api/core/v1/defaults.go): a USB tablet unless the
// input names its bus and type.
void default_inputs(Devices& dev) {
  for (auto& in : dev.inputs) {
    if (in.bus.empty()) in.bus = "usb";
    if (in.type.empty()) in.type = "tablet";
  }
}

// vmispec.SetDefaultNetworkInterface with the cluster default binding (bridge): an interface
// "default" on the pod network when the VMI names neither interfaces nor networks.
void default_pod_interface(VmiSpec& s) {
  auto& dev = s.domain.devices;
  if (!dev.autoattach_pod_interface.value_or(true)) return;
  if (!dev.interfaces.empty() || !s.networks.empty()) return;
  Interface i;
  i.name = "default";
  i.binding = Binding::Bridge;
  i.binding_count = 1;
  dev.interfaces.push_back(std::move(i));
  Network n;
  n.name = "default";
  n.kind = NetworkKind::Pod;
  s.networks.push_back(std::move(n));
}

// setupCPUHotplug: maxSockets = sockets x 4, at most 512 vCPUs in all.
void default_max_sockets(Cpu& c) {
  if (c.max_sockets != 0 || c.sockets == 0) return;
  c.max_sockets = c.sockets * kMaxHotplugRatio;
  const std::uint64_t per_socket = std::uint64_t{std::max(c.cores, 1u)} * std::max(c.threads, 1u);
  if (std::uint64_t{c.max_sockets} * per_socket > kMaxHotplugVcpus)
    c.max_sockets = std::max(static_cast<std::uint32_t>(kMaxHotplugVcpus / per_socket), c.sockets);
}

// setupMemoryHotplug: maxGuest = guest x 4 when ValidateLiveUpdateMemory accepts it.
void default_max_guest(VmiSpec& s) {
  Domain& d = s.domain;
  if (d.memory.max_guest || !d.memory.guest) return;
  if (d.cpu.realtime || d.cpu.numa_guest_mapping_passthrough || d.launch_security) return;
  const std::int64_t guest = d.memory.guest->value;
  const std::int64_t align = d.memory.hugepages_page_size && d.memory.hugepages_page_size->value == (std::int64_t{1} << 30)
                                 ? (std::int64_t{1} << 30)
                                 : kHotplugBlockAlignment;
  if (guest <= 0 || guest % align != 0) return;
  if (s.architecture != "amd64") return;
  if (guest < kHotplugMinGuestMemory) return;
  if (guest > INT64_MAX / kMaxHotplugRatio) return;
  d.memory.max_guest = bytes_quantity(guest * kMaxHotplugRatio);
}

}  // namespace

Violations fit_hotplug_headroom(Vmi& vmi, std::uint32_t max_vcpus, std::int64_t max_guest_memory) {
  Violations warnings;
  Cpu& c = vmi.spec.domain.cpu;
  const CpuTopology t = cpu_topology(vmi);
  const std::uint64_t per_socket = std::uint64_t{t.cores} * t.threads;
  if (c.max_sockets > t.sockets && per_socket > 0 && c.max_sockets * per_socket > max_vcpus) {
    const auto fit = static_cast<std::uint32_t>(std::max<std::uint64_t>(max_vcpus / per_socket, t.sockets));
    if (fit < c.max_sockets) {
      warnings.push_back({"spec.domain.cpu.maxSockets",
                          std::to_string(c.max_sockets) + " sockets of hotplug headroom is more than the hypervisor's " +
                              std::to_string(max_vcpus) + " vCPUs: lowered to " + std::to_string(fit)});
      c.max_sockets = fit;
    }
  }
  Memory& m = vmi.spec.domain.memory;
  if (m.max_guest && m.max_guest->value > max_guest_memory && m.guest && m.guest->value <= max_guest_memory) {
    warnings.push_back({"spec.domain.memory.maxGuest", m.max_guest->text + " of hotplug headroom is more than the largest guest (" +
                                                           format_bytes_quantity(max_guest_memory) + "): lowered to it"});
    if (m.guest->value == max_guest_memory) m.max_guest.reset();
    else m.max_guest = bytes_quantity(max_guest_memory);
  }
  return warnings;
}

void apply_kubevirt_defaults(Vmi& vmi) {
  VmiSpec& s = vmi.spec;
  if (!s.has_domain) return;  // the validator refuses it; nothing to default
  if (s.architecture.empty()) s.architecture = "amd64";
  if (s.domain.machine_type.empty()) s.domain.machine_type = kDefaultMachineType;
  default_resources(s.domain.resources);
  default_guest_memory(s.domain.memory, s.domain.resources);
  default_topology(s.domain.cpu, s.domain.resources);
  default_pod_interface(s);
  default_volume_disks(s);
  if (s.architecture == "amd64") default_disk_buses(s.domain.devices);
  default_inputs(s.domain.devices);
  if (s.domain.cpu.model.empty()) s.domain.cpu.model = kDefaultCpuModel;
  if (s.architecture == "amd64") {  // !IsARM64: LiveUpdate hotplug headroom
    default_max_sockets(s.domain.cpu);
    default_max_guest(s);
  }
}

}  // namespace chl::vmi

#include "vmi/vmi.hpp"

namespace chl::vmi {

std::string to_string(const Violation& v) {
  if (v.path.empty()) return v.message;
  return v.path + ": " + v.message;
}

const char* to_string(DiskDevice d) {
  switch (d) {
    case DiskDevice::Disk:
      return "disk";
    case DiskDevice::Cdrom:
      return "cdrom";
    case DiskDevice::Lun:
      return "lun";
    case DiskDevice::Floppy:
      return "floppy";
    case DiskDevice::None:
      return "none";
  }
  return "none";
}

const char* to_string(VolumeKind k) {
  switch (k) {
    case VolumeKind::ContainerDisk:
      return "containerDisk";
    case VolumeKind::EmptyDisk:
      return "emptyDisk";
    case VolumeKind::PersistentVolumeClaim:
      return "persistentVolumeClaim";
    case VolumeKind::DataVolume:
      return "dataVolume";
    case VolumeKind::Ephemeral:
      return "ephemeral";
    case VolumeKind::HostDisk:
      return "hostDisk";
    case VolumeKind::CloudInitNoCloud:
      return "cloudInitNoCloud";
    case VolumeKind::CloudInitConfigDrive:
      return "cloudInitConfigDrive";
    case VolumeKind::Secret:
      return "secret";
    case VolumeKind::ConfigMap:
      return "configMap";
    case VolumeKind::ServiceAccount:
      return "serviceAccount";
    case VolumeKind::DownwardApi:
      return "downwardAPI";
    case VolumeKind::Other:
      return "other";
    case VolumeKind::None:
      return "none";
  }
  return "none";
}

const char* to_string(Binding b) {
  switch (b) {
    case Binding::Bridge:
      return "bridge";
    case Binding::Masquerade:
      return "masquerade";
    case Binding::Sriov:
      return "sriov";
    case Binding::Slirp:
      return "slirp";
    case Binding::Passt:
      return "passt";
    case Binding::Macvtap:
      return "macvtap";
    case Binding::Plugin:
      return "binding";
    case Binding::None:
      return "none";
  }
  return "none";
}

CpuTopology cpu_topology(const Vmi& vmi) {
  const Cpu& cpu = vmi.spec.domain.cpu;
  CpuTopology t;
  if (cpu.cores) t.cores = cpu.cores;
  if (cpu.sockets) t.sockets = cpu.sockets;
  if (cpu.threads) t.threads = cpu.threads;
  if (!cpu.cores && !cpu.sockets && !cpu.threads) {
    const Resources& r = vmi.spec.domain.resources;
    const auto& q = r.limit_cpu ? r.limit_cpu : r.request_cpu;
    if (q && q->value > 0 && q->value <= 0xffffffffLL)
      t.sockets = static_cast<std::uint32_t>(q->value);
  }
  return t;
}

std::optional<std::int64_t> guest_memory_bytes(const Vmi& vmi) {
  const Domain& d = vmi.spec.domain;
  if (d.memory.guest) return d.memory.guest->value;
  if (d.resources.limit_memory) return d.resources.limit_memory->value;
  if (d.resources.request_memory) return d.resources.request_memory->value;
  return std::nullopt;
}

const Volume* find_volume(const Vmi& vmi, const std::string& name) {
  for (const auto& v : vmi.spec.volumes) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

const Network* find_network(const Vmi& vmi, const std::string& name) {
  for (const auto& n : vmi.spec.networks) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

std::size_t volume_index(const Vmi& vmi, const Volume& v) {
  return static_cast<std::size_t>(&v - vmi.spec.volumes.data());
}

}  // namespace chl::vmi

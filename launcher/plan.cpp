#include "launcher/plan.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/thread_affinity.hpp"
#include "vmi/realtime_mask.hpp"
#include "vmi/validator.hpp"

namespace chl::launcher {
namespace {

namespace fs = std::filesystem;

// KubeVirt's virt-launcher layout (pkg/container-disk, pkg/virt-launcher/virtwrap/converter,
// pkg/config) is PlanInputs::container_disk_dir and private_dir.
// Where Kubernetes mounts the pod's service account token (KubeVirt's ServiceAccountSourceDir).
constexpr const char* kPodServiceAccount = "/var/run/secrets/kubernetes.io/serviceaccount";
constexpr const char* kKernelBootVolume = "kernel-boot";

std::string hex_mac(const unsigned char b[6]) {
  char buf[18];
  std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4],
                b[5]);
  return buf;
}

class Planner {
 public:
  Planner(const vmi::Vmi& vmi, const vmi::HypervisorCapabilities& caps, const PlanInputs& in)
      : vmi_(vmi), caps_(caps), in_(in) {}

  tl::expected<LaunchPlan, vmi::Violations> run() {
    const vmi::ObjectMeta& m = vmi_.metadata;
    plan_.hypervisor = std::string(caps_.name);
    plan_.name = m.namespace_ + "/" + m.name;
    plan_.uid = m.uid;
    plan_.state_dir = in_.state_dir.empty() ? "/run/ch-launcher/" + m.namespace_ + "/" + m.name
                                            : fs::path(in_.state_dir).lexically_normal().string();
    while (plan_.state_dir.size() > 1 && plan_.state_dir.back() == '/') plan_.state_dir.pop_back();
    plan_cpus();
    plan_memory();
    plan_numa();
    plan_payload();
    plan_disks();
    plan_filesystems();
    plan_nics();
    plan_vfio();
    check_device_ids();
    const vmi::Devices& dev = vmi_.spec.domain.devices;
    plan_.serial_console = dev.autoattach_serial_console.value_or(true);
    plan_.rng = dev.rng;
    plan_.pvpanic = true;
    plan_.agent.vsock_socket = state("agent.vsock");
    const vmi::Firmware& fw = vmi_.spec.domain.firmware;
    plan_.platform_uuid = fw.uuid;
    plan_.platform_serial = fw.serial;
    if (!problems_.empty()) return tl::unexpected(std::move(problems_));
    return std::move(plan_);
  }

 private:
  void add(std::string path, std::string msg) {
    problems_.push_back({std::move(path), std::move(msg)});
  }

  std::string state(const std::string& rel) const { return plan_.state_dir + "/" + rel; }

  // The file behind a volume: --volume, else the pod layout's path, else a problem.
  std::optional<std::string> source_of(const vmi::Volume& v, const std::string& pod_path) {
    auto it = in_.volume_paths.find(v.name);
    if (it != in_.volume_paths.end()) return it->second;
    if (in_.pod_layout && !pod_path.empty()) return pod_path;
    add("spec.volumes[" + std::to_string(vmi::volume_index(vmi_, v)) + "]",
        "no file for volume \"" + v.name + "\" (" + to_string(v.kind) + "): pass --volume " +
            v.name + "=PATH, or --pod-layout inside a virt-launcher pod");
    return std::nullopt;
  }

  void plan_cpus() {
    const vmi::Cpu& c = vmi_.spec.domain.cpu;
    vmi::CpuTopology t = vmi::cpu_topology(vmi_);
    PlannedCpus& p = plan_.cpus;
    p.boot_vcpus = static_cast<std::uint32_t>(t.vcpus());
    p.topology = t;
    if (c.max_sockets > t.sockets) p.topology.sockets = c.max_sockets;
    p.max_vcpus = static_cast<std::uint32_t>(p.topology.vcpus());
    const vmi::Features& f = vmi_.spec.domain.features;
    p.kvm_hyperv = f.hyperv || f.hyperv_passthrough;
    if (!c.dedicated_cpu_placement) return;
    const std::string path = "spec.domain.cpu.dedicatedCpuPlacement";
    if (!in_.cpu_set || in_.cpu_set->empty()) {
      add(path,
          "needs the pod's CPU set: pass --cpu-set (e.g. 2-5) or run where "
          "/sys/fs/cgroup/cpuset.cpus.effective is readable");
      return;
    }
    // The boot vCPUs are pinned one to one; hotplug headroom (maxSockets, which KubeVirt's
    // defaulting puts on every VMI) is not: as in KubeVirt, the pod holds CPUs for the vCPUs
    // that run, and a CPU hotplug with dedicated CPUs needs a new pod.
    // isolateEmulatorThread: the CPU(s) after the vCPUs' hold every other thread, as KubeVirt's
    // converter picks them (pkg/virt-launcher/virtwrap/converter/vcpu/vcpu.go
    // FormatEmulatorThreadPin: the next free CPU of the pool; a second one with the
    // alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity annotation and an even vCPU count),
    // the CPUs virt-controller added to the pod for them (renderresources.go, +1 or +2).
    std::size_t emulator = 0;
    if (c.isolate_emulator_thread) {
      emulator = 1;
      if (vmi_.metadata.annotations.count("alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity") &&
          p.boot_vcpus % 2 == 0)
        emulator = 2;
    }
    const std::size_t need = p.boot_vcpus + emulator;
    if (in_.cpu_set->size() < need) {
      add(path, "needs " + std::to_string(need) + " dedicated CPUs" +
                    (emulator ? " (" + std::to_string(p.boot_vcpus) + " vCPUs and " +
                                    std::to_string(emulator) + " for isolateEmulatorThread)"
                              : std::string()) +
                    " but the pod's CPU set has " + std::to_string(in_.cpu_set->size()));
      return;
    }
    p.pinning.assign(in_.cpu_set->begin(), in_.cpu_set->begin() + p.boot_vcpus);
    p.emulator_cpus.assign(in_.cpu_set->begin() + p.boot_vcpus,
                           in_.cpu_set->begin() + static_cast<std::ptrdiff_t>(need));
    if (c.realtime) {
      auto mask = vmi::parse_realtime_mask(c.realtime_mask);
      if (!mask) {
        add("spec.domain.cpu.realtime.mask", mask.error());
        return;
      }
      p.realtime = true;
      p.realtime_vcpus = mask->enabled_among(p.boot_vcpus);
    }
  }

  // numa.guestMappingPassthrough (numa.hpp): after plan_cpus (the pinning) and plan_memory.
  void plan_numa() {
    const vmi::Domain& d = vmi_.spec.domain;
    if (!d.cpu.numa_guest_mapping_passthrough || plan_.cpus.pinning.empty() || !in_.host_numa) return;
    auto nodes = numa_mapping(plan_.cpus.pinning, *in_.host_numa, static_cast<std::uint64_t>(plan_.memory.size),
                              static_cast<std::uint64_t>(plan_.memory.hugepage_size));
    if (!nodes) {
      add("spec.domain.cpu.numa.guestMappingPassthrough", nodes.error());
      return;
    }
    plan_.memory.numa = std::move(*nodes);
  }

  // hostDevices and gpus from KubeVirt's device plugins (host_devices.hpp). VFIO maps all guest
  // memory for DMA, so the memory-lock limit must cover it: KubeVirt's virt-handler raises it only
  // for QEMU (pkg/hypervisor/kvm/runtime.go AdjustResources), so a pod whose container runtime
  // keeps a small default is refused here, before anything starts.
  // SR-IOV interfaces are VFIO devices too (sriov_devices.hpp), after the host devices and GPUs.
  void plan_vfio() {
    // The QEMU path's host devices are libvirt's business (its domain XML), not planned here.
    if (caps_.name != "cloud-hypervisor") return;
    if (!vmi_.spec.domain.devices.host_devices.empty()) {
      auto devs = plan_host_devices(vmi_, in_.device_env);
      if (!devs) {
        for (auto& v : devs.error()) add(std::move(v.path), std::move(v.message));
        return;
      }
      plan_.host_devices = std::move(*devs);
    }
    auto vfs = plan_sriov_devices(vmi_, in_.network_info);
    if (!vfs) {
      for (auto& v : vfs.error()) add(std::move(v.path), std::move(v.message));
      return;
    }
    plan_.host_devices.insert(plan_.host_devices.end(), vfs->begin(), vfs->end());
    if (plan_.host_devices.empty()) return;
    const auto need = static_cast<std::uint64_t>(plan_.memory.size + plan_.memory.hotplug_size);
    if (in_.memlock_limit && *in_.memlock_limit < need) {
      const auto& first = plan_.host_devices.front();
      const bool sriov = first.alias.rfind("sriov-", 0) == 0;
      add(sriov        ? "spec.domain.devices.interfaces"
          : first.gpu ? "spec.domain.devices.gpus"
                      : "spec.domain.devices.hostDevices",
          "VFIO locks all guest memory (" + std::to_string(need >> 20) + " MiB) but the launcher's memory-lock limit "
          "(RLIMIT_MEMLOCK) is " + std::to_string(*in_.memlock_limit >> 10) + " KiB; KubeVirt's virt-handler raises it "
          "only for a QEMU process: raise the container runtime's default (e.g. LimitMEMLOCK=infinity for containerd)");
    }
  }

  void plan_memory() {
    const vmi::Domain& d = vmi_.spec.domain;
    PlannedMemory& m = plan_.memory;
    const std::int64_t page = 4096;
    m.size = vmi::guest_memory_bytes(vmi_).value_or(0);
    m.size = (m.size + page - 1) / page * page;  // Cloud Hypervisor maps whole pages
    if (d.memory.max_guest && d.memory.max_guest->value > m.size) {
      m.hotplug_size = (d.memory.max_guest->value - m.size + page - 1) / page * page;
    }
    if (d.memory.hugepages_page_size) m.hugepage_size = d.memory.hugepages_page_size->value;
    for (const auto& f : d.devices.filesystems) m.shared = m.shared || f.virtiofs;
  }

  void plan_payload() {
    const vmi::Firmware& fw = vmi_.spec.domain.firmware;
    Payload& p = plan_.payload;
    if (fw.kernel_boot.present) {
      plan_kernel_boot(fw.kernel_boot);
      if (!caps_.kernel_boot_with_bootloader || fw.bootloader == vmi::Bootloader::None) return;
    }
    const bool efi = fw.bootloader == vmi::Bootloader::Efi;
    const std::string_view file = efi ? caps_.efi_firmware : caps_.bios_firmware;
    if (file.empty()) return;  // built into the VMM
    if (!in_.firmware_path.empty()) {
      p.firmware = in_.firmware_path;
      return;
    }
    p.firmware = state("firmware/" + std::string(file));
    Preparation prep;
    prep.kind = PreparationKind::FindFirmware;
    prep.target = p.firmware;
    prep.firmware = std::string(file);
    firmware_prep_ = std::move(prep);
  }

  // kernelPath/initrdPath resolved inside the kernel-boot root, never escaping it.
  void plan_kernel_boot(const vmi::KernelBoot& kb) {
    const std::string base = "spec.domain.firmware.kernelBoot.container.";
    std::string root;
    bool by_basename = false;
    if (auto it = in_.volume_paths.find(kKernelBootVolume); it != in_.volume_paths.end()) {
      root = it->second;
    } else if (in_.pod_layout) {
      root = in_.container_disk_dir + "/kernel-boot";  // artifacts copied by base name
      by_basename = true;
    } else {
      add("spec.domain.firmware.kernelBoot.container",
          "no directory for the kernel-boot container: pass --volume kernel-boot=DIR (its root "
          "filesystem), or --pod-layout inside a virt-launcher pod");
      return;
    }
    auto resolve = [&](const std::string& rel, const char* field) -> std::string {
      if (rel.empty()) return {};
      fs::path r = by_basename ? fs::path(rel).filename() : fs::path(rel).relative_path();
      fs::path full = (fs::path(root) / r).lexically_normal();
      fs::path rootn = fs::path(root).lexically_normal();
      auto rel_to_root = full.lexically_relative(rootn);
      bool inside = !rel_to_root.empty() && *rel_to_root.begin() != "..";
      // A symlink inside the image must not lead out of it either.
      std::error_code ec;
      if (inside && fs::exists(full, ec)) {
        fs::path canon = fs::weakly_canonical(full, ec);
        fs::path canon_root = fs::weakly_canonical(rootn, ec);
        auto rr = canon.lexically_relative(canon_root);
        inside = !ec && !rr.empty() && *rr.begin() != "..";
      }
      if (!inside) {
        add(base + field, "\"" + rel + "\" resolves outside the kernel-boot directory " + root);
        return {};
      }
      return full.string();
    };
    plan_.payload.kernel = resolve(kb.kernel_path, "kernelPath");
    plan_.payload.initramfs = resolve(kb.initrd_path, "initrdPath");
    plan_.payload.cmdline = kb.kernel_args;
  }

  void plan_disks() {
    const vmi::Devices& dev = vmi_.spec.domain.devices;
    const std::uint32_t queues = dev.block_multi_queue.value_or(false) ? plan_.cpus.boot_vcpus : 0;
    std::vector<std::size_t> order(dev.disks.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    // Disks with a bootOrder first, by that order; the others keep their spec order.
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      const auto& x = dev.disks[a].boot_order;
      const auto& y = dev.disks[b].boot_order;
      if (x && y) return *x < *y;
      return x.has_value() && !y.has_value();
    });
    std::vector<Preparation> disk_preps;
    for (std::size_t i : order) {
      const vmi::Disk& d = dev.disks[i];
      const vmi::Volume* v = vmi::find_volume(vmi_, d.name);
      if (!v) continue;  // the validator reported it
      PlannedDisk pd;
      pd.name = d.name;
      pd.readonly = d.readonly;
      pd.direct = d.cache == "none";
      pd.serial = d.serial;
      pd.num_queues = queues;
      pd.spec_index = i;
      if (!disk_file(*v, pd, disk_preps)) continue;
      plan_.disks.push_back(std::move(pd));
    }
    // Firmware first, then disks in device order, then filesystems (plan_filesystems).
    if (firmware_prep_) plan_.preparations.push_back(std::move(*firmware_prep_));
    for (auto& p : disk_preps) plan_.preparations.push_back(std::move(p));
  }

  bool disk_file(const vmi::Volume& v, PlannedDisk& pd, std::vector<Preparation>& preps) {
    const std::size_t vi = vmi::volume_index(vmi_, v);
    Preparation prep;
    prep.volume = v.name;
    switch (v.kind) {
      case vmi::VolumeKind::ContainerDisk: {
        auto src =
            source_of(v, in_.container_disk_dir + "/disk_" + std::to_string(vi) + ".img");
        if (!src) return false;
        prep.kind = PreparationKind::ConvertContainerDisk;
        prep.source = *src;
        prep.target = state("container-disks/" + v.name + ".img");
        prep.format = "raw";
        pd.path = prep.target;
        break;
      }
      case vmi::VolumeKind::EmptyDisk:
        prep.kind = PreparationKind::CreateEmptyDisk;
        prep.target = state("empty-disks/" + v.name + ".img");
        prep.size_bytes = v.capacity ? v.capacity->value : 0;
        prep.format = "raw";
        pd.path = prep.target;
        break;
      case vmi::VolumeKind::PersistentVolumeClaim:
      case vmi::VolumeKind::DataVolume: {
        auto src = source_of(v, (in_.private_dir + "/vmi-disks") + "/" + v.name + "/disk.img");
        if (!src) return false;
        pd.path = *src;
        pd.readonly = pd.readonly || v.read_only;
        return true;
      }
      case vmi::VolumeKind::Ephemeral: {
        auto src = source_of(v, (in_.private_dir + "/vmi-disks") + "/" + v.name + "/disk.img");
        if (!src) return false;
        prep.kind = PreparationKind::CreateOverlay;
        prep.source = *src;
        prep.target = state("ephemeral-disks/" + v.name + ".qcow2");
        prep.format = "qcow2";
        pd.path = prep.target;
        pd.qcow2_overlay = true;
        break;
      }
      case vmi::VolumeKind::HostDisk:
        pd.path = v.host_path;
        if (v.host_disk_type != "DiskOrCreate") return true;
        prep.kind = PreparationKind::CreateHostDisk;
        prep.target = v.host_path;
        prep.size_bytes = v.capacity ? v.capacity->value : 0;
        prep.format = "raw";
        break;
      case vmi::VolumeKind::CloudInitNoCloud:
      case vmi::VolumeKind::CloudInitConfigDrive: {
        const bool nocloud = v.kind == vmi::VolumeKind::CloudInitNoCloud;
        prep.kind = PreparationKind::WriteCloudInit;
        prep.datasource = nocloud ? "nocloud" : "configdrive";
        prep.volume_label = nocloud ? "cidata" : "config-2";
        prep.format = "iso9660";
        prep.target = state("cloud-init/" + v.name + ".iso");
        prep.user_data = v.cloud_init.user_data;
        prep.network_data = v.cloud_init.network_data;
        prep.instance_id = vmi_.metadata.name + "." + vmi_.metadata.namespace_;
        prep.hostname = vmi_.spec.hostname.empty() ? vmi_.metadata.name : vmi_.spec.hostname;
        prep.uuid = vmi_.metadata.uid;
        if (!v.cloud_init.user_data_secret.empty()) {
          auto dir = source_of(v, (in_.private_dir + "/secret") + "/" + v.name);
          if (!dir) return false;
          prep.user_data_file = *dir + "/userdata";
        }
        if (!v.cloud_init.network_data_secret.empty()) {
          prep.network_data_file = (in_.private_dir + "/secret") + "/" + v.name + "-ndata/networkdata";
          if (auto it = in_.volume_paths.find(v.name + "-ndata"); it != in_.volume_paths.end()) {
            prep.network_data_file = it->second + "/networkdata";
          }
        }
        pd.path = prep.target;
        break;
      }
      case vmi::VolumeKind::Secret:
      case vmi::VolumeKind::ConfigMap:
      case vmi::VolumeKind::ServiceAccount:
      case vmi::VolumeKind::DownwardApi: {
        std::string pod;
        if (v.kind == vmi::VolumeKind::Secret)
          pod = (in_.private_dir + "/secret") + "/" + v.name;
        else if (v.kind == vmi::VolumeKind::ConfigMap)
          pod = (in_.private_dir + "/config-map") + "/" + v.name;
        else if (v.kind == vmi::VolumeKind::ServiceAccount)
          pod = kPodServiceAccount;
        else
          pod = (in_.private_dir + "/downwardapi") + "/" + v.name;
        auto src = source_of(v, pod);
        if (!src) return false;
        prep.kind = PreparationKind::WriteConfigDisk;
        prep.source = *src;
        prep.target = state("config-disks/" + v.name + ".iso");
        prep.format = "iso9660";
        // KubeVirt's volume id: volumeLabel, else "cfgdata" (pkg/config). Read-only for the guest:
        // the image is rebuilt from the volume at every start.
        prep.volume_label = v.volume_label.empty() ? "cfgdata" : v.volume_label;
        pd.path = prep.target;
        pd.readonly = true;
        break;
      }
      default:
        return false;  // refused by the validator
    }
    preps.push_back(std::move(prep));
    return true;
  }

  // virtio-fs as KubeVirt does it: virt-controller adds a container per filesystem that runs
  // virtiofsd on the volume (pkg/virt-controller/services/virtiofs.go) and puts its vhost-user
  // socket in the emptyDir both containers mount; the launcher only connects the VM to that
  // socket (converter/storage/virtiofs.go) once it appears, and never needs the volume itself.
  void plan_filesystems() {
    const vmi::Devices& dev = vmi_.spec.domain.devices;
    for (std::size_t i = 0; i < dev.filesystems.size(); ++i) {
      const vmi::Filesystem& f = dev.filesystems[i];
      const vmi::Volume* v = vmi::find_volume(vmi_, f.name);
      if (!v || !f.virtiofs) continue;
      // The virtiofs container's mount point (virtioFSMountPoint): its own view, not ours.
      std::string shared;
      switch (v->kind) {
        case vmi::VolumeKind::PersistentVolumeClaim:
        case vmi::VolumeKind::DataVolume:
          shared = "/" + v->name;
          break;
        case vmi::VolumeKind::ConfigMap:
          shared = "/var/run/kubevirt-private/config-map/" + v->name;
          break;
        case vmi::VolumeKind::Secret:
          shared = "/var/run/kubevirt-private/secret/" + v->name;
          break;
        case vmi::VolumeKind::ServiceAccount:
          shared = kPodServiceAccount;
          break;
        case vmi::VolumeKind::DownwardApi:
          shared = "/var/run/kubevirt-private/downwardapi/" + v->name;
          break;
        default:
          add("spec.domain.devices.filesystems[" + std::to_string(i) + "]",
              "volume \"" + v->name + "\" (" + to_string(v->kind) +
                  ") cannot be shared with virtiofs; use a PVC, dataVolume, "
                  "configMap, secret, serviceAccount or downwardAPI");
          continue;
      }
      PlannedFilesystem pf;
      pf.name = f.name;
      pf.socket = virtiofs_socket_path(in_.virtiofs_dir, f.name);
      pf.shared_dir = shared;
      pf.volume_kind = to_string(v->kind);
      Preparation prep;
      prep.kind = PreparationKind::WaitVirtiofsSocket;
      prep.volume = f.name;
      prep.source = shared;
      prep.target = pf.socket;
      plan_.preparations.push_back(std::move(prep));
      plan_.filesystems.push_back(std::move(pf));
    }
  }

  void plan_nics() {
    const vmi::Devices& dev = vmi_.spec.domain.devices;
    std::vector<vmi::Interface> ifaces = dev.interfaces;
    std::vector<vmi::Network> nets = vmi_.spec.networks;
    // KubeVirt's defaulting: no interfaces and no networks -> one pod network "default" with a
    // bridge interface, unless autoattachPodInterface is false.
    if (ifaces.empty() && nets.empty() && dev.autoattach_pod_interface.value_or(true)) {
      vmi::Interface i;
      i.name = "default";
      i.binding = vmi::Binding::Bridge;
      i.binding_count = 1;
      ifaces.push_back(i);
      vmi::Network n;
      n.name = "default";
      n.kind = vmi::NetworkKind::Pod;
      nets.push_back(n);
    }
    const bool multiqueue = dev.network_interface_multiqueue.value_or(false);
    int next_secondary = 1;
    for (const auto& iface : ifaces) {
      auto net = std::find_if(nets.begin(), nets.end(),
                              [&](const vmi::Network& n) { return n.name == iface.name; });
      if (net == nets.end()) continue;  // reported by the validator
      PlannedNic nic;
      nic.name = iface.name;
      nic.binding = iface.binding;
      nic.network = net->kind;
      // KubeVirt's ordinal pod interface names: the pod (or default Multus) network is eth0, the
      // other Multus networks net1, net2... in order; the tap is "tap" + the name after its
      // three-letter prefix (GenerateTapDeviceName).
      const bool primary = net->kind == vmi::NetworkKind::Pod || net->multus_default;
      nic.pod_interface = primary ? "eth0" : "net" + std::to_string(next_secondary++);
      nic.tap = "tap" + nic.pod_interface.substr(3);
      if (!iface.mac_address.empty()) {
        unsigned char b[6];
        nic.mac = vmi::parse_mac(iface.mac_address, b) ? hex_mac(b) : iface.mac_address;
      } else {
        nic.mac = generated_mac(vmi_, iface.name);
        nic.mac_generated = true;
      }
      if (multiqueue && (iface.model.empty() || iface.model == "virtio")) {
        nic.num_queues = 2 * std::min<std::uint32_t>(plan_.cpus.boot_vcpus, 256);
      }
      plan_.nics.push_back(std::move(nic));
    }
  }

  // Cloud Hypervisor's device ids share one namespace: a disk and a NIC cannot both be "data".
  void check_device_ids() {
    std::map<std::string, std::string> seen;
    auto note = [&](const std::string& id, const std::string& what, const std::string& path) {
      auto [it, inserted] = seen.emplace(id, what);
      if (!inserted) {
        add(path, "\"" + id + "\" is also the name of " + it->second + "; " +
                      std::string(caps_.name) + " needs a distinct name for every device");
      }
    };
    for (const auto& d : plan_.disks) {
      note(d.name, "a disk",
           "spec.domain.devices.disks[" + std::to_string(d.spec_index) + "].name");
    }
    for (std::size_t i = 0; i < plan_.filesystems.size(); ++i) {
      note(plan_.filesystems[i].name, "a filesystem",
           "spec.domain.devices.filesystems[" + std::to_string(i) + "].name");
    }
    for (std::size_t i = 0; i < plan_.nics.size(); ++i) {
      note(plan_.nics[i].name, "an interface",
           "spec.domain.devices.interfaces[" + std::to_string(i) + "].name");
    }
  }

  const vmi::Vmi& vmi_;
  const vmi::HypervisorCapabilities& caps_;
  const PlanInputs& in_;
  LaunchPlan plan_;
  std::optional<Preparation> firmware_prep_;
  vmi::Violations problems_;
};

}  // namespace

tl::expected<LaunchPlan, vmi::Violations> plan_launch(const vmi::Vmi& vmi, const vmi::HypervisorCapabilities& caps,
                                                 const PlanInputs& inputs) {
  return Planner(vmi, caps, inputs).run();
}

std::string generated_mac(const vmi::Vmi& vmi, const std::string& interface_name) {
  // FNV-1a, 64 bits, over "<uid or namespace/name>/<interface>".
  std::string key = vmi.metadata.uid.empty() ? vmi.metadata.namespace_ + "/" + vmi.metadata.name
                                             : vmi.metadata.uid;
  key += "/" + interface_name;
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : key) {
    h ^= c;
    h *= 1099511628211ull;
  }
  unsigned char b[6];
  for (int i = 0; i < 6; ++i) b[i] = static_cast<unsigned char>(h >> (8 * i));
  b[0] = static_cast<unsigned char>((b[0] & 0xfc) | 0x02);  // locally administered, unicast
  return hex_mac(b);
}

std::optional<std::vector<std::uint32_t>> parse_cpu_list(std::string_view text) {
  return common::parse_cpu_list(text);
}

common::Result<std::vector<std::uint32_t>> read_cgroup_cpu_set(const std::string& path) {
  std::ifstream f(path);
  if (!f) return common::fail_errno("reading the pod's CPU set " + path);
  std::string text;
  std::getline(f, text);
  auto cpus = parse_cpu_list(text);
  if (!cpus)
    return common::fail(std::errc::invalid_argument, path + ": not a CPU list: \"" + text + "\"");
  return *cpus;
}

}  // namespace chl::launcher

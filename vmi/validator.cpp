#include "vmi/validator.hpp"

#include <sys/utsname.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>

#include "vmi/quantity.hpp"
#include "vmi/parser.hpp"

namespace chl::vmi {
namespace {

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

class Checker {
 public:
  Checker(const Vmi& vmi, const HypervisorCapabilities& caps, const HostFacts& host)
      : vmi_(vmi), caps_(caps), host_(host) {}

  Violations run() {
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
      if (s.domain.io_threads_policy)
        require(Feature::IoThreadsPolicy, "spec.domain.ioThreadsPolicy");
    }
    check_volumes();
    check_networks();
    if (s.termination_grace_period_seconds && *s.termination_grace_period_seconds < 0) {
      add("spec.terminationGracePeriodSeconds", "must not be negative");
    }
    if (!s.hostname.empty() && !is_dns1123_label(s.hostname)) {
      add("spec.hostname", "\"" + s.hostname + "\" is not a valid host name (a DNS-1123 label)");
    }
    return std::move(out_);
  }

 private:
  void add(std::string path, std::string msg) { out_.push_back({std::move(path), std::move(msg)}); }

  void require(Feature f, const std::string& path) {
    const FeatureSupport& s = caps_.support(f);
    if (!s.supported) add(path, std::string(s.note));
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

  void check_metadata() {
    const ObjectMeta& m = vmi_.metadata;
    if (m.name.empty()) {
      add("metadata.name", "required");
    } else if (m.name.find('/') != std::string::npos || m.name.find("..") != std::string::npos) {
      add("metadata.name", "\"" + m.name + "\" must not contain '/' or '..'");
    } else if (!is_dns1123_subdomain(m.name)) {
      add("metadata.name", "\"" + m.name +
                               "\" is not a valid name: lowercase letters, digits, '-' and '.', "
                               "starting and ending with a letter or digit, at most 253");
    }
    if (!m.namespace_.empty() && !is_dns1123_label(m.namespace_)) {
      add("metadata.namespace",
          "\"" + m.namespace_ + "\" is not a valid namespace (a DNS-1123 label)");
    }
  }

  void check_arch() {
    const VmiSpec& s = vmi_.spec;
    const std::string host = kernel_arch(host_.arch);
    if (!s.architecture.empty() && kernel_arch(s.architecture) != host) {
      add("spec.architecture", s.architecture + " VMs cannot run on this " + host + " host");
    }
    const std::string& mt = s.domain.machine_type;
    struct ArchMachine {
      std::string_view prefix;
      std::string_view arch;
    };
    static constexpr std::array<ArchMachine, 4> kMachines{{{"virt", "aarch64"},
                                                           {"s390-ccw", "s390x"},
                                                           {"pseries", "ppc64le"},
                                                           {"ppce500", "ppc64le"}}};
    for (const auto& m : kMachines) {
      if (mt.rfind(m.prefix, 0) == 0 && host != m.arch) {
        add("spec.domain.machine.type", "\"" + mt + "\" is a machine type for " +
                                            std::string(m.arch) + ", not for this " + host +
                                            " host");
      }
    }
  }

  void check_cpu() {
    const Domain& d = vmi_.spec.domain;
    const Cpu& c = d.cpu;
    const std::string p = "spec.domain.cpu";
    CpuTopology t = cpu_topology(vmi_);
    const std::uint64_t vcpus = t.vcpus();
    if (vcpus > caps_.max_vcpus) {
      add(p, std::to_string(vcpus) + " vCPUs (sockets " + std::to_string(t.sockets) + " x cores " +
                 std::to_string(t.cores) + " x threads " + std::to_string(t.threads) +
                 ") is more than " + std::string(caps_.name) + "'s maximum of " +
                 std::to_string(caps_.max_vcpus));
    }
    if (c.max_sockets) {
      if (c.max_sockets < t.sockets) {
        add(p + ".maxSockets", "must be at least sockets (" + std::to_string(t.sockets) + ")");
      } else if (std::uint64_t{c.max_sockets} * t.cores * t.threads > caps_.max_vcpus) {
        add(p + ".maxSockets", "maxSockets x cores x threads is more than " +
                                   std::string(caps_.name) + "'s maximum of " +
                                   std::to_string(caps_.max_vcpus) + " vCPUs");
      }
      require(Feature::CpuHotplug, p + ".maxSockets");
    }
    const Resources& r = d.resources;
    if (r.request_cpu && r.request_cpu->milli <= 0)
      add("spec.domain.resources.requests.cpu", "must be positive");
    if (r.limit_cpu && r.limit_cpu->milli <= 0)
      add("spec.domain.resources.limits.cpu", "must be positive");
    if (r.request_cpu && r.limit_cpu && r.request_cpu->milli > r.limit_cpu->milli) {
      add("spec.domain.resources.requests.cpu",
          "must not exceed limits.cpu (" + r.limit_cpu->text + ")");
    }
    if (!c.model.empty()) {
      if (c.model == "host-passthrough")
        require(Feature::CpuModelHostPassthrough, p + ".model");
      else if (c.model == "host-model")
        require(Feature::CpuModelHostModel, p + ".model");
      else
        require(Feature::CpuModelNamed, p + ".model");
    }
    if (!c.features.empty()) require(Feature::CpuFeatureFlags, p + ".features");
    for (std::size_t i = 0; i < c.features.size(); ++i) {
      static constexpr std::array<std::string_view, 5> kPolicies{"force", "require", "optional",
                                                                 "disable", "forbid"};
      const std::string fp = p + ".features[" + std::to_string(i) + "]";
      if (c.features[i].name.empty()) add(fp + ".name", "required");
      if (std::find(kPolicies.begin(), kPolicies.end(), c.features[i].policy) == kPolicies.end()) {
        add(fp + ".policy", "unknown policy \"" + c.features[i].policy +
                                "\"; expected force, require, optional, disable or forbid");
      }
    }
    if (c.dedicated_cpu_placement) require(Feature::DedicatedCpus, p + ".dedicatedCpuPlacement");
    if (c.isolate_emulator_thread) {
      if (!c.dedicated_cpu_placement) {
        add(p + ".isolateEmulatorThread", "requires dedicatedCpuPlacement: true");
      }
      require(Feature::IsolateEmulatorThread, p + ".isolateEmulatorThread");
    }
    if (c.numa_guest_mapping_passthrough) {
      require(Feature::NumaPassthrough, p + ".numa.guestMappingPassthrough");
      if (!d.memory.hugepages_page_size) {
        add(p + ".numa.guestMappingPassthrough", "requires memory.hugepages");
      }
    }
    if (c.realtime) require(Feature::Realtime, p + ".realtime");
  }

  void check_memory() {
    const Domain& d = vmi_.spec.domain;
    const Resources& r = d.resources;
    auto size_ok = [&](const std::optional<Quantity>& q, const std::string& path) {
      if (!q) return;
      if (q->value <= 0) {
        add(path, "must be positive, got " + q->text);
      } else if (q->value > kMaxGuestMemory) {
        add(path, q->text + " is more than the 16Ti a guest may have");
      }
    };
    size_ok(d.memory.guest, "spec.domain.memory.guest");
    size_ok(r.request_memory, "spec.domain.resources.requests.memory");
    size_ok(r.limit_memory, "spec.domain.resources.limits.memory");
    if (!guest_memory_bytes(vmi_)) {
      add("spec.domain.resources.requests.memory",
          "missing: set it (or spec.domain.memory.guest) to the guest's memory size, e.g. 1Gi");
      return;
    }
    if (r.request_memory && r.limit_memory && r.request_memory->value > r.limit_memory->value) {
      add("spec.domain.resources.requests.memory",
          "must not exceed limits.memory (" + r.limit_memory->text + ")");
    }
    if (d.memory.guest && r.limit_memory && d.memory.guest->value > r.limit_memory->value) {
      add("spec.domain.memory.guest",
          "must not exceed limits.memory (" + r.limit_memory->text + ")");
    }
    const std::int64_t guest = *guest_memory_bytes(vmi_);
    if (d.memory.max_guest) {
      const std::string mp = "spec.domain.memory.maxGuest";
      if (d.memory.max_guest->value < guest)
        add(mp, "must be at least the guest memory");
      else if (d.memory.max_guest->value > kMaxGuestMemory)
        add(mp, d.memory.max_guest->text + " is more than 16Ti");
      require(Feature::MemoryHotplug, mp);
    }
    if (d.memory.hugepages_page_size) {
      const std::string hp = "spec.domain.memory.hugepages.pageSize";
      const std::int64_t page = d.memory.hugepages_page_size->value;
      require(Feature::Hugepages, "spec.domain.memory.hugepages");
      if (page != (std::int64_t{2} << 20) && page != (std::int64_t{1} << 30)) {
        add(hp, "\"" + d.memory.hugepages_page_size->text +
                    "\" is not a hugepage size of this host; use 2Mi or 1Gi");
      } else if (guest > 0 && guest % page != 0) {
        add(hp, "guest memory " + format_bytes_quantity(guest) + " is not a multiple of the " +
                    d.memory.hugepages_page_size->text + " page size");
      }
    }
  }

  void check_firmware() {
    const Firmware& fw = vmi_.spec.domain.firmware;
    const std::string p = "spec.domain.firmware";
    if (!fw.uuid.empty() && !is_uuid(fw.uuid)) {
      add(p + ".uuid", "\"" + fw.uuid + "\" is not a UUID (8-4-4-4-12 hexadecimal digits)");
    }
    if (fw.bootloader == Bootloader::Efi) {
      require(Feature::EfiBoot, p + ".bootloader.efi");
      if (fw.efi_secure_boot.value_or(true)) {
        require(Feature::SecureBoot, p + ".bootloader.efi.secureBoot");
        if (caps_.supports(Feature::SecureBoot) && !vmi_.spec.domain.features.smm.value_or(false)) {
          add(p + ".bootloader.efi.secureBoot",
              "requires spec.domain.features.smm (KubeVirt's rule)");
        }
      }
      if (fw.efi_persistent) require(Feature::EfiPersistentVars, p + ".bootloader.efi.persistent");
    } else if (!fw.kernel_boot.present) {
      require(Feature::BiosBoot, p + ".bootloader");
    }
    const KernelBoot& kb = fw.kernel_boot;
    if (kb.present) {
      const std::string kp = p + ".kernelBoot";
      require(Feature::KernelBoot, kp);
      if (!kb.has_container) {
        add(kp + ".container", "required: the container image holding the kernel and initrd");
      } else {
        if (kb.image.empty()) add(kp + ".container.image", "required");
        if (kb.kernel_path.empty() && kb.initrd_path.empty()) {
          add(kp + ".container", "set kernelPath, initrdPath or both");
        }
        for (const auto& [field, value] :
             {std::pair{"kernelPath", &kb.kernel_path}, std::pair{"initrdPath", &kb.initrd_path}}) {
          if (has_dotdot_component(*value)) {
            add(kp + ".container." + field,
                "\"" + *value + "\" must stay inside the container image (no '..')");
          }
        }
      }
      if (fw.bootloader != Bootloader::None && !caps_.kernel_boot_with_bootloader) {
        add(p + ".bootloader",
            std::string(caps_.name) +
                " boots the kernel directly; remove bootloader when kernelBoot is set");
      }
    }
  }

  void check_disks() {
    const Devices& dev = vmi_.spec.domain.devices;
    std::map<std::string, std::string> names;
    std::map<std::string, std::string> volumes_used;
    for (std::size_t i = 0; i < dev.disks.size(); ++i) {
      const Disk& d = dev.disks[i];
      const std::string p = "spec.domain.devices.disks[" + std::to_string(i) + "]";
      const std::string short_p = "disks[" + std::to_string(i) + "]";
      check_label(d.name, p + ".name");
      unique(names, d.name, short_p, p + ".name");
      if (d.device_count > 1) add(p, "set only one of disk, cdrom, lun and floppy");
      const std::string dp = p + "." + to_string(d.device);
      switch (d.device) {
        case DiskDevice::Disk:
          require(Feature::DiskDevice, dp);
          break;
        case DiskDevice::Cdrom:
          require(Feature::CdromDevice, dp);
          break;
        case DiskDevice::Lun:
          require(Feature::LunDevice, dp);
          break;
        case DiskDevice::Floppy:
          require(Feature::FloppyDevice, dp);
          break;
        case DiskDevice::None:
          break;
      }
      if (!d.bus.empty()) {
        if (d.bus == "virtio")
          require(Feature::DiskBusVirtio, dp + ".bus");
        else if (d.bus == "sata")
          require(Feature::DiskBusSata, dp + ".bus");
        else if (d.bus == "scsi")
          require(Feature::DiskBusScsi, dp + ".bus");
        else if (d.bus == "usb")
          require(Feature::DiskBusUsb, dp + ".bus");
        else
          add(dp + ".bus", "unknown bus \"" + d.bus + "\"; expected virtio, sata, scsi or usb");
      }
      if (!d.pci_address.empty()) require(Feature::DiskPciAddress, dp + ".pciAddress");
      if (d.block_size_logical) require(Feature::DiskCustomBlockSize, p + ".blockSize");
      if (d.shareable) require(Feature::DiskShareable, p + ".shareable");
      if (!d.cache.empty() && d.cache != "none" && d.cache != "writethrough" &&
          d.cache != "writeback") {
        add(p + ".cache",
            "unknown cache mode \"" + d.cache + "\"; expected none, writethrough or writeback");
      }
      if (!d.io.empty() && d.io != "native" && d.io != "threads" && d.io != "default") {
        add(p + ".io", "unknown io mode \"" + d.io + "\"; expected native, threads or default");
      }
      if (!d.serial.empty()) {
        bool ok =
            d.serial.size() <= 20 && std::all_of(d.serial.begin(), d.serial.end(), [](char c) {
              return (c >= 'A' && c <= 'Z') || is_alnum_lower(c) || c == '-' || c == '_' ||
                     c == '.' || c == '+';
            });
        if (!ok)
          add(p + ".serial",
              "\"" + d.serial + "\" must be at most 20 letters, digits, '-', '_', '.' or '+'");
      }
      if (d.boot_order) boot_order(*d.boot_order, short_p, p + ".bootOrder");
      if (!d.name.empty()) {
        if (!find_volume(vmi_, d.name)) {
          add(p + ".name", "no volume named \"" + d.name + "\" in spec.volumes");
        } else {
          unique(volumes_used, d.name, short_p, p + ".name");
        }
      }
    }
    for (std::size_t i = 0; i < dev.filesystems.size(); ++i) {
      const Filesystem& f = dev.filesystems[i];
      const std::string p = "spec.domain.devices.filesystems[" + std::to_string(i) + "]";
      check_label(f.name, p + ".name");
      if (!f.virtiofs)
        add(p + ".virtiofs", "required: virtiofs is the only filesystem type");
      else
        require(Feature::Virtiofs, p + ".virtiofs");
      if (!f.name.empty() && !find_volume(vmi_, f.name)) {
        add(p + ".name", "no volume named \"" + f.name + "\" in spec.volumes");
      } else {
        unique(volumes_used, f.name, "filesystems[" + std::to_string(i) + "]", p + ".name");
      }
    }
  }

  void boot_order(std::int64_t order, const std::string& who, const std::string& path) {
    auto [it, inserted] = boot_orders_.emplace(order, who);
    if (!inserted) add(path, std::to_string(order) + " is also the boot order of " + it->second);
  }

  void check_interfaces() {
    const Devices& dev = vmi_.spec.domain.devices;
    std::map<std::string, std::string> names;
    std::map<std::string, std::string> networks_used;
    static constexpr std::array<std::string_view, 7> kOtherModels{
        "e1000", "e1000e", "igb", "rtl8139", "ne2k_pci", "pcnet", "virtio-transitional"};
    for (std::size_t i = 0; i < dev.interfaces.size(); ++i) {
      const Interface& n = dev.interfaces[i];
      const std::string p = "spec.domain.devices.interfaces[" + std::to_string(i) + "]";
      const std::string short_p = "interfaces[" + std::to_string(i) + "]";
      check_label(n.name, p + ".name");
      unique(names, n.name, short_p, p + ".name");
      if (n.binding_count == 0) {
        add(p, "missing binding: set one of bridge, masquerade, sriov, passt, macvtap or binding");
      } else if (n.binding_count > 1) {
        add(p, "set only one binding (bridge, masquerade, sriov, slirp, passt, macvtap, binding)");
      } else {
        static constexpr std::array<Feature, 7> kFeature{
            Feature::BindingBridge, Feature::BindingMasquerade, Feature::BindingSriov,
            Feature::BindingSlirp,  Feature::BindingPasst,      Feature::BindingMacvtap,
            Feature::BindingPlugin};
        require(kFeature[static_cast<std::size_t>(n.binding)], p + "." + to_string(n.binding));
      }
      if (!n.model.empty()) {
        if (n.model == "virtio")
          require(Feature::NicModelVirtio, p + ".model");
        else if (std::find(kOtherModels.begin(), kOtherModels.end(), n.model) != kOtherModels.end())
          require(Feature::NicModelOther, p + ".model");
        else
          add(p + ".model", "unknown model \"" + n.model + "\"");
      }
      if (!n.mac_address.empty()) {
        unsigned char mac[6];
        if (!parse_mac(n.mac_address, mac)) {
          add(p + ".macAddress",
              "\"" + n.mac_address +
                  "\" is not a MAC address (six hex pairs, e.g. 02:00:00:00:00:01)");
        } else if (mac[0] & 1) {
          add(p + ".macAddress",
              "\"" + n.mac_address + "\" is a multicast address; a NIC needs a unicast one");
        }
      }
      if (!n.pci_address.empty()) require(Feature::NicPciAddress, p + ".pciAddress");
      if (n.boot_order) {
        require(Feature::NicBootOrder, p + ".bootOrder");
        boot_order(*n.boot_order, short_p, p + ".bootOrder");
      }
      if (!n.name.empty()) {
        const Network* net = find_network(vmi_, n.name);
        if (!net) {
          add(p + ".name", "no network named \"" + n.name + "\" in spec.networks");
        } else if (n.binding == Binding::Masquerade && net->kind != NetworkKind::Pod) {
          add(p + ".masquerade", "masquerade needs a pod network; \"" + n.name + "\" is not one");
        }
      }
    }
  }

  void check_networks() {
    std::map<std::string, std::string> names;
    int pods = 0;
    const auto& ifaces = vmi_.spec.domain.devices.interfaces;
    for (std::size_t i = 0; i < vmi_.spec.networks.size(); ++i) {
      const Network& n = vmi_.spec.networks[i];
      const std::string p = "spec.networks[" + std::to_string(i) + "]";
      check_label(n.name, p + ".name");
      unique(names, n.name, "networks[" + std::to_string(i) + "]", p + ".name");
      switch (n.kind) {
        case NetworkKind::None:
          add(p, "missing source: set pod or multus");
          break;
        case NetworkKind::Pod:
          if (++pods == 2) add(p + ".pod", "only one pod network is allowed");
          break;
        case NetworkKind::Multus:
          require(Feature::NetworkMultus, p + ".multus");
          if (n.multus_network_name.empty()) add(p + ".multus.networkName", "required");
          break;
      }
      if (!n.name.empty() && std::none_of(ifaces.begin(), ifaces.end(),
                                          [&](const Interface& x) { return x.name == n.name; })) {
        add(p + ".name", "no interface named \"" + n.name + "\" in spec.domain.devices.interfaces");
      }
    }
  }

  void check_devices() {
    const Devices& dev = vmi_.spec.domain.devices;
    const std::string p = "spec.domain.devices";
    for (std::size_t i = 0; i < dev.host_devices.size(); ++i) {
      const HostDevice& h = dev.host_devices[i];
      std::size_t idx = i;
      if (h.gpu) {
        idx = static_cast<std::size_t>(
            std::count_if(dev.host_devices.begin(), dev.host_devices.begin() + static_cast<long>(i),
                          [](const HostDevice& x) { return x.gpu; }));
      }
      const std::string hp = p + (h.gpu ? ".gpus[" : ".hostDevices[") + std::to_string(idx) + "]";
      require(h.gpu ? Feature::Gpus : Feature::HostDevices, hp);
      if (h.device_name.empty()) add(hp + ".deviceName", "required");
      check_label(h.name, hp + ".name");
    }
    if (!dev.inputs.empty()) require(Feature::InputDevices, p + ".inputs");
    if (dev.autoattach_graphics_device.value_or(false)) {
      require(Feature::Graphics, p + ".autoattachGraphicsDevice");
    }
    if (dev.sound) require(Feature::Sound, p + ".sound");
    if (dev.client_passthrough) require(Feature::UsbRedirection, p + ".clientPassthrough");
    if (dev.watchdog) require(Feature::Watchdog, p + ".watchdog");
    if (dev.tpm) require(Feature::Tpm, p + ".tpm");
    if (dev.downward_metrics) require(Feature::DownwardMetrics, p + ".downwardMetrics");
    if (dev.use_virtio_transitional.value_or(false)) {
      require(Feature::VirtioTransitional, p + ".useVirtioTransitional");
    }
  }

  void check_features() {
    const Features& f = vmi_.spec.domain.features;
    const std::string p = "spec.domain.features";
    if (f.acpi) require(*f.acpi ? Feature::FeatureAcpi : Feature::FeatureAcpiDisabled, p + ".acpi");
    if (f.apic) require(*f.apic ? Feature::FeatureApic : Feature::FeatureOther, p + ".apic");
    if (f.smm.value_or(false)) require(Feature::FeatureSmm, p + ".smm");
    if (f.hyperv) require(Feature::FeatureHyperv, p + ".hyperv");
    if (f.hyperv_passthrough) require(Feature::FeatureHypervPassthrough, p + ".hypervPassthrough");
    if (f.kvm_hidden.value_or(false)) require(Feature::FeatureKvmHidden, p + ".kvm.hidden");
    if (f.pvspinlock) require(Feature::FeaturePvspinlock, p + ".pvspinlock");
    for (const auto& o : f.others) require(Feature::FeatureOther, p + "." + o);
  }

  void check_clock() {
    const Clock& c = vmi_.spec.domain.clock;
    const std::string p = "spec.domain.clock";
    if (!c.present) return;
    if (c.utc && c.utc_offset_seconds.value_or(0) != 0)
      require(Feature::ClockOffset, p + ".utc.offsetSeconds");
    else if (c.utc)
      require(Feature::ClockUtc, p + ".utc");
    if (!c.timezone.empty()) require(Feature::ClockTimezone, p + ".timezone");
    if (c.utc && !c.timezone.empty()) add(p, "set either utc or timezone, not both");
    if (c.timer) require(Feature::ClockTimer, p + ".timer");
  }

  void check_volumes() {
    std::map<std::string, std::string> names;
    static constexpr std::array<Feature, 13> kFeature{Feature::VolumeContainerDisk,
                                                      Feature::VolumeEmptyDisk,
                                                      Feature::VolumePvc,
                                                      Feature::VolumeDataVolume,
                                                      Feature::VolumeEphemeral,
                                                      Feature::VolumeHostDisk,
                                                      Feature::VolumeCloudInitNoCloud,
                                                      Feature::VolumeCloudInitConfigDrive,
                                                      Feature::VolumeSecret,
                                                      Feature::VolumeConfigMap,
                                                      Feature::VolumeServiceAccount,
                                                      Feature::VolumeDownwardApi,
                                                      Feature::VolumeOther};
    for (std::size_t i = 0; i < vmi_.spec.volumes.size(); ++i) {
      const Volume& v = vmi_.spec.volumes[i];
      const std::string p = "spec.volumes[" + std::to_string(i) + "]";
      check_label(v.name, p + ".name");
      unique(names, v.name, "volumes[" + std::to_string(i) + "]", p + ".name");
      if (v.kind_count == 0) {
        add(p,
            "missing source: set one of containerDisk, emptyDisk, persistentVolumeClaim, "
            "dataVolume, "
            "hostDisk, cloudInitNoCloud, cloudInitConfigDrive, secret, configMap, serviceAccount");
        continue;
      }
      if (v.kind_count > 1) {
        add(p, "set only one volume source");
        continue;
      }
      const std::string sp =
          p + "." + (v.kind == VolumeKind::Other ? v.other_kind : to_string(v.kind));
      require(kFeature[static_cast<std::size_t>(v.kind)], sp);
      switch (v.kind) {
        case VolumeKind::ContainerDisk:
          if (v.image.empty()) add(sp + ".image", "required");
          if (has_dotdot_component(v.image_path))
            add(sp + ".path", "must stay inside the image (no '..')");
          break;
        case VolumeKind::EmptyDisk:
          disk_size(v.capacity, sp + ".capacity", true);
          break;
        case VolumeKind::PersistentVolumeClaim:
        case VolumeKind::Ephemeral:
          if (v.claim_name.empty())
            add(sp + (v.kind == VolumeKind::Ephemeral ? ".persistentVolumeClaim" : "") +
                    ".claimName",
                "required");
          break;
        case VolumeKind::DataVolume:
          if (v.claim_name.empty()) add(sp + ".name", "required");
          break;
        case VolumeKind::HostDisk:
          if (v.host_path.empty())
            add(sp + ".path", "required");
          else if (v.host_path[0] != '/')
            add(sp + ".path", "\"" + v.host_path + "\" must be an absolute path");
          else if (has_dotdot_component(v.host_path))
            add(sp + ".path", "\"" + v.host_path + "\" must not contain '..'");
          if (v.host_disk_type != "Disk" && v.host_disk_type != "DiskOrCreate") {
            add(sp + ".type",
                (v.host_disk_type.empty() ? std::string("required")
                                          : "unknown type \"" + v.host_disk_type + "\"") +
                    "; expected Disk or DiskOrCreate");
          }
          disk_size(v.capacity, sp + ".capacity", v.host_disk_type == "DiskOrCreate");
          break;
        case VolumeKind::CloudInitNoCloud:
        case VolumeKind::CloudInitConfigDrive:
          if (v.cloud_init.user_data.empty() && v.cloud_init.user_data_secret.empty() &&
              v.cloud_init.network_data.empty() && v.cloud_init.network_data_secret.empty()) {
            add(sp, "set userData, userDataBase64 or secretRef");
          }
          break;
        case VolumeKind::Secret:
          if (v.ref_name.empty()) add(sp + ".secretName", "required");
          break;
        case VolumeKind::ConfigMap:
          if (v.ref_name.empty()) add(sp + ".name", "required");
          break;
        default:
          break;
      }
    }
  }

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
};

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

HostFacts current_host() {
  HostFacts h;
  struct utsname u {};
  if (::uname(&u) == 0) h.arch = u.machine;
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
  return vmi.metadata.namespace_ + "/" + vmi.metadata.name + " on " + std::string(caps.name) +
         ": " + plural(t.vcpus(), "vCPU") + ", " + memory_text(vmi) + " memory, " +
         plural(vmi.spec.domain.devices.disks.size(), "disk") + ", " + plural(nics, "interface") +
         ", boot " + boot;
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
  Violations all = std::move(parsed.problems);
  const std::size_t parse_count = all.size();
  auto caps = select_hypervisor(parsed.vmi, fallback_hypervisor);
  if (!caps) {
    all.push_back(caps.error());
    return tl::unexpected(std::move(all));
  }
  for (auto& v : validate(parsed.vmi, **caps, host)) {
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
  return CheckedVmi{std::move(parsed.vmi), *caps};
}

}  // namespace chl::vmi

#include "drivers/libvirt/domain_xml.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

#include "network/vmm_handoff.hpp"

namespace chl::libvirt {
namespace {

std::string attr(std::string_view name, std::string_view value) {
  return " " + std::string(name) + "='" + xml_escape(value) + "'";
}

// Is the file a qcow2 image (magic "QFI\xfb")? Absent or unreadable files are raw.
bool is_qcow2(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  if (!f.read(magic, 4)) return false;
  return magic[0] == 'Q' && magic[1] == 'F' && magic[2] == 'I' &&
         static_cast<unsigned char>(magic[3]) == 0xfb;
}

bool looks_like_uuid(const std::string& s) {
  if (s.size() != 36) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash != (s[i] == '-')) return false;
    if (!dash && !std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

// vda, vdb, ..., vdz, vdaa: libvirt's target names.
std::string target_name(const char* prefix, std::size_t index) {
  std::string suffix;
  std::size_t n = index + 1;
  while (n > 0) {
    --n;
    suffix.insert(suffix.begin(), static_cast<char>('a' + n % 26));
    n /= 26;
  }
  return prefix + suffix;
}

struct Bus {
  std::string name;  // virtio, sata, scsi, usb
  bool sd = false;   // sdX names (sata, scsi, usb share them)
};

Bus disk_bus(const vmi::Disk& d) {
  std::string b = d.bus;
  if (b.empty())
    b = d.device == vmi::DiskDevice::Cdrom ? "sata" : (d.device == vmi::DiskDevice::Lun ? "scsi" : "virtio");
  return {b, b != "virtio"};
}

const char* on_off(bool on) { return on ? "on" : "off"; }

// I/O threads as KubeVirt's converter gives them (converter/iothreads/iothreads.go
// GetIOThreadsCountType, storage/configurator.go + disk.go assignDiskIOThread,
// compute/controllers.go assignSCSIControllerIOThread): with ioThreadsPolicy shared or auto, or a
// disk with dedicatedIOThread, a pool of auto threads (shared: 1; auto: 2 per requested CPU, 1
// with an isolated emulator thread) and one per dedicated disk; in spec order, each virtio disk
// takes its dedicated thread (numbered after the auto ones) or the next auto one round robin.
struct IoThreads {
  std::uint32_t count = 0;            // <iothreads>; 0 = none
  std::vector<std::uint32_t> disk;    // per spec disk: its iothread, 0 = none
  std::uint32_t scsi_controller = 0;  // the virtio-scsi controller's, 0 = none
};

IoThreads io_threads(const vmi::Vmi& vmi) {
  const vmi::Domain& d = vmi.spec.domain;
  IoThreads t;
  t.disk.assign(d.devices.disks.size(), 0);
  const bool any_dedicated = std::any_of(d.devices.disks.begin(), d.devices.disks.end(),
                                         [](const vmi::Disk& x) { return x.dedicated_io_thread; });
  if (!d.io_threads_policy && !any_dedicated) return t;
  std::uint32_t dedicated = 0, autos = 0;
  for (const auto& x : d.devices.disks) (x.dedicated_io_thread ? dedicated : autos) += 1;
  std::uint32_t limit = 1;  // no policy or shared
  if (d.io_threads_policy_name == "auto") {
    if (d.cpu.dedicated_cpu_placement && d.cpu.isolate_emulator_thread) {
      limit = 1;
    } else {
      const auto& r = d.resources;
      const std::int64_t cpus = r.request_cpu ? r.request_cpu->value
                                : r.limit_cpu ? r.limit_cpu->value
                                              : 1;
      limit = static_cast<std::uint32_t>(std::max<std::int64_t>(cpus, 1)) * 2;
    }
  }
  if (autos + dedicated > limit)
    autos = limit > dedicated ? limit - dedicated : 1;  // at least one shared
  t.count = autos + dedicated;
  std::uint32_t next_dedicated = autos + 1, next_auto = 1;
  bool scsi_dedicated = false;
  for (std::size_t i = 0; i < d.devices.disks.size(); ++i) {
    const vmi::Disk& x = d.devices.disks[i];
    const std::string bus = x.bus.empty() ? "virtio" : x.bus;
    if (bus == "scsi" && x.dedicated_io_thread) scsi_dedicated = true;
    if (bus != "virtio" || x.device == vmi::DiskDevice::Cdrom) continue;
    if (x.dedicated_io_thread) {
      t.disk[i] = next_dedicated++;
    } else {
      t.disk[i] = next_auto;
      next_auto = next_auto % autos + 1;
    }
  }
  if (scsi_dedicated && autos > 0) t.scsi_controller = next_auto;
  return t;
}

// features.hyperv / hypervPassthrough as KubeVirt's converter writes them
// (converter/compute/hypervisor_features.go convertFeatureHypervToAPIFeatureHyperv; element names
// from api/schema.go FeatureHyperv). spinlocks without retries gets KubeVirt's API default, 4096
// (staging/src/kubevirt.io/api/core/v1/defaults.go SetDefaults_FeatureSpinlocks).
std::string hyperv_xml(const vmi::Features& f) {
  std::ostringstream x;
  if (f.hyperv) {
    x << "    <hyperv mode='custom'>\n";
    for (const auto& h : f.hyperv_features) {
      const std::string el = h.name == "synictimer" ? "stimer"
                             : h.name == "vendorid" ? "vendor_id"
                                                    : h.name;
      x << "      <" << el << " state='" << on_off(h.enabled) << "'";
      if (h.name == "spinlocks" && h.enabled)
        x << " retries='" << h.spinlocks.value_or(4096) << "'";
      if (h.name == "vendorid" && h.enabled) x << attr("value", h.vendor_id);
      if (h.name == "synictimer" && h.direct)
        x << ">\n        <direct state='" << on_off(*h.direct) << "'/>\n      </" << el << ">\n";
      else
        x << "/>\n";
    }
    x << "    </hyperv>\n";
  } else if (f.hyperv_passthrough) {
    x << "    <hyperv mode='passthrough'/>\n";
  }
  return x.str();
}

// spec.domain.clock as KubeVirt's converter writes it (converter/compute/clock.go
// convertClockToAPIClock): utc with the offset as adjustment ("reset" without one), or a
// timezone; timers rtc, pit, kvm (kvmclock), hpet, hyperv (hypervclock). No clock in the VMI:
// UTC.
std::string clock_xml(const vmi::Clock& c) {
  std::ostringstream x;
  x << "  <clock";
  if (c.present && !c.timezone.empty())
    x << " offset='timezone'" << attr("timezone", c.timezone);
  else
    x << " offset='utc'";
  if (c.present && c.utc)
    x << " adjustment='" << (c.utc_offset_seconds ? std::to_string(*c.utc_offset_seconds) : "reset")
      << "'";
  if (c.timers.empty()) {
    x << "/>\n";
    return x.str();
  }
  x << ">\n";
  for (const auto& t : c.timers) {
    const std::string name = t.name == "kvm"      ? "kvmclock"
                             : t.name == "hyperv" ? "hypervclock"
                                                  : t.name;
    x << "    <timer" << attr("name", name);
    if (!t.tick_policy.empty()) x << attr("tickpolicy", t.tick_policy);
    if (!t.track.empty()) x << attr("track", t.track);
    x << " present='" << (t.present ? "yes" : "no") << "'/>\n";
  }
  x << "  </clock>\n";
  return x.str();
}

}  // namespace

std::string domain_name(const vmi::Vmi& vmi) {
  return vmi.metadata.namespace_ + "_" + vmi.metadata.name;
}

std::string to_domain_xml(const vmi::Vmi& vmi, const launcher::LaunchPlan& plan, const DomainXmlOptions& opts) {
  const vmi::Domain& dom = vmi.spec.domain;
  const vmi::Devices& dev = dom.devices;
  const bool kvm = opts.accel == Accel::Kvm;
  const vmi::Firmware& fw = dom.firmware;
  const bool efi = fw.bootloader == vmi::Bootloader::Efi;
  const bool secure_boot = efi && fw.efi_secure_boot.value_or(true);
  const bool kernel_boot = !plan.payload.kernel.empty();
  std::ostringstream x;

  x << "<domain" << attr("type", kvm ? "kvm" : "qemu") << ">\n";
  x << "  <name>" << xml_escape(domain_name(vmi)) << "</name>\n";
  std::string uuid = looks_like_uuid(plan.platform_uuid) ? plan.platform_uuid
                     : looks_like_uuid(vmi.metadata.uid) ? vmi.metadata.uid
                                                         : std::string();
  if (!uuid.empty()) x << "  <uuid>" << uuid << "</uuid>\n";
  x << "  <description>"
    << xml_escape("VMI " + vmi.metadata.namespace_ + "/" + vmi.metadata.name + " uid " +
                  vmi.metadata.uid + ", run by ch-launcher")
    << "</description>\n";
  if (!opts.state_dir.empty())
    x << "  <metadata>\n    <chl:launcher" << attr("xmlns:chl", kLauncherMetadataUri)
      << "><chl:state-dir>" << xml_escape(opts.state_dir)
      << "</chl:state-dir></chl:launcher>\n  </metadata>\n";

  // Memory (bytes; libvirt rounds to KiB) and its backing.
  // Memory hotplug headroom (maxGuest) as KubeVirt gives it: <maxMemory>, and a virtio-mem
  // device attached at the first SyncVirtualMachineMemory (libvirt_driver.cpp), on the one
  // guest NUMA node below. (KubeVirt writes slots='0'; the libvirt here, 9.0, wants a count: one
  // slot, which virtio-mem does not use.)
  const bool memory_hotplug = plan.memory.hotplug_size > 0;
  if (memory_hotplug)
    x << "  <maxMemory slots='1' unit='b'>" << plan.memory.size + plan.memory.hotplug_size << "</maxMemory>\n";
  x << "  <memory unit='b'>" << plan.memory.size << "</memory>\n";
  if (plan.memory.hugepage_size > 0 || plan.memory.shared) {
    x << "  <memoryBacking>\n";
    if (plan.memory.hugepage_size > 0)
      x << "    <hugepages><page size='" << plan.memory.hugepage_size
        << "' unit='b'/></hugepages>\n";
    if (plan.memory.shared) x << "    <source type='memfd'/>\n    <access mode='shared'/>\n";
    x << "  </memoryBacking>\n";
  }

  const IoThreads iothreads = io_threads(vmi);
  if (iothreads.count > 0) x << "  <iothreads>" << iothreads.count << "</iothreads>\n";
  // vCPUs: max with the boot count current, pinning.
  x << "  <vcpu placement='static'";
  if (plan.cpus.boot_vcpus != plan.cpus.max_vcpus) x << " current='" << plan.cpus.boot_vcpus << "'";
  x << ">" << plan.cpus.max_vcpus << "</vcpu>\n";
  if (!plan.cpus.pinning.empty()) {
    x << "  <cputune>\n";
    for (std::size_t i = 0; i < plan.cpus.pinning.size(); ++i)
      x << "    <vcpupin vcpu='" << i << "' cpuset='" << plan.cpus.pinning[i] << "'/>\n";
    x << "  </cputune>\n";
  }
  const bool sysinfo = !fw.serial.empty() || !uuid.empty() || opts.smbios.has_value();
  if (sysinfo) {
    // KubeVirt's domain sysinfo: its cluster SMBIOS setting (from Sync's options), else its
    // defaults (manufacturer KubeVirt, product None).
    const launcher::SmbiosSystem sm = opts.smbios.value_or(launcher::SmbiosSystem{});
    auto entry = [&x](const char* name, const std::string& value) {
      if (!value.empty()) x << "      <entry name='" << name << "'>" << xml_escape(value) << "</entry>\n";
    };
    x << "  <sysinfo type='smbios'>\n    <system>\n";
    entry("manufacturer", sm.manufacturer.empty() ? std::string("KubeVirt") : sm.manufacturer);
    entry("product", sm.product.empty() ? std::string("None") : sm.product);
    entry("version", sm.version);
    entry("sku", sm.sku);
    entry("family", sm.family);
    if (!fw.serial.empty())
      x << "      <entry name='serial'>" << xml_escape(fw.serial) << "</entry>\n";
    if (!uuid.empty()) x << "      <entry name='uuid'>" << uuid << "</entry>\n";
    x << "    </system>\n  </sysinfo>\n";
  }

  // Boot: firmware (SeaBIOS by default, OVMF for EFI) or the kernel directly.
  x << "  <os>\n";
  x << "    <type arch='x86_64' machine='"
    << xml_escape(dom.machine_type.empty() ? "q35" : dom.machine_type) << "'>hvm</type>\n";
  if (efi) {
    const std::string code = secure_boot ? opts.ovmf_dir + "/OVMF_CODE_4M.secboot.fd"
                             : !plan.payload.firmware.empty() ? plan.payload.firmware
                                                              : opts.ovmf_dir + "/OVMF_CODE.fd";
    const std::string vars = secure_boot                         ? opts.ovmf_dir + "/OVMF_VARS_4M.ms.fd"
                             : !plan.payload.firmware_vars.empty() ? plan.payload.firmware_vars
                                                                   : opts.ovmf_dir + "/OVMF_VARS.fd";
    x << "    <loader readonly='yes'" << (secure_boot ? " secure='yes'" : "") << " type='pflash'>"
      << xml_escape(code) << "</loader>\n";
    x << "    <nvram" << attr("template", vars) << ">"
      << xml_escape(plan.state_dir + "/efi-vars.fd") << "</nvram>\n";
  }
  if (kernel_boot) {
    x << "    <kernel>" << xml_escape(plan.payload.kernel) << "</kernel>\n";
    if (!plan.payload.initramfs.empty())
      x << "    <initrd>" << xml_escape(plan.payload.initramfs) << "</initrd>\n";
    if (!plan.payload.cmdline.empty())
      x << "    <cmdline>" << xml_escape(plan.payload.cmdline) << "</cmdline>\n";
  }
  if (sysinfo) x << "    <smbios mode='sysinfo'/>\n";
  x << "  </os>\n";

  // Features.
  x << "  <features>\n";
  if (dom.features.acpi.value_or(true)) x << "    <acpi/>\n";
  if (dom.features.apic.value_or(true)) x << "    <apic/>\n";
  if (secure_boot || dom.features.smm.value_or(false)) x << "    <smm state='on'/>\n";
  if (kvm && dom.features.kvm_hidden.value_or(false)) x << "    <kvm><hidden state='on'/></kvm>\n";
  if (dom.features.pvspinlock)
    x << "    <pvspinlock state='" << (*dom.features.pvspinlock ? "on" : "off") << "'/>\n";
  x << hyperv_xml(dom.features);
  x << "  </features>\n";

  // CPU model and topology. Under TCG there is no host CPU to pass through or model: QEMU's
  // `max` CPU stands for host-model and host-passthrough.
  const vmi::CpuTopology& t = plan.cpus.topology;
  const std::string& model = dom.cpu.model;
  if (kvm && opts.plain_cpu) {
    x << "  <cpu mode='custom' match='exact' check='none'>\n    <model "
         "fallback='allow'>qemu64</model>\n";
  } else if (model.empty() || model == "host-model") {
    x << (kvm ? "  <cpu mode='host-model' check='partial'>\n"
              : "  <cpu mode='maximum' check='none'>\n");
  } else if (model == "host-passthrough") {
    x << (kvm ? "  <cpu mode='host-passthrough' check='none'>\n"
              : "  <cpu mode='maximum' check='none'>\n");
  } else {
    x << "  <cpu mode='custom' match='exact' check='partial'>\n    <model fallback='forbid'>"
      << xml_escape(model) << "</model>\n";
  }
  x << "    <topology sockets='" << t.sockets << "' dies='1' cores='" << t.cores << "' threads='"
    << t.threads << "'/>\n";
  for (const auto& f : dom.cpu.features)
    x << "    <feature" << attr("policy", f.policy.empty() ? "require" : f.policy)
      << attr("name", f.name) << "/>\n";
  // One guest NUMA node: for memory hotplug, and (KubeVirt's configureSyntheticNUMA,
  // converter/compute/cpu.go) whenever the memory is a memfd, as virtiofs needs.
  if (memory_hotplug || plan.memory.shared)
    x << "    <numa>\n      <cell id='0' cpus='0-" << plan.cpus.max_vcpus - 1 << "' memory='" << plan.memory.size
      << "' unit='b'/>\n    </numa>\n";
  x << "  </cpu>\n";
  x << clock_xml(dom.clock);
  x << "  <on_poweroff>destroy</on_poweroff>\n  <on_reboot>restart</on_reboot>\n  "
       "<on_crash>destroy</on_crash>\n";

  x << "  <devices>\n";
  if (!opts.emulator.empty()) x << "    <emulator>" << xml_escape(opts.emulator) << "</emulator>\n";
  // Boot order. Without an interface that boots, every disk in the plan's order (boot orders
  // first). With one (an interface's bootOrder: the firmware's PXE boot, iPXE in SeaBIOS and
  // OVMF), disks and interfaces by their bootOrder, as KubeVirt gives them (<boot order> on
  // each device that has one), renumbered from 1; disks without one follow in plan order.
  std::vector<std::uint32_t> disk_boot(plan.disks.size(), 0);
  std::vector<std::uint32_t> nic_boot(plan.nics.size(), 0);
  if (!kernel_boot) {
    struct Entry {
      std::int64_t key;
      bool nic;
      std::size_t index;
    };
    std::vector<Entry> order;
    for (std::size_t i = 0; i < plan.disks.size(); ++i) {
      const std::size_t si = plan.disks[i].spec_index;
      const auto& bo = si < dev.disks.size() ? dev.disks[si].boot_order : std::nullopt;
      order.push_back({bo.value_or(std::numeric_limits<std::int64_t>::max()), false, i});
    }
    for (std::size_t i = 0; i < plan.nics.size(); ++i)
      for (const auto& itf : dev.interfaces)
        if (itf.name == plan.nics[i].name && itf.boot_order)
          order.push_back({*itf.boot_order, true, i});
    std::stable_sort(order.begin(), order.end(),
                     [](const Entry& a, const Entry& b) { return a.key < b.key; });
    std::uint32_t n = 1;
    for (const auto& e : order) (e.nic ? nic_boot : disk_boot)[e.index] = n++;
  }
  // useVirtioTransitional: KubeVirt's converter gives every virtio disk, NIC, the SCSI and
  // virtio-serial controllers, the RNG and the balloon the model "virtio-transitional"
  // (converter/converter.go virtioModel, arch/converter.go defaultTransitionalModelType); libvirt
  // puts them on a conventional PCI bus behind a pcie-to-pci-bridge it adds. Without it the
  // models stay libvirt's modern defaults.
  const bool transitional = dev.use_virtio_transitional.value_or(false);
  const char* virtio_model = transitional ? "virtio-transitional" : "virtio";
  // Disks in the plan's order.
  std::size_t vd = 0, sd = 0;
  bool scsi = false, usb = false;
  for (std::size_t di = 0; di < plan.disks.size(); ++di) {
    const launcher::PlannedDisk& pd = plan.disks[di];
    const vmi::Disk* d = pd.spec_index < dev.disks.size() ? &dev.disks[pd.spec_index] : nullptr;
    const bool cdrom = d && d->device == vmi::DiskDevice::Cdrom;
    const Bus bus = d ? disk_bus(*d) : Bus{"virtio", false};
    scsi = scsi || bus.name == "scsi";
    usb = usb || bus.name == "usb";
    const bool qcow2 = pd.qcow2_overlay || (opts.detect_image_format && is_qcow2(pd.path));
    std::string cache = d && !d->cache.empty() ? d->cache : (pd.direct ? "none" : "");
    x << "    <disk type='file'" << attr("device", cdrom ? "cdrom" : "disk");
    if (transitional && bus.name == "virtio") x << " model='virtio-transitional'";
    x << ">\n";
    x << "      <driver name='qemu'" << attr("type", qcow2 ? "qcow2" : "raw");
    if (!cache.empty()) x << attr("cache", cache);
    if (d && !d->io.empty())
      x << attr("io", d->io);
    else if (cache == "none")
      x << " io='native'";
    if (pd.num_queues > 0 && bus.name == "virtio") x << " queues='" << pd.num_queues << "'";
    if (pd.spec_index < iothreads.disk.size() && iothreads.disk[pd.spec_index] > 0)
      x << " iothread='" << iothreads.disk[pd.spec_index] << "'";
    // KubeVirt lets the guest discard on every disk but a preallocated volume's.
    if (!cdrom && !pd.preallocated) x << " discard='unmap'";
    x << "/>\n";
    x << "      <source" << attr("file", pd.path) << "/>\n";
    // blockSize.custom as KubeVirt's converter writes it (converter/storage/disk.go
    // convert_v1_BlockSize_To_api_BlockIO); physical defaults to logical.
    if (d && d->block_size_logical && *d->block_size_logical > 0)
      x << "      <blockio logical_block_size='" << *d->block_size_logical
        << "' physical_block_size='" << d->block_size_physical.value_or(*d->block_size_logical)
        << "'/>\n";
    x << "      <target" << attr("dev", bus.sd ? target_name("sd", sd++) : target_name("vd", vd++))
      << attr("bus", bus.name) << "/>\n";
    if (disk_boot[di] > 0) x << "      <boot order='" << disk_boot[di] << "'/>\n";
    if (pd.readonly || cdrom) x << "      <readonly/>\n";
    if (d && d->shareable) x << "      <shareable/>\n";
    if (!pd.serial.empty()) x << "      <serial>" << xml_escape(pd.serial) << "</serial>\n";
    if (d && !d->pci_address.empty() && bus.name == "virtio")
      x << "      " << network::pci_address_xml(d->pci_address) << "\n";
    x << "      <alias" << attr("name", "ua-" + pd.name) << "/>\n";
    x << "    </disk>\n";
  }
  // The virtio-scsi controller hotplug volumes attach to, as KubeVirt adds it unless
  // spec.domain.devices.disableHotplug (and no disk asks for the scsi bus).
  if (scsi || !dev.disable_hotplug) {
    x << "    <controller type='scsi' index='0'"
      << attr("model", transitional ? "virtio-transitional" : "virtio-scsi");
    if (iothreads.scsi_controller > 0)  // KubeVirt: the controller's queues are the vCPUs
      x << ">\n      <driver iothread='" << iothreads.scsi_controller << "' queues='"
        << plan.cpus.boot_vcpus << "'/>\n    </controller>\n";
    else
      x << "/>\n";
  }
  // A USB tablet sits on the same xHCI controller as USB disks.
  for (const auto& in : dev.inputs) usb = usb || in.bus.empty() || in.bus == "usb";
  if (usb) x << "    <controller type='usb' index='0' model='qemu-xhci'/>\n";
  // The guest agent's channel sits on the virtio-serial controller libvirt adds; transitional,
  // it is written out with that model.
  if (transitional)
    x << "    <controller type='virtio-serial' index='0' model='virtio-transitional'/>\n";
  // NICs: the pod network's taps, which the launcher wires (network/) before the domain starts
  // and libvirt opens by name (managed='no'), as KubeVirt does. One writer of the element:
  // network::libvirt_interface_xml.
  for (std::size_t k = 0; k < plan.nics.size(); ++k) {
    const auto& n = plan.nics[k];
    network::LibvirtNic nic;
    nic.boot_order = nic_boot[k];
    for (const auto& i : dev.interfaces)
      if (i.name == n.name) nic.pci_address = i.pci_address;
    nic.tap = n.tap;
    nic.mac = n.mac;
    for (const auto& i : dev.interfaces)
      if (i.name == n.name) nic.model = i.model;
    if (transitional && (nic.model.empty() || nic.model == "virtio")) nic.model = virtio_model;
    nic.mtu = n.mtu;
    nic.queues = n.num_queues / 2;  // the plan counts RX and TX queues; libvirt counts pairs
    nic.alias = "ua-" + n.name;
    x << network::libvirt_interface_xml(nic);
  }
  // virtiofs as KubeVirt writes it (converter/storage/virtiofs.go): the virtiofs container's
  // socket as the source, the filesystem's name as the tag; virtiofsd is not ours to start.
  // (KubeVirt's api.FilesystemDevice marshals the attribute as accessMode, which libvirt's schema
  // does not know and its parser ignores; libvirt's spelling, with the same value, is accessmode.)
  for (const auto& f : plan.filesystems) {
    x << "    <filesystem type='mount' accessmode='passthrough'>\n      <driver type='virtiofs' queue='"
      << f.queue_size << "'/>\n";
    x << "      <source" << attr("socket", f.socket) << "/>\n";
    x << "      <target" << attr("dir", f.name) << "/>\n    </filesystem>\n";
  }
  // The serial console: a PTY the launcher's console bridge relays to virt-serial0.
  if (plan.serial_console) {
    x << "    <serial type='pty'>\n      <target port='0'/>\n    </serial>\n";
    x << "    <console type='pty'>\n      <target type='serial' port='0'/>\n    </console>\n";
  }
  // The guest agent's channel as KubeVirt's converter writes it (converter/compute/channels.go
  // newGuestAgentChannel: no source, libvirt picks the path and connects its own agent monitor to
  // it). The launcher reaches the agent through libvirt (virDomainQemuAgentCommand), not the
  // socket: QEMU's chardev takes one client and that is libvirt (docs/guest-agent.md).
  x << "    <channel type='unix'>\n      <target type='virtio' name='org.qemu.guest_agent.0'/>\n"
       "    </channel>\n";
  if (dev.autoattach_graphics_device.value_or(true)) {
    x << "    <graphics type='vnc'>\n      <listen type='socket'"
      << attr("socket", plan.state_dir + "/virt-vnc") << "/>\n    </graphics>\n";
    x << "    <video>\n      <model type='vga' heads='1'/>\n    </video>\n";
  }
  // Tablets, the sound card and the watchdog as KubeVirt's converter writes them, each with the
  // user alias "ua-<name>" (converter/compute/input_device.go, sound.go, watchdog.go).
  for (const auto& in : dev.inputs) {
    const std::string bus = in.bus.empty() ? "usb" : in.bus;
    x << "    <input" << attr("type", in.type) << attr("bus", bus);
    if (bus == "virtio") x << " model='virtio'";
    x << ">\n      <alias" << attr("name", "ua-" + in.name) << "/>\n    </input>\n";
  }
  if (dev.sound)
    x << "    <sound"
      << attr("model", dev.sound_device.model.empty() ? "ich9" : dev.sound_device.model)
      << ">\n      <alias" << attr("name", "ua-" + dev.sound_device.name) << "/>\n    </sound>\n";
  if (dev.watchdog)
    x << "    <watchdog model='i6300esb'"
      << attr("action", dev.watchdog_device.action.empty() ? "reset" : dev.watchdog_device.action)
      << ">\n      <alias" << attr("name", "ua-" + dev.watchdog_device.name)
      << "/>\n    </watchdog>\n";
  // The TPM as KubeVirt's converter writes it (converter/compute/tpm.go): TPM 2.0 on the tis
  // model, emulated by swtpm, which libvirt starts and stops with the domain (Debian's `swtpm`,
  // `swtpm-tools`). Not persistent (validate refuses tpm.persistent).
  if (dev.tpm)
    x << "    <tpm model='tpm-tis'>\n      <backend type='emulator' version='2.0'/>\n    </tpm>\n";
  if (plan.rng)
    x << "    <rng" << attr("model", virtio_model) << ">\n      <backend model='random'>/dev/urandom</backend>\n    "
         "</rng>\n";
  if (dev.autoattach_mem_balloon.value_or(true) && opts.mem_balloon_stats_period > 0)
    x << "    <memballoon" << attr("model", virtio_model) << ">\n      <stats period='"
      << opts.mem_balloon_stats_period
      << "'/>\n    </memballoon>\n";
  else if (dev.autoattach_mem_balloon.value_or(true))
    x << "    <memballoon" << attr("model", virtio_model) << "/>\n";
  else
    x << "    <memballoon model='none'/>\n";
  if (plan.pvpanic) x << "    <panic model='isa'/>\n";
  x << "  </devices>\n";

  if (opts.run_as) {
    x << "  <seclabel type='static' model='dac' relabel='no'>\n    <label>+" << opts.run_as->first
      << ":+" << opts.run_as->second << "</label>\n  </seclabel>\n";
  }
  x << "</domain>\n";
  return x.str();
}

std::string hotplug_disk_xml(const HotplugDisk& d) {
  std::ostringstream x;
  x << "<disk" << attr("type", d.block ? "block" : "file") << " device='disk'>\n";
  x << "  <driver name='qemu' type='raw' cache='none' io='native'/>\n";
  x << "  <source" << attr(d.block ? "dev" : "file", d.path) << "/>\n";
  x << "  <target" << attr("dev", d.target) << " bus='scsi'/>\n";
  if (d.readonly) x << "  <readonly/>\n";
  x << "  <alias" << attr("name", "ua-" + d.id) << "/>\n";
  x << "</disk>\n";
  return x.str();
}

std::string free_scsi_target(const std::vector<std::string>& used) {
  for (std::size_t i = 0;; ++i) {
    std::string t = target_name("sd", i);
    if (std::find(used.begin(), used.end(), t) == used.end()) return t;
  }
}

}  // namespace chl::libvirt

// The rules for spec.domain.devices: disks (and boot order), interfaces, the other devices.
#include <algorithm>
#include <array>
#include <set>

#include "vmi/checker.hpp"

namespace chl::vmi {
namespace {

// "0000:81:01.0": domain:bus:slot.function in hex, as KubeVirt parses a pciAddress
// (pkg/util/hardware ParsePciAddress).
bool is_pci_address(const std::string& s) {
  if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
  for (std::size_t i : {0, 1, 2, 3, 5, 6, 8, 9})
    if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  return s[11] >= '0' && s[11] <= '7';
}

}  // namespace

void Checker::check_disks() {
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
        require(Feature::DiskBusSata, dp + ".bus", d.bus_defaulted);
      else if (d.bus == "scsi")
        require(Feature::DiskBusScsi, dp + ".bus");
      else if (d.bus == "usb")
        require(Feature::DiskBusUsb, dp + ".bus");
      else
        add(dp + ".bus", "unknown bus \"" + d.bus + "\"; expected virtio, sata, scsi or usb");
    }
    if (!d.pci_address.empty()) {
      require(Feature::DiskPciAddress, dp + ".pciAddress");
      if (!is_pci_address(d.pci_address))
        add(dp + ".pciAddress", "\"" + d.pci_address + "\" is not a PCI address (e.g. 0000:00:0a.0)");
      // KubeVirt's rule (pkg/storage/admitters/disks.go validatePciAddress).
      if (d.bus != "virtio")
        add(dp + ".pciAddress", "a PCI address needs bus virtio");
    }
    if (d.block_size_logical && *d.block_size_logical == 0)
      require(Feature::DiskBlockSizeMatchVolume, p + ".blockSize.matchVolume");
    else if (d.block_size_logical)
      require(Feature::DiskCustomBlockSize, p + ".blockSize.custom");
    // KubeVirt's discard_granularity needs libvirt 11.6 (converter/storage/disk.go); bookworm's
    // 9.0 schema has only the two sizes.
    if (d.block_size_discard_granularity && caps_.supports(Feature::DiskCustomBlockSize))
      add(p + ".blockSize.custom.discardGranularity",
          std::string(caps_.name) +
              ": ch-launcher's libvirt path cannot set a discard granularity with "
              "bookworm's libvirt 9.0; remove it");
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
    // The name is the virtio-fs tag the guest mounts: virtio_fs_config.tag holds 36 bytes.
    // Cloud Hypervisor cuts a longer tag short silently (virtio-devices/src/vhost_user/fs.rs,
    // VIRTIO_FS_TAG_LEN) and QEMU refuses it (hw/virtio/vhost-user-fs.c): refused here for both.
    if (f.name.size() > 36)
      add(p + ".name", "the virtio-fs tag is the filesystem's name and holds at most 36 bytes (got " +
                           std::to_string(f.name.size()) + "); use a shorter volume name");
    const Volume* v = f.name.empty() ? nullptr : find_volume(vmi_, f.name);
    if (!f.name.empty() && !v) {
      add(p + ".name", "no volume named \"" + f.name + "\" in spec.volumes");
    } else {
      unique(volumes_used, f.name, "filesystems[" + std::to_string(i) + "]", p + ".name");
    }
    // What KubeVirt's virtiofs containers can share (virt-controller/services/virtiofs.go).
    static constexpr VolumeKind kShareable[] = {VolumeKind::PersistentVolumeClaim, VolumeKind::DataVolume,
                                                VolumeKind::ConfigMap,             VolumeKind::Secret,
                                                VolumeKind::ServiceAccount,        VolumeKind::DownwardApi};
    if (v && f.virtiofs && std::find(std::begin(kShareable), std::end(kShareable), v->kind) == std::end(kShareable))
      add(p + ".name", "volume \"" + v->name + "\" (" + to_string(v->kind) +
                           ") cannot be shared with virtiofs; use a persistentVolumeClaim, dataVolume, "
                           "configMap, secret, serviceAccount or downwardAPI");
  }
}

void Checker::check_interfaces() {
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
    if (!n.pci_address.empty()) {
      require(Feature::NicPciAddress, p + ".pciAddress");
      if (!is_pci_address(n.pci_address))
        add(p + ".pciAddress", "\"" + n.pci_address + "\" is not a PCI address (e.g. 0000:00:0a.0)");
    }
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

void Checker::check_devices() {
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
    if (!h.claim_name.empty() || !h.request_name.empty()) {
      // KubeVirt's DRA form: one reason that points at the real limit, not at deviceName.
      add(hp + ".claimName", kDraNotSupported);
    } else {
      require(h.gpu ? Feature::Gpus : Feature::HostDevices, hp);
      // KubeVirt gives a vGPU a display (and ramfb) when asked, and the first mediated GPU one
      // by default (hostdevice/gpu/hostdev.go DefaultDisplayOn); a hypervisor without graphics
      // cannot: an explicit display is refused, the default one is left out (docs/vmi-support.md).
      if (h.gpu && h.vgpu_display.value_or(false) && !caps_.supports(Feature::Graphics))
        add(hp + ".virtualGPUOptions.display",
            std::string(caps_.name) + " has no display for a vGPU; set virtualGPUOptions.display.enabled: false");
      if (h.device_name.empty())
        add(hp + ".deviceName", "required (or claimName and requestName for a DRA device, which is not supported yet)");
    }
    check_label(h.name, hp + ".name");
  }
  if (!dev.inputs.empty()) require(Feature::InputDevices, p + ".inputs");
  // KubeVirt's converter maps only tablets, on usb (the default) or virtio
  // (converter/compute/input_device.go apiInputDeviceFromV1InputDevice).
  for (std::size_t i = 0; i < dev.inputs.size(); ++i) {
    const Input& in = dev.inputs[i];
    const std::string ip = p + ".inputs[" + std::to_string(i) + "]";
    check_label(in.name, ip + ".name");
    if (in.type != "tablet")
      add(ip + ".type", "unknown input type \"" + in.type + "\"; expected tablet");
    if (!in.bus.empty() && in.bus != "usb" && in.bus != "virtio")
      add(ip + ".bus", "unknown input bus \"" + in.bus + "\"; expected usb or virtio");
  }
  if (dev.autoattach_graphics_device.value_or(false)) {
    require(Feature::Graphics, p + ".autoattachGraphicsDevice");
  }
  if (dev.sound) {
    require(Feature::Sound, p + ".sound");
    // converter/compute/sound.go: "" (ich9), ich9 or ac97.
    const std::string& m = dev.sound_device.model;
    if (!m.empty() && m != "ich9" && m != "ac97")
      add(p + ".sound.model", "unknown sound model \"" + m + "\"; expected ich9 or ac97");
    check_label(dev.sound_device.name, p + ".sound.name");
  }
  if (dev.client_passthrough) require(Feature::UsbRedirection, p + ".clientPassthrough");
  if (dev.watchdog) {
    require(Feature::Watchdog, p + ".watchdog");
    // converter/compute/watchdog.go: on amd64 only i6300esb maps; actions as in KubeVirt's API
    // (staging/src/kubevirt.io/api/core/v1/schema.go WatchdogAction).
    const Watchdog& w = dev.watchdog_device;
    check_label(w.name, p + ".watchdog.name");
    if (!w.i6300esb) {
      add(p + ".watchdog.i6300esb", "required: i6300esb is the x86 watchdog");
    } else if (!w.action.empty() && w.action != "poweroff" && w.action != "reset" &&
               w.action != "shutdown") {
      add(p + ".watchdog.i6300esb.action",
          "unknown action \"" + w.action + "\"; expected poweroff, reset or shutdown");
    }
  }
  if (dev.tpm) require(Feature::Tpm, p + ".tpm");
  // A persistent TPM keeps its state on KubeVirt's backend-storage volume across the VM's pods;
  // ch-launcher has none, so the state would die with the pod.
  if (dev.tpm && dev.tpm_persistent && caps_.supports(Feature::Tpm))
    add(p + ".tpm.persistent",
        std::string(caps_.name) +
            ": ch-launcher keeps no TPM state beyond the pod (no backend-storage "
            "volume); remove persistent");
  if (dev.downward_metrics) require(Feature::DownwardMetrics, p + ".downwardMetrics");
  if (dev.use_virtio_transitional.value_or(false)) {
    require(Feature::VirtioTransitional, p + ".useVirtioTransitional");
  }
}

}  // namespace chl::vmi

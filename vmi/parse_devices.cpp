// spec.domain.devices: disks, interfaces and the other devices.
#include "vmi/parse_support.hpp"

namespace chl::vmi {
namespace {

void parse_disk(Reader& r, const YAML::Node& n, const std::string& p, Disk& d) {
  r.unknown_keys(n, p,
                 {"name", "disk", "cdrom", "lun", "floppy", "bootOrder", "serial", "cache", "io",
                  "dedicatedIOThread", "blockSize", "shareable", "errorPolicy", "tag"});
  d.name = r.str(n, "name", p).value_or("");
  struct Kind {
    const char* key;
    DiskDevice device;
  };
  static constexpr std::array<Kind, 4> kKinds{{{"disk", DiskDevice::Disk},
                                               {"cdrom", DiskDevice::Cdrom},
                                               {"lun", DiskDevice::Lun},
                                               {"floppy", DiskDevice::Floppy}}};
  for (const auto& k : kKinds) {
    YAML::Node dev = Reader::child(n, k.key);
    if (!dev.IsDefined()) {
      // `disk: {}` and `disk:` (null) both mean a disk; a null cdrom is still a cdrom.
      if (n.IsMap() && n[k.key].IsDefined() && n[k.key].IsNull()) {
        d.device = k.device;
        ++d.device_count;
      }
      continue;
    }
    const std::string dp = p + "." + k.key;
    if (!r.expect_map(dev, dp)) continue;
    d.device = k.device;
    ++d.device_count;
    r.unknown_keys(dev, dp, {"bus", "readonly", "pciAddress", "tray", "reservation"});
    d.bus = r.str(dev, "bus", dp).value_or("");
    d.readonly = r.boolean(dev, "readonly", dp).value_or(k.device == DiskDevice::Cdrom);
    d.pci_address = r.str(dev, "pciAddress", dp).value_or("");
  }
  if (d.device_count == 0) {
    d.device = DiskDevice::Disk;  // KubeVirt's defaulting: a disk without a type is a disk
  }
  d.boot_order = r.integer(n, "bootOrder", p, 1, std::numeric_limits<std::int32_t>::max());
  d.serial = r.str(n, "serial", p).value_or("");
  d.cache = r.str(n, "cache", p).value_or("");
  d.io = r.str(n, "io", p).value_or("");
  d.dedicated_io_thread = r.boolean(n, "dedicatedIOThread", p).value_or(false);
  d.shareable = r.boolean(n, "shareable", p).value_or(false);
  bool present = false;
  YAML::Node bs = r.object(n, "blockSize", p, present);
  if (present) {
    bool custom = false;
    YAML::Node c = r.object(bs, "custom", p + ".blockSize", custom);
    bool match = false;
    YAML::Node m = r.object(bs, "matchVolume", p + ".blockSize", match);
    if (custom) {
      const std::string cp = p + ".blockSize.custom";
      r.unknown_keys(c, cp, {"logical", "physical", "discardGranularity"});
      d.block_size_logical = r.integer(c, "logical", cp, 512, 65536);
      d.block_size_physical = r.integer(c, "physical", cp, 512, 65536);
      d.block_size_discard_granularity = Reader::child(c, "discardGranularity").IsDefined();
      if (!d.block_size_logical && !Reader::child(c, "logical").IsDefined())
        r.problem(cp + ".logical", "is required", c);
    } else if (!match || r.boolean(m, "enabled", p + ".blockSize.matchVolume").value_or(true)) {
      d.block_size_logical = 0;  // matchVolume (enabled: false is no block size at all)
    }
  }
}

void parse_interface(Reader& r, const YAML::Node& n, const std::string& p, Interface& i) {
  r.unknown_keys(n, p,
                 {"name", "bridge", "masquerade", "sriov", "slirp", "passt", "macvtap", "binding",
                  "model", "macAddress", "bootOrder", "pciAddress", "ports", "dhcpOptions", "tag",
                  "acpiIndex", "state"});
  i.name = r.str(n, "name", p).value_or("");
  struct Kind {
    const char* key;
    Binding binding;
  };
  static constexpr std::array<Kind, 7> kKinds{{{"bridge", Binding::Bridge},
                                               {"masquerade", Binding::Masquerade},
                                               {"sriov", Binding::Sriov},
                                               {"slirp", Binding::Slirp},
                                               {"passt", Binding::Passt},
                                               {"macvtap", Binding::Macvtap},
                                               {"binding", Binding::Plugin}}};
  for (const auto& k : kKinds) {
    if (n.IsMap() && n[k.key].IsDefined()) {
      if (!n[k.key].IsNull() && !r.expect_map(n[k.key], p + "." + k.key)) continue;
      i.binding = k.binding;
      ++i.binding_count;
    }
  }
  i.model = r.str(n, "model", p).value_or("");
  i.mac_address = r.str(n, "macAddress", p).value_or("");
  i.boot_order = r.integer(n, "bootOrder", p, 1, std::numeric_limits<std::int32_t>::max());
  i.pci_address = r.str(n, "pciAddress", p).value_or("");
  YAML::Node ports = Reader::child(n, "ports");
  if (ports.IsDefined() && r.expect_list(ports, p + ".ports")) {
    for (std::size_t k = 0; k < ports.size(); ++k) {
      const std::string pp = Reader::index(p + ".ports", k);
      if (!r.expect_map(ports[k], pp)) continue;
      r.unknown_keys(ports[k], pp, {"name", "protocol", "port"});
      Port port;
      port.name = r.str(ports[k], "name", pp).value_or("");
      port.protocol = r.str(ports[k], "protocol", pp).value_or("");
      if (!port.protocol.empty() && port.protocol != "TCP" && port.protocol != "UDP" &&
          port.protocol != "tcp" && port.protocol != "udp") {
        r.problem(Reader::join(pp, "protocol"), "must be TCP or UDP, got " + port.protocol,
                  ports[k]["protocol"]);
      }
      auto number = r.integer(ports[k], "port", pp, 1, 65535);
      if (!number && !Reader::child(ports[k], "port").IsDefined())
        r.problem(Reader::join(pp, "port"), "is required", ports[k]);
      port.port = number.value_or(0);
      i.ports.push_back(std::move(port));
    }
  }
}

}  // namespace

void parse_devices(Reader& r, const YAML::Node& n, const std::string& p, Devices& dev) {
  r.unknown_keys(n, p,
                 {"disks",
                  "interfaces",
                  "filesystems",
                  "hostDevices",
                  "gpus",
                  "inputs",
                  "rng",
                  "autoattachSerialConsole",
                  "autoattachGraphicsDevice",
                  "autoattachPodInterface",
                  "autoattachMemBalloon",
                  "autoattachInputDevice",
                  "networkInterfaceMultiqueue",
                  "blockMultiQueue",
                  "useVirtioTransitional",
                  "sound",
                  "watchdog",
                  "tpm",
                  "clientPassthrough",
                  "downwardMetrics",
                  "logSerialConsole",
                  "disableHotplug",
                  "autoattachVSOCK"});
  YAML::Node disks = Reader::child(n, "disks");
  if (disks.IsDefined() && r.expect_list(disks, p + ".disks")) {
    for (std::size_t i = 0; i < disks.size(); ++i) {
      const std::string dp = Reader::index(p + ".disks", i);
      Disk d;
      if (r.expect_map(disks[i], dp)) parse_disk(r, disks[i], dp, d);
      dev.disks.push_back(std::move(d));
    }
  }
  YAML::Node ifaces = Reader::child(n, "interfaces");
  if (ifaces.IsDefined() && r.expect_list(ifaces, p + ".interfaces")) {
    for (std::size_t i = 0; i < ifaces.size(); ++i) {
      const std::string ip = Reader::index(p + ".interfaces", i);
      Interface iface;
      if (r.expect_map(ifaces[i], ip)) parse_interface(r, ifaces[i], ip, iface);
      dev.interfaces.push_back(std::move(iface));
    }
  }
  YAML::Node fss = Reader::child(n, "filesystems");
  if (fss.IsDefined() && r.expect_list(fss, p + ".filesystems")) {
    for (std::size_t i = 0; i < fss.size(); ++i) {
      const std::string fp = Reader::index(p + ".filesystems", i);
      if (!r.expect_map(fss[i], fp)) continue;
      r.unknown_keys(fss[i], fp, {"name", "virtiofs"});
      Filesystem f;
      f.name = r.str(fss[i], "name", fp).value_or("");
      f.virtiofs = fss[i]["virtiofs"].IsDefined();
      dev.filesystems.push_back(std::move(f));
    }
  }
  for (const char* key : {"hostDevices", "gpus"}) {
    YAML::Node hds = Reader::child(n, key);
    const std::string hp = Reader::join(p, key);
    if (!hds.IsDefined() || !r.expect_list(hds, hp)) continue;
    for (std::size_t i = 0; i < hds.size(); ++i) {
      const std::string ip = Reader::index(hp, i);
      if (!r.expect_map(hds[i], ip)) continue;
      r.unknown_keys(
          hds[i], ip,
          {"name", "deviceName", "tag", "virtualGPUOptions", "claimName", "requestName"});
      HostDevice h;
      h.name = r.str(hds[i], "name", ip).value_or("");
      h.device_name = r.str(hds[i], "deviceName", ip).value_or("");
      h.claim_name = r.str(hds[i], "claimName", ip).value_or("");
      h.request_name = r.str(hds[i], "requestName", ip).value_or("");
      h.gpu = std::string_view(key) == "gpus";
      bool has_options = false;
      YAML::Node opts = r.object(hds[i], "virtualGPUOptions", ip, has_options);
      if (has_options) {
        bool has_display = false;
        YAML::Node d = r.object(opts, "display", ip + ".virtualGPUOptions", has_display);
        if (has_display) h.vgpu_display = r.boolean(d, "enabled", ip + ".virtualGPUOptions.display").value_or(true);
      }
      dev.host_devices.push_back(std::move(h));
    }
  }
  YAML::Node inputs = Reader::child(n, "inputs");
  if (inputs.IsDefined() && r.expect_list(inputs, p + ".inputs")) {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const std::string ip = Reader::index(p + ".inputs", i);
      if (!r.expect_map(inputs[i], ip)) continue;
      r.unknown_keys(inputs[i], ip, {"name", "type", "bus"});
      Input in;
      in.name = r.str(inputs[i], "name", ip).value_or("");
      in.type = r.str(inputs[i], "type", ip).value_or("");
      in.bus = r.str(inputs[i], "bus", ip).value_or("");
      dev.inputs.push_back(std::move(in));
    }
  }
  r.object(n, "rng", p, dev.rng);
  dev.autoattach_serial_console = r.boolean(n, "autoattachSerialConsole", p);
  dev.autoattach_graphics_device = r.boolean(n, "autoattachGraphicsDevice", p);
  dev.autoattach_pod_interface = r.boolean(n, "autoattachPodInterface", p);
  dev.autoattach_mem_balloon = r.boolean(n, "autoattachMemBalloon", p);
  dev.autoattach_input_device = r.boolean(n, "autoattachInputDevice", p);
  dev.network_interface_multiqueue = r.boolean(n, "networkInterfaceMultiqueue", p);
  dev.block_multi_queue = r.boolean(n, "blockMultiQueue", p);
  dev.use_virtio_transitional = r.boolean(n, "useVirtioTransitional", p);
  dev.log_serial_console = r.boolean(n, "logSerialConsole", p);
  dev.disable_hotplug = r.boolean(n, "disableHotplug", p).value_or(false);
  YAML::Node sound = r.object(n, "sound", p, dev.sound);
  if (dev.sound) {
    const std::string sp = p + ".sound";
    r.unknown_keys(sound, sp, {"name", "model"});
    dev.sound_device.name = r.str(sound, "name", sp).value_or("");
    dev.sound_device.model = r.str(sound, "model", sp).value_or("");
  }
  YAML::Node wd = r.object(n, "watchdog", p, dev.watchdog);
  if (dev.watchdog) {
    const std::string wp = p + ".watchdog";
    r.unknown_keys(wd, wp, {"name", "i6300esb", "diag288"});
    dev.watchdog_device.name = r.str(wd, "name", wp).value_or("");
    bool esb = false;
    YAML::Node e = r.object(wd, "i6300esb", wp, esb);
    if (esb || (wd.IsMap() && wd["i6300esb"].IsDefined())) {
      dev.watchdog_device.i6300esb = true;
      if (esb) dev.watchdog_device.action = r.str(e, "action", wp + ".i6300esb").value_or("");
    }
  }
  YAML::Node tpm = r.object(n, "tpm", p, dev.tpm);
  if (dev.tpm) {
    r.unknown_keys(tpm, p + ".tpm", {"enabled", "persistent"});
    // tpm.enabled: false is KubeVirt's way of saying no TPM.
    dev.tpm = r.boolean(tpm, "enabled", p + ".tpm").value_or(true);
    dev.tpm_persistent = dev.tpm && r.boolean(tpm, "persistent", p + ".tpm").value_or(false);
  }
  r.object(n, "clientPassthrough", p, dev.client_passthrough);
  r.object(n, "downwardMetrics", p, dev.downward_metrics);
}

}  // namespace chl::vmi

#include "vmi/parser.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <limits>
#include <sstream>

#include "vmi/quantity.hpp"
#include "common/log.hpp"
#include "common/syscall.hpp"
#include "common/unique_fd.hpp"

namespace chl::vmi {
namespace {

std::string where(const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  if (m.line < 0) return {};
  return " (line " + std::to_string(m.line + 1) + ", column " + std::to_string(m.column + 1) + ")";
}

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      return "an object";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Scalar:
      return "\"" + n.Scalar() + "\"";
    default:
      return "nothing";
  }
}

bool base64_decode(std::string_view in, std::string& out) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  out.clear();
  std::uint32_t acc = 0;
  int bits = 0;
  std::size_t pad = 0;
  for (char c : in) {
    if (c == '\n' || c == '\r' || c == ' ' || c == '\t') continue;
    if (c == '=') {
      ++pad;
      continue;
    }
    if (pad) return false;  // data after padding
    int v = val(c);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return pad <= 2 && bits < 6;
}

// The walk over one document: every accessor records a problem (with the field path and the
// line) instead of stopping, so that all problems come back at once.
class Reader {
 public:
  explicit Reader(Violations& problems) : problems_(problems) {}

  void problem(const std::string& path, const std::string& msg, const YAML::Node& at) {
    problems_.push_back({path, msg + where(at)});
  }

  // A child that is present and not null, or an undefined node.
  static YAML::Node child(const YAML::Node& map, const char* key) {
    if (!map.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    YAML::Node c = map[key];
    if (!c.IsDefined() || c.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
    return c;
  }

  // Log (debug) every key of `map` that is not in `known`.
  void unknown_keys(const YAML::Node& map, const std::string& path,
                    std::initializer_list<std::string_view> known) {
    if (!map.IsMap()) return;
    for (const auto& kv : map) {
      const std::string key = kv.first.Scalar();
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        CHL_LOG_DEBUG("ignoring unknown field {}{}{}", path, path.empty() ? "" : ".", key);
      }
    }
  }

  // `node` must be an object: reports otherwise and returns false.
  bool expect_map(const YAML::Node& node, const std::string& path) {
    if (node.IsMap()) return true;
    problem(path, "expected an object, got " + describe(node), node);
    return false;
  }
  bool expect_list(const YAML::Node& node, const std::string& path) {
    if (node.IsSequence()) return true;
    problem(path, "expected a list, got " + describe(node), node);
    return false;
  }

  std::optional<std::string> str(const YAML::Node& map, const char* key, const std::string& path) {
    YAML::Node n = child(map, key);
    if (!n.IsDefined()) return std::nullopt;
    const std::string p = join(path, key);
    if (!n.IsScalar()) {
      problem(p, "expected a string, got " + describe(n), n);
      return std::nullopt;
    }
    return n.Scalar();
  }

  std::optional<bool> boolean(const YAML::Node& map, const char* key, const std::string& path) {
    YAML::Node n = child(map, key);
    if (!n.IsDefined()) return std::nullopt;
    const std::string p = join(path, key);
    if (n.IsScalar()) {
      const std::string& s = n.Scalar();
      if (s == "true" || s == "True" || s == "TRUE") return true;
      if (s == "false" || s == "False" || s == "FALSE") return false;
    }
    problem(p, "expected true or false, got " + describe(n), n);
    return std::nullopt;
  }

  std::optional<std::int64_t> integer(const YAML::Node& map, const char* key,
                                      const std::string& path, std::int64_t min, std::int64_t max) {
    YAML::Node n = child(map, key);
    if (!n.IsDefined()) return std::nullopt;
    const std::string p = join(path, key);
    if (n.IsScalar()) {
      const std::string& s = n.Scalar();
      std::size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
      bool digits = i < s.size() && s.size() - i <= 18 &&
                    std::all_of(s.begin() + static_cast<long>(i), s.end(),
                                [](char c) { return c >= '0' && c <= '9'; });
      if (digits) {
        std::int64_t v = std::stoll(s);
        if (v < min || v > max) {
          problem(p,
                  "must be between " + std::to_string(min) + " and " + std::to_string(max) +
                      ", got " + s,
                  n);
          return std::nullopt;
        }
        return v;
      }
    }
    problem(p, "expected an integer, got " + describe(n), n);
    return std::nullopt;
  }

  std::optional<std::uint32_t> count(const YAML::Node& map, const char* key,
                                     const std::string& path) {
    auto v = integer(map, key, path, 0, std::numeric_limits<std::uint32_t>::max());
    if (!v) return std::nullopt;
    return static_cast<std::uint32_t>(*v);
  }

  std::optional<Quantity> quantity(const YAML::Node& map, const char* key,
                                   const std::string& path) {
    YAML::Node n = child(map, key);
    if (!n.IsDefined()) return std::nullopt;
    const std::string p = join(path, key);
    if (!n.IsScalar()) {
      problem(p, "expected a quantity such as 1Gi, got " + describe(n), n);
      return std::nullopt;
    }
    auto milli = parse_quantity_milli(n.Scalar());
    auto value = parse_quantity(n.Scalar());
    if (!value) {
      problem(p, value.error().message(), n);
      return std::nullopt;
    }
    Quantity q;
    q.text = n.Scalar();
    q.value = *value;
    // Bytes beyond ~9.2e15 have no milli form; memory never needs it.
    q.milli = milli ? *milli
                    : (q.value >= 0 ? std::numeric_limits<std::int64_t>::max()
                                    : std::numeric_limits<std::int64_t>::min());
    return q;
  }

  // A present object (possibly empty) at map[key]; `present` false when absent or null.
  YAML::Node object(const YAML::Node& map, const char* key, const std::string& path,
                    bool& present) {
    YAML::Node n = child(map, key);
    present = false;
    if (!n.IsDefined()) return n;
    if (!expect_map(n, join(path, key))) return YAML::Node(YAML::NodeType::Undefined);
    present = true;
    return n;
  }

  void string_map(const YAML::Node& map, const char* key, const std::string& path,
                  std::map<std::string, std::string>& out) {
    YAML::Node n = child(map, key);
    if (!n.IsDefined()) return;
    const std::string p = join(path, key);
    if (!expect_map(n, p)) return;
    for (const auto& kv : n) {
      if (!kv.second.IsScalar() && !kv.second.IsNull()) {
        problem(p + "." + kv.first.Scalar(), "expected a string, got " + describe(kv.second),
                kv.second);
        continue;
      }
      out[kv.first.Scalar()] = kv.second.IsNull() ? "" : kv.second.Scalar();
    }
  }

  static std::string join(const std::string& path, const char* key) {
    return path.empty() ? std::string(key) : path + "." + key;
  }
  static std::string index(const std::string& path, std::size_t i) {
    return path + "[" + std::to_string(i) + "]";
  }

 private:
  Violations& problems_;
};

void parse_metadata(Reader& r, const YAML::Node& n, ObjectMeta& m) {
  const std::string p = "metadata";
  if (!r.expect_map(n, p)) return;
  r.unknown_keys(
      n, p,
      {"name", "namespace", "uid", "labels", "annotations", "generateName", "creationTimestamp",
       "resourceVersion", "generation", "finalizers", "ownerReferences", "managedFields",
       "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"});
  m.name = r.str(n, "name", p).value_or("");
  m.namespace_ = r.str(n, "namespace", p).value_or("default");
  if (m.namespace_.empty()) m.namespace_ = "default";
  m.uid = r.str(n, "uid", p).value_or("");
  r.string_map(n, "labels", p, m.labels);
  r.string_map(n, "annotations", p, m.annotations);
}

void parse_cpu(Reader& r, const YAML::Node& n, const std::string& p, Cpu& cpu) {
  r.unknown_keys(n, p,
                 {"cores", "sockets", "threads", "maxSockets", "model", "features",
                  "dedicatedCpuPlacement", "isolateEmulatorThread", "numa", "realtime"});
  cpu.cores = r.count(n, "cores", p).value_or(0);
  cpu.sockets = r.count(n, "sockets", p).value_or(0);
  cpu.threads = r.count(n, "threads", p).value_or(0);
  cpu.max_sockets = r.count(n, "maxSockets", p).value_or(0);
  cpu.model = r.str(n, "model", p).value_or("");
  cpu.dedicated_cpu_placement = r.boolean(n, "dedicatedCpuPlacement", p).value_or(false);
  cpu.isolate_emulator_thread = r.boolean(n, "isolateEmulatorThread", p).value_or(false);
  bool present = false;
  YAML::Node numa = r.object(n, "numa", p, present);
  if (present) {
    const std::string np = p + ".numa";
    r.unknown_keys(numa, np, {"guestMappingPassthrough"});
    bool gm = false;
    r.object(numa, "guestMappingPassthrough", np, gm);
    cpu.numa_guest_mapping_passthrough = gm;
  }
  r.object(n, "realtime", p, cpu.realtime);
  YAML::Node feats = Reader::child(n, "features");
  if (feats.IsDefined() && r.expect_list(feats, p + ".features")) {
    for (std::size_t i = 0; i < feats.size(); ++i) {
      const std::string fp = Reader::index(p + ".features", i);
      if (!r.expect_map(feats[i], fp)) continue;
      r.unknown_keys(feats[i], fp, {"name", "policy"});
      CpuFeature f;
      f.name = r.str(feats[i], "name", fp).value_or("");
      f.policy = r.str(feats[i], "policy", fp).value_or("require");
      cpu.features.push_back(std::move(f));
    }
  }
}

void parse_memory(Reader& r, const YAML::Node& n, const std::string& p, Memory& mem) {
  r.unknown_keys(n, p, {"guest", "maxGuest", "hugepages"});
  mem.guest = r.quantity(n, "guest", p);
  mem.max_guest = r.quantity(n, "maxGuest", p);
  bool present = false;
  YAML::Node hp = r.object(n, "hugepages", p, present);
  if (present) {
    r.unknown_keys(hp, p + ".hugepages", {"pageSize"});
    mem.hugepages_page_size = r.quantity(hp, "pageSize", p + ".hugepages");
    if (!mem.hugepages_page_size && !Reader::child(hp, "pageSize").IsDefined()) {
      r.problem(p + ".hugepages.pageSize", "required when hugepages is set (2Mi or 1Gi)", hp);
    }
  }
}

void parse_resources(Reader& r, const YAML::Node& n, const std::string& p, Resources& res) {
  r.unknown_keys(n, p, {"requests", "limits", "overcommitGuestOverhead"});
  bool present = false;
  YAML::Node req = r.object(n, "requests", p, present);
  if (present) {
    res.request_memory = r.quantity(req, "memory", p + ".requests");
    res.request_cpu = r.quantity(req, "cpu", p + ".requests");
  }
  YAML::Node lim = r.object(n, "limits", p, present);
  if (present) {
    res.limit_memory = r.quantity(lim, "memory", p + ".limits");
    res.limit_cpu = r.quantity(lim, "cpu", p + ".limits");
  }
}

void parse_firmware(Reader& r, const YAML::Node& n, const std::string& p, Firmware& fw) {
  r.unknown_keys(n, p, {"uuid", "serial", "bootloader", "kernelBoot", "acpi"});
  fw.uuid = r.str(n, "uuid", p).value_or("");
  fw.serial = r.str(n, "serial", p).value_or("");
  bool present = false;
  YAML::Node bl = r.object(n, "bootloader", p, present);
  if (present) {
    const std::string bp = p + ".bootloader";
    r.unknown_keys(bl, bp, {"bios", "efi"});
    bool bios = false, efi = false;
    YAML::Node b = r.object(bl, "bios", bp, bios);
    YAML::Node e = r.object(bl, "efi", bp, efi);
    if (bios && efi) r.problem(bp, "set either bios or efi, not both", bl);
    if (bios) {
      fw.bootloader = Bootloader::Bios;
      r.unknown_keys(b, bp + ".bios", {"useSerial"});
      (void)r.boolean(b, "useSerial", bp + ".bios");
    }
    if (efi) {
      fw.bootloader = Bootloader::Efi;
      r.unknown_keys(e, bp + ".efi", {"secureBoot", "persistent"});
      fw.efi_secure_boot = r.boolean(e, "secureBoot", bp + ".efi");
      fw.efi_persistent = r.boolean(e, "persistent", bp + ".efi").value_or(false);
    }
  }
  YAML::Node kb = r.object(n, "kernelBoot", p, fw.kernel_boot.present);
  if (fw.kernel_boot.present) {
    const std::string kp = p + ".kernelBoot";
    r.unknown_keys(kb, kp, {"kernelArgs", "container"});
    fw.kernel_boot.kernel_args = r.str(kb, "kernelArgs", kp).value_or("");
    YAML::Node c = r.object(kb, "container", kp, fw.kernel_boot.has_container);
    if (fw.kernel_boot.has_container) {
      const std::string cp = kp + ".container";
      r.unknown_keys(c, cp,
                     {"image", "kernelPath", "initrdPath", "imagePullPolicy", "imagePullSecret"});
      fw.kernel_boot.image = r.str(c, "image", cp).value_or("");
      fw.kernel_boot.kernel_path = r.str(c, "kernelPath", cp).value_or("");
      fw.kernel_boot.initrd_path = r.str(c, "initrdPath", cp).value_or("");
    }
  }
}

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
    if (custom)
      d.block_size_logical = r.integer(c, "logical", p + ".blockSize.custom", 512, 65536);
    else
      d.block_size_logical = 0;  // matchVolume
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
      h.gpu = std::string_view(key) == "gpus";
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
  (void)r.boolean(n, "logSerialConsole", p);
  (void)r.boolean(n, "disableHotplug", p);
  r.object(n, "sound", p, dev.sound);
  r.object(n, "watchdog", p, dev.watchdog);
  r.object(n, "tpm", p, dev.tpm);
  r.object(n, "clientPassthrough", p, dev.client_passthrough);
  r.object(n, "downwardMetrics", p, dev.downward_metrics);
}

void parse_features(Reader& r, const YAML::Node& n, const std::string& p, Features& f) {
  for (const auto& kv : n) {
    const std::string key = kv.first.Scalar();
    const std::string fp = p + "." + key;
    if (kv.second.IsNull()) continue;
    auto enabled = [&](std::optional<bool>& out) {
      if (!r.expect_map(kv.second, fp)) return;
      out = r.boolean(kv.second, "enabled", fp).value_or(true);
    };
    if (key == "acpi")
      enabled(f.acpi);
    else if (key == "apic")
      enabled(f.apic);
    else if (key == "smm")
      enabled(f.smm);
    else if (key == "pvspinlock")
      enabled(f.pvspinlock);
    else if (key == "hyperv")
      f.hyperv = r.expect_map(kv.second, fp);
    else if (key == "hypervPassthrough") {
      std::optional<bool> e;
      enabled(e);
      f.hyperv_passthrough = e.value_or(false);
    } else if (key == "kvm") {
      if (r.expect_map(kv.second, fp))
        f.kvm_hidden = r.boolean(kv.second, "hidden", fp).value_or(false);
    } else {
      f.others.push_back(key);
    }
  }
}

void parse_clock(Reader& r, const YAML::Node& n, const std::string& p, Clock& c) {
  r.unknown_keys(n, p, {"utc", "timezone", "timer"});
  c.present = true;
  bool utc = false;
  YAML::Node u = r.object(n, "utc", p, utc);
  if (utc) {
    c.utc = true;
    c.utc_offset_seconds =
        r.integer(u, "offsetSeconds", p + ".utc", std::numeric_limits<std::int32_t>::min(),
                  std::numeric_limits<std::int32_t>::max());
  } else if (n.IsMap() && n["utc"].IsDefined()) {
    c.utc = true;
  }
  c.timezone = r.str(n, "timezone", p).value_or("");
  r.object(n, "timer", p, c.timer);
}

void parse_domain(Reader& r, const YAML::Node& n, Domain& d) {
  const std::string p = "spec.domain";
  r.unknown_keys(n, p,
                 {"cpu", "memory", "resources", "firmware", "devices", "features", "clock",
                  "machine", "launchSecurity", "ioThreadsPolicy", "ioThreads", "chassis"});
  bool present = false;
  YAML::Node x = r.object(n, "cpu", p, present);
  if (present) parse_cpu(r, x, p + ".cpu", d.cpu);
  x = r.object(n, "memory", p, present);
  if (present) parse_memory(r, x, p + ".memory", d.memory);
  x = r.object(n, "resources", p, present);
  if (present) parse_resources(r, x, p + ".resources", d.resources);
  x = r.object(n, "firmware", p, present);
  if (present) parse_firmware(r, x, p + ".firmware", d.firmware);
  x = r.object(n, "devices", p, present);
  if (present) parse_devices(r, x, p + ".devices", d.devices);
  x = r.object(n, "features", p, present);
  if (present) parse_features(r, x, p + ".features", d.features);
  x = r.object(n, "clock", p, present);
  if (present) parse_clock(r, x, p + ".clock", d.clock);
  x = r.object(n, "machine", p, present);
  if (present) {
    r.unknown_keys(x, p + ".machine", {"type"});
    d.machine_type = r.str(x, "type", p + ".machine").value_or("");
  }
  r.object(n, "launchSecurity", p, d.launch_security);
  r.object(n, "chassis", p, d.chassis);
  d.io_threads_policy = r.str(n, "ioThreadsPolicy", p).has_value();
}

void parse_cloud_init(Reader& r, const YAML::Node& n, const std::string& p, CloudInitData& c) {
  r.unknown_keys(n, p,
                 {"userData", "userDataBase64", "secretRef", "networkData", "networkDataBase64",
                  "networkDataSecretRef"});
  auto text = [&](const char* plain, const char* b64, std::string& out) {
    auto a = r.str(n, plain, p);
    auto b = r.str(n, b64, p);
    if (a && b) r.problem(p, std::string("set ") + plain + " or " + b64 + ", not both", n);
    if (a) out = *a;
    if (b && !base64_decode(*b, out)) r.problem(Reader::join(p, b64), "not valid base64", n[b64]);
  };
  text("userData", "userDataBase64", c.user_data);
  text("networkData", "networkDataBase64", c.network_data);
  bool present = false;
  YAML::Node s = r.object(n, "secretRef", p, present);
  if (present) c.user_data_secret = r.str(s, "name", p + ".secretRef").value_or("");
  s = r.object(n, "networkDataSecretRef", p, present);
  if (present) c.network_data_secret = r.str(s, "name", p + ".networkDataSecretRef").value_or("");
}

void parse_volume(Reader& r, const YAML::Node& n, const std::string& p, Volume& v) {
  v.name = r.str(n, "name", p).value_or("");
  struct Kind {
    const char* key;
    VolumeKind kind;
  };
  static constexpr std::array<Kind, 17> kKinds{{
      {"containerDisk", VolumeKind::ContainerDisk},
      {"emptyDisk", VolumeKind::EmptyDisk},
      {"persistentVolumeClaim", VolumeKind::PersistentVolumeClaim},
      {"dataVolume", VolumeKind::DataVolume},
      {"ephemeral", VolumeKind::Ephemeral},
      {"hostDisk", VolumeKind::HostDisk},
      {"cloudInitNoCloud", VolumeKind::CloudInitNoCloud},
      {"cloudInitConfigDrive", VolumeKind::CloudInitConfigDrive},
      {"secret", VolumeKind::Secret},
      {"configMap", VolumeKind::ConfigMap},
      {"serviceAccount", VolumeKind::ServiceAccount},
      {"downwardAPI", VolumeKind::DownwardApi},
      {"sysprep", VolumeKind::Other},
      {"downwardMetrics", VolumeKind::Other},
      {"memoryDump", VolumeKind::Other},
      {"hotplugVolume", VolumeKind::Other},
      {"containerPath", VolumeKind::Other},
  }};
  for (const auto& kv : n) {
    const std::string key = kv.first.Scalar();
    if (key == "name") continue;
    auto it =
        std::find_if(kKinds.begin(), kKinds.end(), [&](const Kind& k) { return key == k.key; });
    if (it == kKinds.end()) {
      CHL_LOG_DEBUG("ignoring unknown field {}.{}", p, key);
      continue;
    }
    ++v.kind_count;
    v.kind = it->kind;
    if (v.kind == VolumeKind::Other) v.other_kind = key;
    const YAML::Node& s = kv.second;
    const std::string sp = p + "." + key;
    if (s.IsNull()) continue;
    if (!r.expect_map(s, sp)) continue;
    switch (it->kind) {
      case VolumeKind::ContainerDisk:
        r.unknown_keys(s, sp, {"image", "path", "imagePullPolicy", "imagePullSecret"});
        v.image = r.str(s, "image", sp).value_or("");
        v.image_path = r.str(s, "path", sp).value_or("");
        break;
      case VolumeKind::EmptyDisk:
        r.unknown_keys(s, sp, {"capacity"});
        v.capacity = r.quantity(s, "capacity", sp);
        break;
      case VolumeKind::PersistentVolumeClaim:
        r.unknown_keys(s, sp, {"claimName", "readOnly", "hotpluggable"});
        v.claim_name = r.str(s, "claimName", sp).value_or("");
        v.read_only = r.boolean(s, "readOnly", sp).value_or(false);
        break;
      case VolumeKind::DataVolume:
        r.unknown_keys(s, sp, {"name", "hotpluggable"});
        v.claim_name = r.str(s, "name", sp).value_or("");
        break;
      case VolumeKind::Ephemeral: {
        r.unknown_keys(s, sp, {"persistentVolumeClaim"});
        bool present = false;
        YAML::Node pvc = r.object(s, "persistentVolumeClaim", sp, present);
        if (present) {
          v.claim_name = r.str(pvc, "claimName", sp + ".persistentVolumeClaim").value_or("");
          v.read_only = r.boolean(pvc, "readOnly", sp + ".persistentVolumeClaim").value_or(false);
        }
        break;
      }
      case VolumeKind::HostDisk:
        r.unknown_keys(s, sp, {"path", "type", "capacity", "shared"});
        v.host_path = r.str(s, "path", sp).value_or("");
        v.host_disk_type = r.str(s, "type", sp).value_or("");
        v.capacity = r.quantity(s, "capacity", sp);
        break;
      case VolumeKind::CloudInitNoCloud:
      case VolumeKind::CloudInitConfigDrive:
        parse_cloud_init(r, s, sp, v.cloud_init);
        break;
      case VolumeKind::Secret:
        r.unknown_keys(s, sp, {"secretName", "optional", "volumeLabel"});
        v.ref_name = r.str(s, "secretName", sp).value_or("");
        v.volume_label = r.str(s, "volumeLabel", sp).value_or("");
        break;
      case VolumeKind::ConfigMap:
        r.unknown_keys(s, sp, {"name", "optional", "volumeLabel"});
        v.ref_name = r.str(s, "name", sp).value_or("");
        v.volume_label = r.str(s, "volumeLabel", sp).value_or("");
        break;
      case VolumeKind::ServiceAccount:
        r.unknown_keys(s, sp, {"serviceAccountName"});
        v.ref_name = r.str(s, "serviceAccountName", sp).value_or("");
        break;
      default:
        break;
    }
  }
}

void parse_network(Reader& r, const YAML::Node& n, const std::string& p, Network& net) {
  r.unknown_keys(n, p, {"name", "pod", "multus"});
  net.name = r.str(n, "name", p).value_or("");
  bool pod = false, multus = false;
  YAML::Node pn = r.object(n, "pod", p, pod);
  if (!pod && n["pod"].IsDefined() && n["pod"].IsNull()) pod = true;
  YAML::Node mn = r.object(n, "multus", p, multus);
  if (pod && multus) r.problem(p, "set either pod or multus, not both", n);
  if (pod) {
    net.kind = NetworkKind::Pod;
    if (pn.IsDefined()) {
      r.unknown_keys(pn, p + ".pod", {"vmNetworkCIDR", "vmIPv6NetworkCIDR"});
      net.vm_network_cidr = r.str(pn, "vmNetworkCIDR", p + ".pod").value_or("");
    }
  } else if (multus) {
    net.kind = NetworkKind::Multus;
    r.unknown_keys(mn, p + ".multus", {"networkName", "default"});
    net.multus_network_name = r.str(mn, "networkName", p + ".multus").value_or("");
    net.multus_default = r.boolean(mn, "default", p + ".multus").value_or(false);
  }
}

void parse_spec(Reader& r, const YAML::Node& n, VmiSpec& s) {
  const std::string p = "spec";
  r.unknown_keys(n, p,
                 {"domain",
                  "volumes",
                  "networks",
                  "hypervisor",
                  "architecture",
                  "hostname",
                  "subdomain",
                  "terminationGracePeriodSeconds",
                  "nodeSelector",
                  "affinity",
                  "tolerations",
                  "evictionStrategy",
                  "accessCredentials",
                  "readinessProbe",
                  "livenessProbe",
                  "dnsPolicy",
                  "dnsConfig",
                  "priorityClassName",
                  "schedulerName",
                  "startStrategy",
                  "topologySpreadConstraints"});
  bool present = false;
  YAML::Node d = r.object(n, "domain", p, present);
  if (present) {
    s.has_domain = true;
    parse_domain(r, d, s.domain);
  }
  YAML::Node vols = Reader::child(n, "volumes");
  if (vols.IsDefined() && r.expect_list(vols, p + ".volumes")) {
    for (std::size_t i = 0; i < vols.size(); ++i) {
      const std::string vp = Reader::index(p + ".volumes", i);
      Volume v;
      if (r.expect_map(vols[i], vp)) parse_volume(r, vols[i], vp, v);
      s.volumes.push_back(std::move(v));
    }
  }
  YAML::Node nets = Reader::child(n, "networks");
  if (nets.IsDefined() && r.expect_list(nets, p + ".networks")) {
    for (std::size_t i = 0; i < nets.size(); ++i) {
      const std::string np = Reader::index(p + ".networks", i);
      Network net;
      if (r.expect_map(nets[i], np)) parse_network(r, nets[i], np, net);
      s.networks.push_back(std::move(net));
    }
  }
  s.hypervisor = r.str(n, "hypervisor", p).value_or("");
  s.architecture = r.str(n, "architecture", p).value_or("");
  s.hostname = r.str(n, "hostname", p).value_or("");
  s.subdomain = r.str(n, "subdomain", p).value_or("");
  s.termination_grace_period_seconds =
      r.integer(n, "terminationGracePeriodSeconds", p, std::numeric_limits<std::int64_t>::min() / 2,
                std::numeric_limits<std::int64_t>::max() / 2);
}

constexpr std::array<std::string_view, 2> kApiVersions{"kubevirt.io/v1", "kubevirt.io/v1alpha3"};

// Counts documents without building nodes.
class DocumentCounter final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// yaml-cpp 0.7 (bookworm) loops forever in LoadAll(), adding a null document per turn until
// memory runs out, on some malformed input such as `{k},` (jbeder/yaml-cpp#1040, fixed
// upstream by #1319). Walk the documents first with a bound: a stream of n bytes holds at most
// n + 1 documents. Throws what LoadAll would throw on a syntax error.
bool document_count_bounded(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentCounter counter;
  for (std::size_t docs = 0; docs <= text.size() + 1; ++docs) {
    if (!parser.HandleNextDocument(counter)) return true;
  }
  return false;
}

}  // namespace

ParseOutcome parse_vmi(std::string_view text) {
  ParseOutcome out;
  std::vector<YAML::Node> docs;
  try {
    const std::string copy(text);
    if (!document_count_bounded(copy)) {
      out.fatal = true;
      out.problems.push_back({"", "not valid YAML or JSON: the YAML parser makes no progress"});
      return out;
    }
    docs = YAML::LoadAll(copy);
  } catch (const YAML::ParserException& e) {
    out.fatal = true;
    out.problems.push_back({"", "not valid YAML or JSON: line " + std::to_string(e.mark.line + 1) +
                                    ", column " + std::to_string(e.mark.column + 1) + ": " +
                                    e.msg});
    return out;
  } catch (const YAML::Exception& e) {
    out.fatal = true;
    out.problems.push_back({"", std::string("not valid YAML or JSON: ") + e.what()});
    return out;
  }
  // The first VirtualMachineInstance; else the first document, to report its kind.
  const YAML::Node* doc = nullptr;
  for (const auto& d : docs) {
    if (d.IsMap() && d["kind"].IsDefined() && d["kind"].IsScalar() &&
        d["kind"].Scalar() == "VirtualMachineInstance") {
      doc = &d;
      break;
    }
  }
  if (!doc) {
    for (const auto& d : docs) {
      if (!d.IsNull()) {
        doc = &d;
        break;
      }
    }
  }
  if (!doc) {
    out.fatal = true;
    out.problems.push_back(
        {"", "empty document: expected a kubevirt.io/v1 VirtualMachineInstance"});
    return out;
  }
  Reader r(out.problems);
  if (!doc->IsMap()) {
    out.fatal = true;
    r.problem("", "expected a VirtualMachineInstance object, got " + describe(*doc), *doc);
    return out;
  }
  const YAML::Node& root = *doc;
  try {
    Vmi& vmi = out.vmi;
    vmi.kind = r.str(root, "kind", "").value_or("");
    vmi.api_version = r.str(root, "apiVersion", "").value_or("");
    if (vmi.kind != "VirtualMachineInstance") {
      out.fatal = true;
      std::string msg = vmi.kind.empty() ? "missing; expected VirtualMachineInstance"
                                         : "expected VirtualMachineInstance, got " + vmi.kind;
      if (vmi.kind == "VirtualMachine") msg += " (use the VMI in its spec.template)";
      r.problem("kind", msg, root["kind"].IsDefined() ? root["kind"] : root);
    }
    if (std::find(kApiVersions.begin(), kApiVersions.end(), vmi.api_version) ==
        kApiVersions.end()) {
      out.fatal = true;
      r.problem(
          "apiVersion",
          (vmi.api_version.empty() ? std::string("missing") : "unsupported " + vmi.api_version) +
              "; expected kubevirt.io/v1",
          root["apiVersion"].IsDefined() ? root["apiVersion"] : root);
    }
    if (out.fatal) return out;
    r.unknown_keys(root, "", {"apiVersion", "kind", "metadata", "spec", "status"});
    YAML::Node md = Reader::child(root, "metadata");
    if (md.IsDefined())
      parse_metadata(r, md, vmi.metadata);
    else
      vmi.metadata.namespace_ = "default";
    YAML::Node spec = Reader::child(root, "spec");
    if (!spec.IsDefined()) {
      r.problem("spec", "missing; a VirtualMachineInstance needs spec.domain", root);
    } else if (r.expect_map(spec, "spec")) {
      parse_spec(r, spec, vmi.spec);
    }
  } catch (const YAML::Exception& e) {
    // yaml-cpp throws on a few malformed shapes (e.g. keys that are not scalars).
    out.problems.push_back({"", std::string("malformed manifest: ") + e.what()});
  }
  return out;
}

common::Result<std::string> read_manifest(const std::string& path) {
  int fd = 0;
  common::UniqueFd owned;
  if (path != "-") {
    owned = common::UniqueFd(
        common::retry_eintr([&] { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC); }));
    if (!owned) return common::fail_errno("reading " + path);
    fd = owned.get();
  }
  std::string data;
  char buf[65536];
  for (;;) {
    ssize_t n = common::retry_eintr([&] { return ::read(fd, buf, sizeof buf); });
    if (n < 0) return common::fail_errno("reading " + path);
    if (n == 0) break;
    data.append(buf, static_cast<std::size_t>(n));
    if (data.size() > (16u << 20)) {
      return common::fail(std::errc::file_too_large, "reading " + path + ": larger than 16 MiB");
    }
  }
  return data;
}

}  // namespace chl::vmi

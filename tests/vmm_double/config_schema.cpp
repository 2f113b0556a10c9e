#include "tests/vmm_double/config_schema.hpp"

#include <cstdint>
#include <cstdio>
#include <deque>
#include <limits>
#include <optional>
#include <random>

namespace chl::vmm_double {

namespace {

using Kind = SchemaType::Kind;
using P = SchemaField::Presence;

// Types live for the whole process; a deque keeps their addresses stable.
std::deque<SchemaType>& store() {
  static std::deque<SchemaType> s;
  return s;
}
const SchemaType* make(SchemaType t) {
  store().push_back(std::move(t));
  return &store().back();
}
SchemaType basic(Kind kind, std::string expecting, unsigned long long max = 0) {
  SchemaType t;
  t.kind = kind;
  t.expecting = std::move(expecting);
  t.max = max;
  return t;
}

const SchemaType* t_bool() {
  static const SchemaType* t = make(basic(Kind::Bool, "a boolean"));
  return t;
}
const SchemaType* t_u8() {
  static const SchemaType* t = make(basic(Kind::Unsigned, "u8", 0xff));
  return t;
}
const SchemaType* t_u16() {
  static const SchemaType* t = make(basic(Kind::Unsigned, "u16", 0xffff));
  return t;
}
const SchemaType* t_u32() {
  static const SchemaType* t = make(basic(Kind::Unsigned, "u32", 0xffffffffULL));
  return t;
}
const SchemaType* t_u64() {
  static const SchemaType* t =
      make(basic(Kind::Unsigned, "u64", std::numeric_limits<std::uint64_t>::max()));
  return t;
}
const SchemaType* t_usize() {
  static const SchemaType* t =
      make(basic(Kind::Unsigned, "usize", std::numeric_limits<std::uint64_t>::max()));
  return t;
}
const SchemaType* t_string() {
  static const SchemaType* t = make(basic(Kind::String, "a string"));
  return t;
}
const SchemaType* t_path() {
  static const SchemaType* t = make(basic(Kind::Path, "path string"));
  return t;
}
const SchemaType* t_any() {
  static const SchemaType* t = make(basic(Kind::Any, "any value"));
  return t;
}
const SchemaType* seq_of(const SchemaType* elem) {
  SchemaType t = basic(Kind::Seq, "a sequence");
  t.elem = elem;
  return make(std::move(t));
}
const SchemaType* enum_of(const std::string& name, std::vector<std::string> variants) {
  SchemaType t = basic(Kind::Enum, "enum " + name);
  t.variants = std::move(variants);
  return make(std::move(t));
}
const SchemaType* struct_of(const std::string& name, std::vector<SchemaField> fields) {
  SchemaType t = basic(Kind::Struct, "struct " + name);
  t.fields = std::move(fields);
  return make(std::move(t));
}

SchemaField req(std::string name, const SchemaType* t) {
  return {std::move(name), t, P::Required, {}, {}, false, false};
}
SchemaField opt(std::string name, const SchemaType* t) {
  return {std::move(name), t, P::Option, {}, {}, false, false};
}
SchemaField def(std::string name, const SchemaType* t, Json value) {
  return {std::move(name), t, P::Default, std::move(value), {}, false, false};
}
// Option<T> whose serde default is Some(value).
SchemaField def_opt(std::string name, const SchemaType* t, Json value) {
  return {std::move(name), t, P::Default, std::move(value), {}, false, true};
}
SchemaField iommu() { return {"iommu", t_bool(), P::Default, false, {}, true, false}; }
// The PCI placement fields CH flattens into every PCI device config.
std::vector<SchemaField> pci_common() {
  return {opt("id", t_string()), def("pci_segment", t_u16(), 0), opt("pci_device_id", t_u8())};
}
std::vector<SchemaField> cat(std::vector<SchemaField> a, const std::vector<SchemaField>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Json random_local_mac() {
  static std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int> byte(0, 255);
  char buf[18];
  std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", (byte(rng) & 0xfe) | 0x02,
                byte(rng), byte(rng), byte(rng), byte(rng), byte(rng));
  return std::string(buf);
}

const SchemaType* console_mode() {
  static const SchemaType* t =
      enum_of("ConsoleOutputMode", {"Off", "Pty", "Tty", "File", "Socket", "Null"});
  return t;
}

const SchemaType* cpus_config() {
  static const SchemaType* t =
      struct_of("CpusConfig",
                {req("boot_vcpus", t_u32()), req("max_vcpus", t_u32()), opt("topology", t_any()),
                 def("kvm_hyperv", t_bool(), false), def("max_phys_bits", t_u8(), 46),
                 opt("affinity", seq_of(t_any())),
                 def("features", struct_of("CpuFeatures", {def("amx", t_bool(), false)}),
                     Json::parse(R"({"amx":false})")),
                 def("nested", t_bool(), true),
                 def("core_scheduling", enum_of("CoreScheduling", {"Vm", "Vcpu", "Off"}), "Vm")});
  return t;
}

// CH v52 vmm/src/vm_config.rs MemoryZoneConfig (line 163).
const SchemaType* memory_zone_config() {
  static const SchemaType* t = struct_of(
      "MemoryZoneConfig",
      {req("id", t_string()), req("size", t_u64()), opt("file", t_path()), def("shared", t_bool(), false),
       def("hugepages", t_bool(), false), opt("hugepage_size", t_u64()), opt("host_numa_node", t_u32()),
       opt("hotplug_size", t_u64()), opt("hotplugged_size", t_u64()), def("prefault", t_bool(), false),
       def("mergeable", t_bool(), false)});
  return t;
}

// CH v52 vmm/src/vm_config.rs NumaDistance, NumaConfig (lines 774-794).
const SchemaType* numa_config() {
  static const SchemaType* distance = struct_of(
      "NumaDistance", {def("destination", t_u32(), 0), def("distance", t_u8(), 0)});
  static const SchemaType* t = struct_of(
      "NumaConfig", {req("guest_numa_id", t_u32()), opt("cpus", seq_of(t_u32())),
                     opt("distances", seq_of(distance)), opt("memory_zones", seq_of(t_string())),
                     opt("pci_segments", seq_of(t_u16())), opt("device_id", t_string())});
  return t;
}

const SchemaType* memory_config() {
  static const SchemaType* t =
      struct_of("MemoryConfig",
                {req("size", t_u64()), def("mergeable", t_bool(), false),
                 def("hotplug_method", enum_of("HotplugMethod", {"Acpi", "VirtioMem"}), "Acpi"),
                 opt("hotplug_size", t_u64()), opt("hotplugged_size", t_u64()),
                 def("shared", t_bool(), false), def("hugepages", t_bool(), false),
                 opt("hugepage_size", t_u64()), def("prefault", t_bool(), false),
                 opt("zones", seq_of(memory_zone_config())), def("thp", t_bool(), true)});
  return t;
}

const SchemaType* payload_config() {
  static const SchemaType* t =
      struct_of("PayloadConfig", {opt("firmware", t_path()), opt("kernel", t_path()),
                                  opt("cmdline", t_string()), opt("initramfs", t_path())});
  return t;
}

const SchemaType* rng_config() {
  static const SchemaType* t =
      struct_of("RngConfig", cat(pci_common(), {req("src", t_path()), iommu()}));
  return t;
}

const SchemaType* balloon_config() {
  static const SchemaType* t =
      struct_of("BalloonConfig",
                cat(pci_common(), {req("size", t_u64()), def("deflate_on_oom", t_bool(), false),
                                   def("free_page_reporting", t_bool(), false), iommu()}));
  return t;
}

const SchemaType* serial_config() {
  static const SchemaType* t = struct_of(
      "SerialConfig",
      {opt("file", t_path()), req("mode", console_mode()), opt("socket", t_path()), iommu()});
  return t;
}

const SchemaType* console_config() {
  static const SchemaType* t = struct_of(
      "ConsoleConfig",
      cat({opt("file", t_path()), req("mode", console_mode()), opt("socket", t_path()), iommu()},
          pci_common()));
  return t;
}

const SchemaType* debug_console_config() {
  static const SchemaType* t = struct_of(
      "DebugConsoleConfig",
      {opt("file", t_path()), req("mode", console_mode()), def_opt("iobase", t_u16(), 233)});
  return t;
}

const SchemaType* user_device_config() {
  static const SchemaType* t =
      struct_of("UserDeviceConfig", cat({req("socket", t_path())}, pci_common()));
  return t;
}

const SchemaType* vdpa_config() {
  static const SchemaType* t = struct_of(
      "VdpaConfig",
      cat({req("path", t_path()), def("num_queues", t_usize(), 1), iommu()}, pci_common()));
  return t;
}

const SchemaType* platform_config() {
  static const SchemaType* t =
      struct_of("PlatformConfig",
                {def("num_pci_segments", t_u16(), 1), opt("iommu_segments", seq_of(t_u16())),
                 opt("iommu_address_width_bits", t_u8()), opt("serial_number", t_string()),
                 opt("uuid", t_string()), opt("oem_strings", seq_of(t_string()))});
  return t;
}

const SchemaType* tpm_config() {
  static const SchemaType* t = struct_of("TpmConfig", {req("socket", t_path())});
  return t;
}

std::string debug_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out + "\"";
}

bool is_float_text(const std::string& t) { return t.find_first_of(".eE") != std::string::npos; }

std::string unexpected(const JsonNode& n) {
  switch (n.kind) {
    case JsonNode::Kind::Null:
      return "null";
    case JsonNode::Kind::Bool:
      return std::string("boolean `") + (n.boolean ? "true" : "false") + "`";
    case JsonNode::Kind::Number:
      return is_float_text(n.text) ? "floating point `" + n.text + "`" : "integer `" + n.text + "`";
    case JsonNode::Kind::String:
      return "string " + debug_string(n.text);
    case JsonNode::Kind::Array:
      return "sequence";
    case JsonNode::Kind::Object:
      return "map";
  }
  return "value";
}

tl::unexpected<std::string> invalid_type(const JsonNode& n, const SchemaType& t) {
  const bool container = n.kind == JsonNode::Kind::Array || n.kind == JsonNode::Kind::Object;
  // serde reports a wrong scalar after reading it, a wrong container before its bracket.
  return tl::unexpected("invalid type: " + unexpected(n) + ", expected " + t.expecting +
                        at(container ? n.start : n.end));
}

Json any_to_json(const JsonNode& n) {
  switch (n.kind) {
    case JsonNode::Kind::Null:
      return nullptr;
    case JsonNode::Kind::Bool:
      return n.boolean;
    case JsonNode::Kind::Number:
      return Json::parse(n.text);
    case JsonNode::Kind::String:
      return n.text;
    case JsonNode::Kind::Array: {
      Json a = Json::array();
      for (const auto& i : n.items) a.push_back(any_to_json(i));
      return a;
    }
    case JsonNode::Kind::Object: {
      Json o = Json::object();
      for (const auto& [k, v] : n.members) o[k] = any_to_json(v);
      return o;
    }
  }
  return nullptr;
}

std::string expected_variants(const std::vector<std::string>& v) {
  if (v.empty()) return "there are no variants";
  if (v.size() == 1) return "expected `" + v[0] + "`";
  if (v.size() == 2) return "expected `" + v[0] + "` or `" + v[1] + "`";
  std::string s = "expected one of ";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", `" : "`") + v[i] + "`";
  return s;
}

}  // namespace

tl::expected<Json, std::string> normalize(const JsonNode& n, const SchemaType& t) {
  switch (t.kind) {
    case Kind::Any:
      return any_to_json(n);
    case Kind::Bool:
      if (n.kind != JsonNode::Kind::Bool) return invalid_type(n, t);
      return Json(n.boolean);
    case Kind::Signed:
    case Kind::Unsigned: {
      if (n.kind != JsonNode::Kind::Number) return invalid_type(n, t);
      if (is_float_text(n.text)) return invalid_type(n, t);
      if (!n.text.empty() && n.text[0] == '-') {
        return tl::unexpected("invalid value: integer `" + n.text + "`, expected " + t.expecting +
                              at(n.end));
      }
      unsigned long long v = 0;
      bool overflow = false;
      for (char c : n.text) {
        const unsigned d = static_cast<unsigned>(c - '0');
        if (v > (std::numeric_limits<unsigned long long>::max() - d) / 10) overflow = true;
        v = v * 10 + d;
      }
      if (overflow) {
        return tl::unexpected("invalid type: floating point `" + n.text + "`, expected " +
                              t.expecting + at(n.end));
      }
      if (v > t.max)
        return tl::unexpected("invalid value: integer `" + n.text + "`, expected " + t.expecting +
                              at(n.end));
      return Json(static_cast<std::uint64_t>(v));
    }
    case Kind::String:
    case Kind::Path:
      if (n.kind != JsonNode::Kind::String) return invalid_type(n, t);
      return Json(n.text);
    case Kind::Enum:
      if (n.kind != JsonNode::Kind::String) return invalid_type(n, t);
      for (const auto& v : t.variants) {
        if (v == n.text) return Json(n.text);
      }
      return tl::unexpected("unknown variant `" + n.text + "`, " + expected_variants(t.variants) +
                            at(n.end));
    case Kind::Seq: {
      if (n.kind != JsonNode::Kind::Array) return invalid_type(n, t);
      Json a = Json::array();
      for (const auto& item : n.items) {
        auto v = normalize(item, *t.elem);
        if (!v) return v;
        a.push_back(std::move(*v));
      }
      return a;
    }
    case Kind::Struct: {
      if (n.kind != JsonNode::Kind::Object) return invalid_type(n, t);
      // Fields are checked in document order (as serde reads them), unknown keys skipped.
      std::vector<std::optional<Json>> values(t.fields.size());
      for (const auto& [key, value] : n.members) {
        for (std::size_t i = 0; i < t.fields.size(); ++i) {
          const auto& f = t.fields[i];
          if (f.name != key) continue;
          if ((f.presence == P::Option || f.nullable) && value.kind == JsonNode::Kind::Null) {
            values[i] = Json(nullptr);
          } else {
            auto v = normalize(value, *f.type);
            if (!v) return v;
            values[i] = std::move(*v);
          }
        }
      }
      Json out = Json::object();
      for (std::size_t i = 0; i < t.fields.size(); ++i) {
        const auto& f = t.fields[i];
        if (!values[i]) {
          switch (f.presence) {
            case P::Required:
              return tl::unexpected("missing field `" + f.name + "`" + at(n.end));
            case P::Option:
              values[i] = Json(nullptr);
              break;
            case P::Default:
              values[i] = f.make_default ? f.make_default() : f.def;
              break;
          }
        }
        if (f.skip_if_false && values[i]->is_boolean() && !values[i]->get<bool>()) continue;
        out[f.name] = std::move(*values[i]);
      }
      return out;
    }
  }
  return any_to_json(n);
}

tl::expected<Json, std::string> deserialize(std::string_view body, const SchemaType& type) {
  auto node = parse_json(body);
  if (!node) return tl::unexpected(node.error());
  return normalize(*node, type);
}

const SchemaType& disk_config_type() {
  static const SchemaType* t = struct_of(
      "DiskConfig",
      cat(pci_common(),
          {opt("path", t_path()), def("readonly", t_bool(), false), def("direct", t_bool(), false),
           iommu(), def("num_queues", t_usize(), 1), def("queue_size", t_u16(), 128),
           def("vhost_user", t_bool(), false), opt("vhost_socket", t_string()),
           opt("rate_limit_group", t_string()), opt("rate_limiter_config", t_any()),
           def("disable_io_uring", t_bool(), false), def("disable_aio", t_bool(), false),
           opt("serial", t_string()), opt("queue_affinity", seq_of(t_any())),
           def("backing_files", t_bool(), false), def("sparse", t_bool(), true),
           opt("image_type", enum_of("ImageType", {"FixedVhd", "Qcow2", "Raw", "Vhdx", "Unknown"})),
           def("lock_granularity", enum_of("LockGranularityChoice", {"ByteRange", "Full"}),
               "ByteRange")}));
  return *t;
}

const SchemaType& net_config_type() {
  static const SchemaType* t = [] {
    SchemaField mac = def("mac", t_string(), nullptr);
    mac.make_default = random_local_mac;
    return struct_of(
        "NetConfig",
        cat({opt("tap", t_string()), opt("ip", t_string()), opt("mask", t_string()), mac,
             opt("host_mac", t_string()), opt("mtu", t_u16()), iommu(),
             def("num_queues", t_usize(), 2), def("queue_size", t_u16(), 256),
             def("vhost_user", t_bool(), false), opt("vhost_socket", t_string()),
             def("vhost_mode", enum_of("VhostMode", {"Client", "Server"}), "Client")},
            cat(pci_common(),
                {opt("fds", seq_of(t_any())), opt("rate_limiter_config", t_any()),
                 def("offload_tso", t_bool(), true), def("offload_ufo", t_bool(), true),
                 def("offload_csum", t_bool(), true)})));
  }();
  return *t;
}

const SchemaType& fs_config_type() {
  static const SchemaType* t =
      struct_of("FsConfig", cat({req("tag", t_string()), req("socket", t_path()),
                                 def("num_queues", t_usize(), 1), def("queue_size", t_u16(), 1024)},
                                pci_common()));
  return *t;
}

const SchemaType& pmem_config_type() {
  static const SchemaType* t =
      struct_of("PmemConfig", cat({req("file", t_path()), opt("size", t_u64()), iommu(),
                                   def("discard_writes", t_bool(), false)},
                                  pci_common()));
  return *t;
}

const SchemaType& device_config_type() {
  static const SchemaType* t =
      struct_of("DeviceConfig", cat({req("path", t_path()), iommu()}, pci_common()));
  return *t;
}

const SchemaType& vsock_config_type() {
  static const SchemaType* t = struct_of(
      "VsockConfig", cat({req("cid", t_u32()), req("socket", t_path()), iommu()}, pci_common()));
  return *t;
}

const SchemaType& vm_config_type() {
  static const SchemaType* t = struct_of(
      "VmConfig",
      {def("cpus", cpus_config(),
           Json::parse(
               R"({"boot_vcpus":1,"max_vcpus":1,"topology":null,"kvm_hyperv":false,"max_phys_bits":46,)"
               R"("affinity":null,"features":{"amx":false},"nested":true,"core_scheduling":"Vm"})")),
       def("memory", memory_config(),
           Json::parse(
               R"({"size":536870912,"mergeable":false,"hotplug_method":"Acpi","hotplug_size":null,)"
               R"("hotplugged_size":null,"shared":false,"hugepages":false,"hugepage_size":null,)"
               R"("prefault":false,"zones":null,"thp":true})")),
       opt("payload", payload_config()),
       opt("rate_limit_groups", seq_of(t_any())),
       opt("disks", seq_of(&disk_config_type())),
       opt("net", seq_of(&net_config_type())),
       def("rng", rng_config(),
           Json::parse(R"({"id":null,"pci_segment":0,"pci_device_id":null,"src":"/dev/urandom"})")),
       opt("balloon", balloon_config()),
       opt("generic_vhost_user", seq_of(t_any())),
       opt("fs", seq_of(&fs_config_type())),
       opt("pmem", seq_of(&pmem_config_type())),
       def("serial", serial_config(), Json::parse(R"({"file":null,"mode":"Null","socket":null})")),
       def("console", console_config(),
           Json::parse(
               R"({"file":null,"mode":"Tty","socket":null,"id":null,"pci_segment":0,"pci_device_id":null})")),
       def("debug_console", debug_console_config(),
           Json::parse(R"({"file":null,"mode":"Off","iobase":233})")),
       opt("devices", seq_of(&device_config_type())),
       opt("user_devices", seq_of(user_device_config())),
       opt("vdpa", seq_of(vdpa_config())),
       opt("vsock", &vsock_config_type()),
       def("pvpanic", t_bool(), false),
       def("iommu", t_bool(), false),
       opt("numa", seq_of(numa_config())),
       def("watchdog", t_bool(), false),
       opt("pci_segments", seq_of(t_any())),
       opt("platform", platform_config()),
       opt("tpm", tpm_config()),
       def("landlock_enable", t_bool(), false),
       opt("landlock_rules", seq_of(t_any()))});
  return *t;
}

const SchemaType& remove_device_type() {
  static const SchemaType* t = struct_of("VmRemoveDeviceData", {req("id", t_string())});
  return *t;
}

const SchemaType& resize_type() {
  static const SchemaType* t =
      struct_of("VmResizeData", {opt("desired_vcpus", t_u32()), opt("desired_ram", t_u64()),
                                 opt("desired_balloon", t_u64())});
  return *t;
}

const SchemaType& snapshot_config_type() {
  static const SchemaType* t = struct_of("VmSnapshotConfig", {req("destination_url", t_string())});
  return *t;
}

const SchemaType& restore_config_type() {
  static const SchemaType* t = struct_of(
      "RestoreConfig",
      {req("source_url", t_path()), def("prefault", t_bool(), false),
       def("memory_restore_mode", enum_of("MemoryRestoreMode", {"Copy", "OnDemand"}), "Copy"),
       def("resume", t_bool(), false), opt("net_fds", seq_of(t_any()))});
  return *t;
}

const SchemaType& receive_migration_type() {
  static const SchemaType* t =
      struct_of("VmReceiveMigrationData", {req("receiver_url", t_string())});
  return *t;
}

const SchemaType& send_migration_type() {
  static const SchemaType* t = struct_of(
      "VmSendMigrationData",
      {req("destination_url", t_string()), def("local", t_bool(), false),
       // CH v52 vmm/src/api/mod.rs:310-333 (NonZero fields: 0 is refused in the handler)
       def("downtime_ms", t_u64(), 300), def("timeout_s", t_u64(), 3600),
       def("timeout_strategy", enum_of("TimeoutStrategy", {"Cancel", "Ignore"}), "Cancel"),
       def("connections", t_u32(), 1)});
  return *t;
}

}  // namespace chl::vmm_double

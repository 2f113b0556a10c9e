// See go_domain.hpp. The api.Domain types below are those of KubeVirt d923fdb's
// pkg/virt-launcher/virtwrap/api/schema.go (and k8s.io/apimachinery's ObjectMeta/TypeMeta/Time),
// with the Go type of every field the launcher writes and virt-handler reads; fields of no
// interest to either keep their name and are decoded as "any" (reported in `unmodelled` when a
// document sets them, so a test can tell it was not type-checked).
#include "tests/kubevirt/go_domain.hpp"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <initializer_list>
#include <utility>

namespace chl::test {

using Json = nlohmann::json;

namespace {

// ---- Go types -------------------------------------------------------------------------------
enum class Kind { String, Int, Uint, Bool, Struct, Ptr, Slice, Map, Time, Alias, Any };

struct GoType {
  Kind kind = Kind::Any;
  std::string name = {};
  const GoType* elem = nullptr;                                    // Ptr, Slice, Map
  std::vector<std::pair<std::string, const GoType*>> fields = {};  // Struct, in declaration order
};

const GoType kString{Kind::String, "string"};
const GoType kInt{Kind::Int, "int64"};
const GoType kUint{Kind::Uint, "uint64"};
const GoType kBool{Kind::Bool, "bool"};
const GoType kTime{Kind::Time, "metav1.Time"};
const GoType kAlias{Kind::Alias, "api.Alias"};  // its own UnmarshalJSON (schema.go:1152-1159)
const GoType kAny{Kind::Any, "(not modelled)"};

// Types are built once, on first use, and live for the process.
const GoType* ptr(const GoType* t) { return new GoType{Kind::Ptr, "*" + t->name, t}; }
const GoType* slice(const GoType* t) { return new GoType{Kind::Slice, "[]" + t->name, t}; }
const GoType* map_of(const GoType* t) { return new GoType{Kind::Map, "map[string]" + t->name, t}; }
const GoType* strukt(const std::string& name,
                     std::initializer_list<std::pair<std::string, const GoType*>> f) {
  return new GoType{Kind::Struct, name, nullptr, f};
}
// A struct whose fields are all strings.
const GoType* strings(const std::string& name, std::initializer_list<const char*> names) {
  auto* t = new GoType{Kind::Struct, name};
  for (const char* n : names) t->fields.emplace_back(n, &kString);
  return t;
}

const GoType* domain_type() {
  static const GoType* domain = [] {
    const GoType* any = &kAny;
    const GoType* xml_name = strings("xml.Name", {"Space", "Local"});
    const GoType* address =
        strings("api.Address", {"Type", "Domain", "Bus", "Slot", "Function", "Controller", "Target",
                                "Unit", "UUID", "Device", "CSSID", "SSID", "DevNo"});
    const GoType* memory = strukt("api.Memory", {{"Value", &kUint}, {"Unit", &kString}});
    const GoType* empty = strukt("struct{}", {});
    const GoType* object_meta =
        strukt("metav1.ObjectMeta", {{"name", &kString},
                                     {"generateName", &kString},
                                     {"namespace", &kString},
                                     {"selfLink", &kString},
                                     {"uid", &kString},
                                     {"resourceVersion", &kString},
                                     {"generation", &kInt},
                                     {"creationTimestamp", &kTime},
                                     {"deletionTimestamp", ptr(&kTime)},
                                     {"deletionGracePeriodSeconds", ptr(&kInt)},
                                     {"labels", map_of(&kString)},
                                     {"annotations", map_of(&kString)},
                                     {"ownerReferences", any},
                                     {"finalizers", slice(&kString)},
                                     {"managedFields", any}});
    const GoType* os = strukt("api.OS", {{"Firmware", &kString},
                                         {"FirmwareInfo", any},
                                         {"Type", strings("api.OSType", {"OS", "Arch", "Machine"})},
                                         {"ACPI", any},
                                         {"SMBios", any},
                                         {"BootOrder", any},
                                         {"BootMenu", any},
                                         {"BIOS", any},
                                         {"BootLoader", any},
                                         {"NVRam", any},
                                         {"Kernel", &kString},
                                         {"Initrd", &kString},
                                         {"KernelArgs", &kString}});
    const GoType* iface =
        strukt("api.Interface",
               {{"XMLName", xml_name},
                {"Address", ptr(address)},
                {"Type", &kString},
                {"TrustGuestRxFilters", &kString},
                {"Source", strukt("api.InterfaceSource", {{"Network", &kString},
                                                          {"Device", &kString},
                                                          {"Bridge", &kString},
                                                          {"Mode", &kString},
                                                          {"Address", ptr(address)}})},
                {"Target", ptr(strings("api.InterfaceTarget", {"Device", "Managed"}))},
                {"Model", ptr(strings("api.Model", {"Type"}))},
                {"MAC", ptr(strings("api.MAC", {"MAC"}))},
                {"MTU", ptr(strings("api.MTU", {"Size"}))},
                {"BandWidth", any},
                {"BootOrder", any},
                {"LinkState", ptr(strings("api.LinkState", {"State"}))},
                {"FilterRef", any},
                {"Alias", ptr(&kAlias)},
                {"Driver",
                 ptr(strukt("api.InterfaceDriver",
                            {{"Name", &kString}, {"Queues", ptr(&kUint)}, {"IOMMU", &kString}}))},
                {"Rom", ptr(strings("api.Rom", {"Enabled"}))},
                {"ACPI", any},
                {"Backend", any},
                {"PortForward", any}});
    const GoType* channel = strukt(
        "api.Channel", {{"Type", &kString},
                        {"Source", ptr(strings("api.ChannelSource", {"Mode", "Path"}))},
                        {"Target", ptr(strukt("api.ChannelTarget", {{"Name", &kString},
                                                                    {"Type", &kString},
                                                                    {"Address", &kString},
                                                                    {"Port", &kUint},
                                                                    {"State", &kString}}))}});
    const GoType* host_device = strukt("api.HostDevice", {{"XMLName", xml_name},
                                                          {"Source", strukt("api.HostDeviceSource",
                                                                            {{"Address", ptr(address)}})},
                                                          {"Type", &kString},
                                                          {"BootOrder", any},
                                                          {"Managed", &kString},
                                                          {"Mode", &kString},
                                                          {"Model", &kString},
                                                          {"Address", ptr(address)},
                                                          {"Alias", ptr(&kAlias)},
                                                          {"Display", &kString},
                                                          {"RamFB", &kString},
                                                          {"Driver", any},
                                                          {"ACPI", any}});
    const GoType* disk =
        strukt("api.Disk", {{"Device", &kString},
                            {"Snapshot", &kString},
                            {"Type", &kString},
                            {"Source", strukt("api.DiskSource", {{"Dev", &kString},
                                                                 {"File", &kString},
                                                                 {"StartupPolicy", &kString},
                                                                 {"Protocol", &kString},
                                                                 {"Name", &kString},
                                                                 {"Host", any},
                                                                 {"Reservations", any},
                                                                 {"Slices", any},
                                                                 {"DataStore", any}})},
                            {"Target", strings("api.DiskTarget", {"Bus", "Device", "Tray"})},
                            {"Serial", &kString},
                            {"Driver", ptr(strukt("api.DiskDriver", {{"Cache", &kString},
                                                                     {"ErrorPolicy", &kString},
                                                                     {"IO", &kString},
                                                                     {"Name", &kString},
                                                                     {"Type", &kString},
                                                                     {"IOThread", ptr(&kUint)},
                                                                     {"IOThreads", any},
                                                                     {"Queues", ptr(&kUint)},
                                                                     {"Discard", &kString},
                                                                     {"IOMMU", &kString}}))},
                            {"ReadOnly", ptr(empty)},
                            {"Auth", any},
                            {"Alias", ptr(&kAlias)},
                            {"BackingStore", any},
                            {"BootOrder", any},
                            {"Address", ptr(address)},
                            {"Model", &kString},
                            {"BlockIO", any},
                            {"FilesystemOverhead", any},
                            {"Capacity", ptr(&kInt)},
                            {"Shareable", any}});
    const GoType* filesystem =
        strukt("api.FilesystemDevice",
               {{"Type", &kString},
                {"AccessMode", &kString},
                {"Source", ptr(strings("api.FilesystemSource", {"Dir", "Socket"}))},
                {"Target", ptr(strings("api.FilesystemTarget", {"Dir"}))},
                {"Driver", ptr(strings("api.FilesystemDriver", {"Type", "Queue"}))},
                {"Binary", any}});
    const GoType* devices = strukt("api.Devices", {{"Emulator", &kString},
                                                   {"Interfaces", slice(iface)},
                                                   {"Channels", slice(channel)},
                                                   {"HostDevices", slice(host_device)},
                                                   {"PanicDevices", any},
                                                   {"Controllers", any},
                                                   {"Video", any},
                                                   {"Graphics", any},
                                                   {"Ballooning", any},
                                                   {"Disks", slice(disk)},
                                                   {"Inputs", any},
                                                   {"Serials", any},
                                                   {"Consoles", any},
                                                   {"Watchdogs", any},
                                                   {"Rng", any},
                                                   {"Filesystems", slice(filesystem)},
                                                   {"Redirs", any},
                                                   {"SoundCards", any},
                                                   {"TPMs", any},
                                                   {"VSOCK", any},
                                                   {"Memory", any},
                                                   {"IOMMU", any}});
    const GoType* grace =
        strukt("api.GracePeriodMetadata", {{"DeletionGracePeriodSeconds", &kInt},
                                           {"DeletionTimestamp", ptr(&kTime)},
                                           {"MarkedForGracefulShutdown", ptr(&kBool)}});
    const GoType* access_credential = strukt(
        "api.AccessCredentialMetadata", {{"Succeeded", &kBool}, {"Message", &kString}});
    const GoType* metadata = strukt(
        "api.Metadata", {{"KubeVirt", strukt("api.KubeVirtMetadata", {{"UID", &kString},
                                                                      {"GracePeriod", ptr(grace)},
                                                                      {"Migration", any},
                                                                      {"Backup", any},
                                                                      {"AccessCredential", ptr(access_credential)},
                                                                      {"MemoryDump", any}})}});
    const GoType* features = strukt("api.Features", {{"ACPI", ptr(empty)},
                                                     {"APIC", ptr(empty)},
                                                     {"Hyperv", any},
                                                     {"SMM", ptr(empty)},
                                                     {"KVM", any},
                                                     {"PVSpinlock", any},
                                                     {"PMU", any},
                                                     {"VMPort", any}});
    const GoType* spec =
        strukt("api.DomainSpec",
               {{"XMLName", xml_name},
                {"Type", &kString},
                {"XmlNS", &kString},
                {"Name", &kString},
                {"UUID", &kString},
                {"Memory", memory},
                {"CurrentMemory", ptr(memory)},
                {"MaxMemory", any},
                {"MemoryBacking", any},
                {"OS", os},
                {"SysInfo", any},
                {"Devices", devices},
                {"Clock", any},
                {"Resource", any},
                {"QEMUCmd", any},
                {"Metadata", metadata},
                {"Features", ptr(features)},
                {"CPU", any},
                {"VCPU", ptr(strukt("api.VCPU", {{"Placement", &kString}, {"CPUs", &kUint}}))},
                {"VCPUs", any},
                {"CPUTune", any},
                {"NUMATune", any},
                {"IOThreads", any},
                {"LaunchSecurity", any},
                {"OnReboot", &kString},
                {"IOMMUFD", any}});
    const GoType* status = strukt(
        "api.DomainStatus",
        {{"Status", &kString},
         {"Reason", &kString},
         {"Interfaces", slice(strukt("api.InterfaceStatus", {{"Mac", &kString},
                                                             {"Ip", &kString},
                                                             {"IPs", slice(&kString)},
                                                             {"InterfaceName", &kString}}))},
         {"OSInfo", strings("api.GuestOSInfo", {"Name", "KernelRelease", "Version", "PrettyName",
                                                "VersionId", "KernelVersion", "Machine", "Id"})},
         {"FSFreezeStatus", strings("api.FSFreeze", {"Status"})},
         {"GuestPanicInfo", ptr(strukt("api.GuestPanicInfo", {{"Type", &kString},
                                                              {"Arg1", &kUint},
                                                              {"Arg2", &kUint},
                                                              {"Arg3", &kUint},
                                                              {"Arg4", &kUint},
                                                              {"Arg5", &kUint}}))},
         {"PanicCount", &kInt}});
    // metav1.TypeMeta is embedded: its keys sit at the top level.
    return strukt("api.Domain", {{"kind", &kString},
                                 {"apiVersion", &kString},
                                 {"ObjectMeta", object_meta},
                                 {"Spec", spec},
                                 {"Status", status}});
  }();
  return domain;
}

// ---- decoding -------------------------------------------------------------------------------
struct Decoder {
  std::string error;  // the first type error (Go keeps decoding and returns the first)
  std::vector<std::string> unmodelled;

  void type_error(const std::string& path, const Json& got, const GoType& want) {
    if (!error.empty()) return;
    std::string what = got.is_string()    ? "string"
                       : got.is_boolean() ? "bool"
                       : got.is_number()  ? "number " + got.dump()
                       : got.is_array()   ? "array"
                       : got.is_object()  ? "object"
                                          : "null";
    // encoding/json's UnmarshalTypeError text.
    error = "json: cannot unmarshal " + what + " into Go struct field " + path + " of type " +
            want.name;
  }

  Json zero(const GoType& t) {
    switch (t.kind) {
      case Kind::String:
        return "";
      case Kind::Int:
      case Kind::Uint:
        return 0;
      case Kind::Bool:
        return false;
      case Kind::Struct: {
        Json o = Json::object();
        for (const auto& [name, ft] : t.fields) o[name] = zero(*ft);
        return o;
      }
      case Kind::Time:
        return nullptr;  // time.Time{} (IsZero)
      case Kind::Alias:
        return {{"Name", ""}, {"UserDefined", false}};
      default:
        return nullptr;  // nil pointer, slice, map; any
    }
  }

  static bool equal_fold(const std::string& a, const std::string& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) ==
                    std::tolower(static_cast<unsigned char>(y));
           });
  }

  static bool rfc3339(const std::string& s) {
    std::tm tm{};
    const char* end = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
    if (!end) return false;
    std::string rest(end);
    if (!rest.empty() && rest[0] == '.') {  // fractional seconds
      std::size_t i = 1;
      while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i]))) ++i;
      if (i == 1) return false;
      rest = rest.substr(i);
    }
    if (rest == "Z") return true;
    return rest.size() == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':';
  }

  // Decode `in` into a value of type `t` that holds `current` (Go decodes into the existing
  // value: a null leaves it as it is).
  Json decode(const Json& in, const GoType& t, const std::string& path, Json current) {
    if (t.kind == Kind::Any) {
      if (!in.is_null()) unmodelled.push_back(path);
      return in;
    }
    if (in.is_null()) {
      // Pointers, slices and maps become nil; everything else is left unchanged (a Time's own
      // UnmarshalJSON sets it to zero).
      if (t.kind == Kind::Ptr || t.kind == Kind::Slice || t.kind == Kind::Map ||
          t.kind == Kind::Time)
        return nullptr;
      return current;
    }
    switch (t.kind) {
      case Kind::String:
        if (!in.is_string()) return type_error(path, in, t), current;
        return in;
      case Kind::Int:
        if (!in.is_number_integer()) return type_error(path, in, t), current;
        return in;
      case Kind::Uint:
        if (!in.is_number_unsigned()) return type_error(path, in, t), current;
        return in;
      case Kind::Bool:
        if (!in.is_boolean()) return type_error(path, in, t), current;
        return in;
      case Kind::Time:
        if (!in.is_string()) return type_error(path, in, t), current;
        if (!rfc3339(in.get<std::string>())) {
          if (error.empty())
            error = "parsing time \"" + in.get<std::string>() +
                    "\" as \"2006-01-02T15:04:05Z07:00\" (" + path + ")";
          return current;
        }
        return in;
      case Kind::Alias: {
        // json.Unmarshal into struct{Name string; UserDefined bool}.
        if (!in.is_object()) return type_error(path, in, t), current;
        static const GoType alias_fields{Kind::Struct,
                                         "api.userAliasMarshal",
                                         nullptr,
                                         {{"Name", &kString}, {"UserDefined", &kBool}}};
        return decode(in, alias_fields, path, zero(alias_fields));
      }
      case Kind::Ptr: {
        Json inner = current.is_null() ? zero(*t.elem) : current;
        return decode(in, *t.elem, path, inner);
      }
      case Kind::Slice: {
        if (!in.is_array()) return type_error(path, in, t), current;
        Json out = Json::array();
        for (std::size_t i = 0; i < in.size(); ++i)
          out.push_back(
              decode(in[i], *t.elem, path + "[" + std::to_string(i) + "]", zero(*t.elem)));
        return out;
      }
      case Kind::Map: {
        if (!in.is_object()) return type_error(path, in, t), current;
        Json out = current.is_object() ? current : Json::object();
        for (const auto& [k, v] : in.items())
          out[k] = decode(v, *t.elem, path + "." + k, zero(*t.elem));
        return out;
      }
      case Kind::Struct: {
        if (!in.is_object()) return type_error(path, in, t), current;
        Json out = current.is_object() ? current : zero(t);
        for (const auto& [key, value] : in.items()) {
          // An exact match first, then Go's case-insensitive one; no field: ignored.
          const std::pair<std::string, const GoType*>* field = nullptr;
          for (const auto& f : t.fields)
            if (f.first == key) field = &f;
          if (!field)
            for (const auto& f : t.fields)
              if (equal_fold(f.first, key)) {
                field = &f;
                break;
              }
          if (!field) continue;
          const std::string p = path.empty() ? field->first : path + "." + field->first;
          out[field->first] = decode(value, *field->second, p, out[field->first]);
        }
        return out;
      }
      default:
        return in;
    }
  }
};

// ---- reading ---------------------------------------------------------------------------------
const Json& at(const Json& j, std::initializer_list<const char*> path) {
  static const Json null;
  const Json* p = &j;
  for (const char* k : path) {
    if (!p->is_object() || !p->contains(k)) return null;
    p = &(*p)[k];
  }
  return *p;
}
std::string str(const Json& j, std::initializer_list<const char*> path) {
  const Json& v = at(j, path);
  return v.is_string() ? v.get<std::string>() : std::string();
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

GoDecoded go_decode_domain(const std::string& text) {
  GoDecoded out;
  Json in = Json::parse(text, nullptr, false);
  Decoder d;
  if (in.is_discarded()) {
    out.error = "invalid JSON (json.Unmarshal: syntax error)";
    out.value = d.zero(*domain_type());
    return out;
  }
  out.value = d.decode(in, *domain_type(), "", d.zero(*domain_type()));
  if (!in.is_null() && !in.is_object() && d.error.empty())
    d.error = "json: cannot unmarshal non-object into Go value of type api.Domain";
  out.error = d.error;
  out.unmodelled = d.unmodelled;
  return out;
}

HandlerVmi HandlerVmi::from_vmi_json(const Json& vmi) {
  HandlerVmi h;
  h.name = str(vmi, {"metadata", "name"});
  h.namespace_ = str(vmi, {"metadata", "namespace"});
  h.uid = str(vmi, {"metadata", "uid"});
  for (const auto& i : at(vmi, {"spec", "domain", "devices", "interfaces"})) {
    if (!i.is_object()) continue;
    const std::string name = i.value("name", "");
    h.interfaces.push_back(name);
    if (i.contains("macAddress") && i["macAddress"].is_string())
      h.guest_macs[name] = lower(i["macAddress"].get<std::string>());
  }
  for (const auto& v : at(vmi, {"spec", "volumes"}))
    if (v.is_object()) h.volumes.push_back(v.value("name", ""));
  for (const auto& s : at(vmi, {"status", "volumeStatus"})) {
    if (!s.is_object()) continue;
    h.volume_status.push_back({s.value("name", ""),
                               s.contains("hotplugVolume") && !s["hotplugVolume"].is_null(),
                               s.value("phase", "")});
  }
  const Json& tgps = at(vmi, {"spec", "terminationGracePeriodSeconds"});
  if (tgps.is_number_integer()) h.termination_grace_period_seconds = tgps.get<std::int64_t>();
  const Json& acpi = at(vmi, {"spec", "domain", "features", "acpi", "enabled"});
  if (acpi.is_boolean()) h.acpi = acpi.get<bool>();
  return h;
}

const DerivedStatus::Interface* DerivedStatus::interface(const std::string& name) const {
  for (const auto& i : interfaces)
    if (i.name == name) return &i;
  return nullptr;
}
const DerivedStatus::Volume* DerivedStatus::volume(const std::string& name) const {
  for (const auto& v : volumes)
    if (v.name == name) return &v;
  return nullptr;
}

std::optional<std::string> libvirt_quantity(std::uint64_t value, const std::string& unit) {
  std::uint64_t bytes = 0;
  bool binary = true;
  if (unit == "b" || unit == "bytes")
    bytes = value;
  else if (unit == "KB")
    bytes = value * 1000, binary = false;
  else if (unit == "MB")
    bytes = value * 1000 * 1000, binary = false;
  else if (unit == "GB")
    bytes = value * 1000 * 1000 * 1000, binary = false;
  else if (unit == "TB")
    bytes = value * 1000ull * 1000 * 1000 * 1000, binary = false;
  else if (unit == "k" || unit == "KiB")
    bytes = value * 1024;
  else if (unit == "M" || unit == "MiB")
    bytes = value * 1024 * 1024;
  else if (unit == "G" || unit == "GiB")
    bytes = value * 1024 * 1024 * 1024;
  else if (unit == "T" || unit == "TiB")
    bytes = value * 1024ull * 1024 * 1024 * 1024;
  else
    return std::nullopt;
  // resource.Quantity's canonical form: the largest suffix that divides it exactly.
  static const char* bin[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  static const char* dec[] = {"", "k", "M", "G", "T", "P", "E"};
  const std::uint64_t base = binary ? 1024 : 1000;
  int s = 0;
  while (bytes != 0 && bytes % base == 0 && s < 6) bytes /= base, ++s;
  return std::to_string(bytes) + (binary ? bin[s] : dec[s]);
}

HandlerRead read_as_virt_handler(const Json& d, const HandlerVmi& vmi) {
  HandlerRead r;
  auto fail = [&r](const std::string& row, const std::string& what, const std::string& where) {
    r.failures.push_back("contract §1 " + row + ": " + what + " (KubeVirt " + where + ")");
  };
  DerivedStatus& s = r.status;
  s.status = str(d, {"Status", "Status"});
  s.reason = str(d, {"Status", "Reason"});
  // §0: the launcher never sends the LifeCycle "Unknown" itself (virt-handler makes it up when the
  // socket is unreachable, and then skips the VMI: vm.go:1340-1343).
  if (s.status == "Unknown")
    fail("Status.Status", "the launcher sent LifeCycle \"Unknown\": sync() skips the VMI",
         "pkg/virt-handler/vm.go:1340-1343");
  // The informer key (vm.go:2304-2309): the domain meets its VMI only by namespace/name.
  const std::string name = str(d, {"ObjectMeta", "name"}), ns = str(d, {"ObjectMeta", "namespace"});
  if (name != vmi.name || ns != vmi.namespace_) {
    fail("ObjectMeta namespace/name",
         "misreport: the domain is " + ns + "/" + name + ", the VMI " + vmi.namespace_ + "/" +
             vmi.name + ": it never meets its VMI, which stays Scheduled",
         "pkg/virt-handler/vm.go:2304-2309 (controller.KeyFunc)");
    s.not_synced_why = "another key";
    return r;
  }
  // deletionTimestamp: the domain counts as absent (controller.go:251-254).
  if (!at(d, {"ObjectMeta", "deletionTimestamp"}).is_null()) {
    s.not_synced_why = "absent (ObjectMeta.deletionTimestamp)";
    return r;
  }
  // Spec.Metadata.KubeVirt.UID (vm.go:362-385): another UID is a stale domain: cleaned up, sync
  // never runs. "" is what the real launcher sends before its metadata cache is filled: on the
  // defined domain (Shutoff) and while QEMU starts (Paused/StartingUp) only.
  const std::string uid = str(d, {"Spec", "Metadata", "KubeVirt", "UID"});
  const bool alive =
      s.status != "Shutoff" && s.status != "Crashed" && !s.status.empty();  // vm.go:1356
  if (uid != vmi.uid) {
    s.not_synced_why = "stale UID '" + uid + "'";
    const bool first_events =
        s.status == "Shutoff" || (s.status == "Paused" && s.reason == "StartingUp");
    if (!uid.empty() || !first_events)
      fail(
          "Spec.Metadata.KubeVirt.UID",
          "misreport: UID '" + uid + "' is not the VMI's '" + vmi.uid + "' on a " + s.status +
              " domain: treated as a stale domain of an older VMI, sync never runs, the VMI stalls",
          "pkg/virt-handler/vm.go:362-385");
    return r;
  }
  s.synced = true;
  const bool has_spec = s.status != "NoState";
  // GracePeriod (vm.go:2212-2216, 1582-1585): nil or 0 on a live domain → Kill at once instead of
  // a graceful shutdown.
  const Json& grace = at(d, {"Spec", "Metadata", "KubeVirt", "GracePeriod"});
  if (alive && has_spec) {
    const std::int64_t want = vmi.termination_grace_period_seconds.value_or(30);
    if (grace.is_null())
      fail("Spec.Metadata.KubeVirt.GracePeriod",
           "misreport: nil on a " + s.status + " domain: no graceful shutdown, Kill at once",
           "pkg/virt-handler/vm.go:2212-2216, 1629-1641");
    else if (vmi.spec_known && grace["DeletionGracePeriodSeconds"].get<std::int64_t>() == 0 && want != 0)
      fail("…GracePeriod.DeletionGracePeriodSeconds",
           "misreport: 0: no graceful shutdown, Kill at once",
           "pkg/virt-handler/vm.go:2215, 1629-1641");
    else if (vmi.spec_known && grace["DeletionGracePeriodSeconds"].get<std::int64_t>() != want)
      fail("…GracePeriod.DeletionGracePeriodSeconds",
           "misreport: " + grace["DeletionGracePeriodSeconds"].dump() +
               ", the VMI's terminationGracePeriodSeconds is " + std::to_string(want) +
               " (converter.go:364-370)",
           "pkg/virt-handler/vm.go:1582-1585");
  }
  // Features.ACPI (vm.go:2218-2223): nil → a Shutoff/Destroyed domain is Succeeded, not Failed.
  if (has_spec && vmi.spec_known && vmi.acpi && at(d, {"Spec", "Features", "ACPI"}).is_null())
    fail("Spec.Features.ACPI",
         "misreport: nil while the VMI has ACPI: a destroyed domain would read Succeeded, not "
         "Failed",
         "pkg/virt-handler/vm.go:2218-2223 isACPIEnabled");

  // updateVMIStatusFromDomain (vm.go:955) → NetStat.UpdateStatus (netstat.go:92-131).
  const Json& ifaces = at(d, {"Spec", "Devices", "Interfaces"});
  std::size_t n = 0;
  for (const auto& i : ifaces.is_array() ? ifaces : Json::array()) {
    const std::string where = "Spec.Devices.Interfaces[" + std::to_string(n++) + "]";
    if (i["Alias"].is_null()) {
      fail("Spec.Devices.Interfaces[].Alias",
           "CRASH: " + where +
               ".Alias is nil (Alias.GetName() on a nil pointer): virt-handler exits",
           "pkg/network/setup/netstat.go:282 ifacesStatusFromDomainInterfaces");
      return r;  // the worker panicked: nothing after this runs
    }
    if (i["MAC"].is_null()) {
      fail("Spec.Devices.Interfaces[].MAC.MAC",
           "CRASH: " + where + ".MAC is nil: virt-handler exits",
           "pkg/network/setup/netstat.go:283 ifacesStatusFromDomainInterfaces");
      return r;
    }
    DerivedStatus::Interface si;
    si.name = i["Alias"]["Name"].get<std::string>();
    si.mac = i["MAC"]["MAC"].get<std::string>();
    if (!i["Driver"].is_null() && !i["Driver"]["Queues"].is_null())
      si.queue_count = i["Driver"]["Queues"].get<int>();
    if (!i["LinkState"].is_null()) si.link_state = i["LinkState"]["State"].get<std::string>();
    if (vmi.spec_known && !contains(vmi.interfaces, si.name))
      fail("Spec.Devices.Interfaces[].Alias",
           "misreport: " + where + " alias '" + si.name +
               "' names no VMI interface: no IP in status.interfaces, silently",
           "pkg/network/setup/netstat.go:215-231, 282");
    if (si.mac != lower(si.mac))
      fail("Spec.Devices.Interfaces[].MAC.MAC",
           "misreport: " + where + " MAC '" + si.mac +
               "' is not lowercase: guest-agent entries never match it",
           "pkg/network/vmispec/interface.go:95");
    if (auto want = vmi.guest_macs.find(si.name);
        want != vmi.guest_macs.end() && lower(si.mac) != want->second)
      fail("Spec.Devices.Interfaces[].MAC.MAC",
           "misreport: " + where + " MAC '" + si.mac + "' is not the guest NIC's '" + want->second +
               "'",
           "pkg/network/setup/netstat.go:283");
    s.interfaces.push_back(std::move(si));
  }
  // SR-IOV host devices (netstat.go:313-323, 415-423): a nil alias is guarded there; the MAC is
  // the VMI's.
  const Json& hostdevs = at(d, {"Spec", "Devices", "HostDevices"});
  for (const auto& hd : hostdevs.is_array() ? hostdevs : Json::array()) {
    if (hd["Alias"].is_null()) continue;
    const std::string alias = hd["Alias"]["Name"].get<std::string>();
    if (alias.rfind("sriov-", 0) != 0) continue;
    DerivedStatus::Interface si;
    si.name = alias.substr(6);
    if (auto mac = vmi.guest_macs.find(si.name); mac != vmi.guest_macs.end()) si.mac = mac->second;
    s.interfaces.push_back(std::move(si));
  }
  // The pod-cache IPs, for the VMI's interfaces that have a status entry (netstat.go:215-231).
  for (const auto& name : vmi.interfaces)
    for (auto& si : s.interfaces)
      if (si.name == name)
        if (auto ips = vmi.pod_ips.find(name); ips != vmi.pod_ips.end() && !ips->second.empty()) {
          si.ips = ips->second;
          si.ip = ips->second.front();
        }
  if (alive && has_spec && vmi.spec_known)
    for (const auto& name : vmi.interfaces)
      if (!s.interface(name))
        fail("Spec.Devices.Interfaces[].Alias",
             "misreport: the VMI's interface '" + name +
                 "' is not in the domain: no status.interfaces entry",
             "pkg/network/setup/netstat.go:105, 279-290");

  // updateVolumeStatusesFromDomain (vm.go:522-560).
  if (!vmi.volume_status.empty()) {
    std::map<std::string, std::string> device_of;
    const Json& disks = at(d, {"Spec", "Devices", "Disks"});
    n = 0;
    for (const auto& k : disks.is_array() ? disks : Json::array()) {
      const std::string where = "Spec.Devices.Disks[" + std::to_string(n++) + "]";
      if (k["Source"]["File"].get<std::string>().empty() &&
          k["Source"]["Dev"].get<std::string>().empty())
        continue;  // empty CD-ROM
      if (k["Alias"].is_null()) {
        fail("Spec.Devices.Disks[].Alias",
             "CRASH: " + where + ".Alias is nil on a disk with a source: virt-handler exits",
             "pkg/virt-handler/vm.go:537 updateVolumeStatusesFromDomain");
        return r;
      }
      const std::string alias = k["Alias"]["Name"].get<std::string>();
      const std::string target = k["Target"]["Device"].get<std::string>();
      device_of[alias] = target;
      if (vmi.spec_known && !vmi.volumes.empty() && !contains(vmi.volumes, alias))
        fail("Spec.Devices.Disks[].Alias",
             "misreport: " + where + " alias '" + alias +
                 "' names no VMI volume: its volumeStatus target stays blank",
             "pkg/virt-handler/vm.go:537");
      for (const auto& v : vmi.volume_status)
        if (v.hotplug && v.name == alias && target.empty())
          fail("Spec.Devices.Disks[].Target.Device",
               "misreport: hotplug volume '" + alias + "' is attached (" + where +
                   " has a source) with an empty Target.Device: it is never Ready",
               "pkg/virt-handler/vm.go:488-520, 537");
    }
    for (const auto& v : vmi.volume_status) {
      DerivedStatus::Volume sv{v.name, device_of.count(v.name) ? device_of[v.name] : "", v.phase};
      if (v.hotplug && !sv.target.empty()) sv.phase = "Ready";  // vm.go:515-519
      s.volumes.push_back(std::move(sv));
    }
  }
  // The guest agent channel (vm.go:665-674).
  for (const auto& c : at(d, {"Spec", "Devices", "Channels"}).is_array()
                           ? at(d, {"Spec", "Devices", "Channels"})
                           : Json::array())
    if (!c["Target"].is_null() && c["Target"]["Name"] == "org.qemu.guest_agent.0" &&
        c["Target"]["State"] == "connected")
      s.agent_connected = true;
  // Machine (vm.go:2353-2360) and the current memory (vm.go:943-953).
  s.machine = str(d, {"Spec", "OS", "Type", "Machine"});
  const Json& cur = at(d, {"Spec", "CurrentMemory"});
  if (!cur.is_null())
    s.guest_current =
        libvirt_quantity(cur["Value"].get<std::uint64_t>(), cur["Unit"].get<std::string>());
  return r;
}

HandlerRead decode_and_read(const std::string& text, const HandlerVmi& vmi) {
  if (text.empty()) {  // GetDomain's "no domain" (cache.go:277-310)
    HandlerRead r;
    r.status.not_synced_why = "no domain";
    return r;
  }
  auto decoded = go_decode_domain(text);
  if (!decoded.error.empty()) {
    HandlerRead r;
    r.failures.push_back(
        "contract §0: the document does not decode into api.Domain: " + decoded.error +
        " (KubeVirt pkg/virt-handler/notify-server/server.go:54-94: the event is dropped)");
    return r;
  }
  return read_as_virt_handler(decoded.value, vmi);
}

}  // namespace chl::test

#include "vmm_api/types.hpp"

#include <array>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

namespace chl::vmm_api {
namespace {

// A field's value as T. An integer field takes only an integer JSON number that fits T:
// nlohmann's get<T> would static_cast a fraction or an out-of-range number (undefined for a
// float; fuzz_http found 1.28e75 in a disk's num_queues).
template <typename T>
T field_value(const Json& v, const char* key) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    bool fits = false;
    if (v.is_number_unsigned()) {
      fits = v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
    } else if (v.is_number_integer()) {
      const auto i = v.get<std::int64_t>();
      fits = i >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
             (i < 0 || static_cast<std::uint64_t>(i) <= static_cast<std::uint64_t>(std::numeric_limits<T>::max()));
    } else if (!v.is_number()) {
      return v.get<T>();  // nlohmann's own type_error for a string, object…
    }
    if (!fits) throw Json::out_of_range::create(406, std::string("field '") + key + "': " + v.dump() + " is not an integer that fits", &v);
  }
  return v.get<T>();
}

// Reads the known keys of one JSON object and collects the rest into `extra`.
// Required keys must be present and non-null; optional keys may be absent or null.
class ObjectReader {
 public:
  ObjectReader(const Json& j, const char* type) : j_(j), rest_(Json::object()) {
    if (!j.is_object()) {
      throw Json::type_error::create(
          302, std::string(type) + " must be an object, but is " + j.type_name(), &j);
    }
    rest_ = j;
  }

  template <typename T>
  void req(const char* key, T& out) {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) {
      throw Json::out_of_range::create(403, std::string("missing field '") + key + "'", &j_);
    }
    out = field_value<T>(*it, key);
    rest_.erase(key);
  }

  template <typename T>
  void opt(const char* key, std::optional<T>& out) {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) {
      out.reset();
    } else {
      out = field_value<T>(*it, key);
    }
    rest_.erase(key);
  }

  void extra(Json& out) { out = std::move(rest_); }

 private:
  const Json& j_;
  Json rest_;
};

// Writes the unknown keys first, then the known ones (which win on a clash).
class ObjectWriter {
 public:
  explicit ObjectWriter(Json& j, const Json& extra) : j_(j) {
    j_ = extra.is_object() ? extra : Json::object();
  }

  template <typename T>
  void req(const char* key, const T& v) {
    j_[key] = v;
  }

  template <typename T>
  void opt(const char* key, const std::optional<T>& v) {
    if (v) {
      j_[key] = *v;
    } else {
      j_.erase(key);  // an empty optional is never written, not even from `extra`
    }
  }

 private:
  Json& j_;
};

// Enum <-> string tables.
constexpr std::array<std::pair<ConsoleMode, std::string_view>, 6> kConsoleModes{{
    {ConsoleMode::Off, "Off"},
    {ConsoleMode::Pty, "Pty"},
    {ConsoleMode::Tty, "Tty"},
    {ConsoleMode::File, "File"},
    {ConsoleMode::Socket, "Socket"},
    {ConsoleMode::Null, "Null"},
}};

constexpr std::array<std::pair<VmState, std::string_view>, 5> kVmStates{{
    {VmState::Created, "Created"},
    {VmState::Running, "Running"},
    {VmState::Shutdown, "Shutdown"},
    {VmState::Paused, "Paused"},
    {VmState::BreakPoint, "BreakPoint"},
}};

}  // namespace

std::string_view to_string(ConsoleMode m) {
  for (const auto& [k, s] : kConsoleModes) {
    if (k == m) {
      return s;
    }
  }
  return "Off";
}

std::optional<ConsoleMode> console_mode_from_string(std::string_view s) {
  for (const auto& [k, name] : kConsoleModes) {
    if (name == s) {
      return k;
    }
  }
  return std::nullopt;
}

std::string_view to_string(VmState st) {
  for (const auto& [k, s] : kVmStates) {
    if (k == st) {
      return s;
    }
  }
  return "Created";
}

std::optional<VmState> vm_state_from_string(std::string_view s) {
  for (const auto& [k, name] : kVmStates) {
    if (name == s) {
      return k;
    }
  }
  return std::nullopt;
}

void to_json(Json& j, ConsoleMode m) { j = std::string(to_string(m)); }
void from_json(const Json& j, ConsoleMode& m) {
  const auto s = j.get<std::string>();
  auto v = console_mode_from_string(s);
  if (!v) {
    throw Json::other_error::create(501, "unknown console mode '" + s + "'", &j);
  }
  m = *v;
}

void to_json(Json& j, VmState st) { j = std::string(to_string(st)); }
void from_json(const Json& j, VmState& st) {
  const auto s = j.get<std::string>();
  auto v = vm_state_from_string(s);
  if (!v) {
    throw Json::other_error::create(501, "unknown VM state '" + s + "'", &j);
  }
  st = *v;
}

// Each type's fields, listed once and used for both directions. F is ObjectReader or
// ObjectWriter; R(key) and O(key) name a required and an optional member.
#define CHL_R(k) f.req(#k, v.k)
#define CHL_O(k) f.opt(#k, v.k)
#define CHL_DEFINE_JSON(T, FIELDS)      \
  template <typename F, typename V>     \
  static void fields_##T(F& f, V& v) {  \
    FIELDS;                             \
  }                                     \
  void to_json(Json& j, const T& v) {   \
    ObjectWriter w(j, v.extra);         \
    fields_##T(w, v);                   \
  }                                     \
  void from_json(const Json& j, T& v) { \
    ObjectReader r(j, #T);              \
    fields_##T(r, v);                   \
    r.extra(v.extra);                   \
  }

CHL_DEFINE_JSON(PayloadConfig, CHL_O(firmware); CHL_O(kernel); CHL_O(cmdline); CHL_O(initramfs);
                CHL_O(igvm); CHL_O(host_data))

CHL_DEFINE_JSON(CpuTopology, CHL_O(threads_per_core); CHL_O(cores_per_die); CHL_O(dies_per_package);
                CHL_O(packages))

CHL_DEFINE_JSON(CpuAffinity, CHL_R(vcpu); CHL_R(host_cpus))

CHL_DEFINE_JSON(CpuFeatures, CHL_O(amx))

CHL_DEFINE_JSON(CpusConfig, CHL_R(boot_vcpus); CHL_R(max_vcpus); CHL_O(topology); CHL_O(kvm_hyperv);
                CHL_O(max_phys_bits); CHL_O(nested); CHL_O(affinity); CHL_O(features);
                CHL_O(core_scheduling))

CHL_DEFINE_JSON(MemoryZoneConfig, CHL_R(id); CHL_R(size); CHL_O(file); CHL_O(mergeable);
                CHL_O(shared); CHL_O(hugepages); CHL_O(hugepage_size); CHL_O(host_numa_node);
                CHL_O(hotplug_size); CHL_O(hotplugged_size); CHL_O(prefault); CHL_O(reserve))

CHL_DEFINE_JSON(MemoryConfig, CHL_R(size); CHL_O(hotplug_size); CHL_O(hotplugged_size);
                CHL_O(mergeable); CHL_O(hotplug_method); CHL_O(shared); CHL_O(hugepages);
                CHL_O(hugepage_size); CHL_O(prefault); CHL_O(reserve); CHL_O(thp); CHL_O(zones))

CHL_DEFINE_JSON(TokenBucket, CHL_R(size); CHL_O(one_time_burst); CHL_R(refill_time))

CHL_DEFINE_JSON(RateLimiterConfig, CHL_O(bandwidth); CHL_O(ops))

CHL_DEFINE_JSON(VirtQueueAffinity, CHL_R(queue_index); CHL_R(host_cpus))

CHL_DEFINE_JSON(DiskConfig, CHL_O(path); CHL_O(readonly); CHL_O(direct); CHL_O(iommu);
                CHL_O(num_queues); CHL_O(queue_size); CHL_O(vhost_user); CHL_O(vhost_socket);
                CHL_O(rate_limiter_config); CHL_O(pci_segment); CHL_O(pci_device_id); CHL_O(id);
                CHL_O(serial); CHL_O(rate_limit_group); CHL_O(queue_affinity); CHL_O(backing_files);
                CHL_O(sparse); CHL_O(image_type); CHL_O(lock_granularity); CHL_O(disable_io_uring);
                CHL_O(disable_aio))

CHL_DEFINE_JSON(NetConfig, CHL_O(tap); CHL_O(ip); CHL_O(mask); CHL_O(mac); CHL_O(host_mac);
                CHL_O(mtu); CHL_O(iommu); CHL_O(num_queues); CHL_O(queue_size); CHL_O(vhost_user);
                CHL_O(vhost_socket); CHL_O(vhost_mode); CHL_O(id); CHL_O(pci_segment);
                CHL_O(pci_device_id); CHL_O(rate_limiter_config); CHL_O(offload_tso);
                CHL_O(offload_ufo); CHL_O(offload_csum))

CHL_DEFINE_JSON(RngConfig, CHL_R(src); CHL_O(id); CHL_O(pci_segment); CHL_O(pci_device_id);
                CHL_O(iommu))

CHL_DEFINE_JSON(BalloonConfig, CHL_R(size); CHL_O(id); CHL_O(pci_segment); CHL_O(pci_device_id);
                CHL_O(iommu); CHL_O(deflate_on_oom); CHL_O(free_page_reporting))

CHL_DEFINE_JSON(FsConfig, CHL_R(tag); CHL_R(socket); CHL_R(num_queues); CHL_R(queue_size);
                CHL_O(pci_segment); CHL_O(pci_device_id); CHL_O(id))

CHL_DEFINE_JSON(PmemConfig, CHL_R(file); CHL_O(size); CHL_O(iommu); CHL_O(discard_writes);
                CHL_O(pci_segment); CHL_O(pci_device_id); CHL_O(id))

CHL_DEFINE_JSON(VsockConfig, CHL_R(cid); CHL_R(socket); CHL_O(iommu); CHL_O(pci_segment);
                CHL_O(pci_device_id); CHL_O(id))

CHL_DEFINE_JSON(DeviceConfig, CHL_O(path); CHL_O(iommu); CHL_O(pci_segment); CHL_O(pci_device_id);
                CHL_O(id); CHL_O(x_nv_gpudirect_clique))

CHL_DEFINE_JSON(NumaDistance, CHL_R(destination); CHL_R(distance))

CHL_DEFINE_JSON(NumaConfig, CHL_R(guest_numa_id); CHL_O(cpus); CHL_O(distances);
                CHL_O(memory_zones); CHL_O(pci_segments); CHL_O(device_id))

CHL_DEFINE_JSON(SerialConfig, CHL_R(mode); CHL_O(file); CHL_O(socket))

CHL_DEFINE_JSON(ConsoleConfig, CHL_R(mode); CHL_O(file); CHL_O(socket); CHL_O(iommu); CHL_O(id);
                CHL_O(pci_segment); CHL_O(pci_device_id))

CHL_DEFINE_JSON(DebugConsoleConfig, CHL_R(mode); CHL_O(file); CHL_O(iobase))

CHL_DEFINE_JSON(PlatformConfig, CHL_O(num_pci_segments); CHL_O(iommu_segments);
                CHL_O(iommu_address_width_bits); CHL_O(system_serial_number); CHL_O(serial_number);
                CHL_O(system_uuid); CHL_O(uuid); CHL_O(oem_strings); CHL_O(system_manufacturer);
                CHL_O(system_product_name); CHL_O(system_version); CHL_O(system_family);
                CHL_O(system_sku_number); CHL_O(chassis_asset_tag); CHL_O(tdx); CHL_O(sev_snp);
                CHL_O(iommufd); CHL_O(vfio_p2p_dma))

CHL_DEFINE_JSON(VmConfig, CHL_R(payload); CHL_O(cpus); CHL_O(memory); CHL_O(disks); CHL_O(net);
                CHL_O(rng); CHL_O(balloon); CHL_O(fs); CHL_O(pmem); CHL_O(serial); CHL_O(console);
                CHL_O(debug_console); CHL_O(devices); CHL_O(vsock); CHL_O(numa); CHL_O(iommu);
                CHL_O(watchdog); CHL_O(pvpanic); CHL_O(platform); CHL_O(landlock_enable))

CHL_DEFINE_JSON(VmInfo, CHL_R(config); CHL_R(state); CHL_O(memory_actual_size); CHL_O(device_tree))

CHL_DEFINE_JSON(VmmPingResponse, CHL_R(version); CHL_O(build_version); CHL_O(pid); CHL_O(features))

CHL_DEFINE_JSON(PciDeviceInfo, CHL_R(id); CHL_R(bdf))

CHL_DEFINE_JSON(VmResize, CHL_O(desired_vcpus); CHL_O(desired_ram); CHL_O(desired_balloon))

CHL_DEFINE_JSON(VmSnapshotConfig, CHL_R(destination_url))

CHL_DEFINE_JSON(VmMemoryZoneUpdateData, CHL_R(id); CHL_R(host_numa_node))

CHL_DEFINE_JSON(RestoreConfig, CHL_R(source_url); CHL_O(prefault); CHL_O(memory_restore_mode);
                CHL_O(resume); CHL_O(zone_updates))

CHL_DEFINE_JSON(VmRemoveDevice, CHL_R(id))

CHL_DEFINE_JSON(ReceiveMigrationData, CHL_R(receiver_url); CHL_O(tls_dir); CHL_O(zone_updates))

CHL_DEFINE_JSON(SendMigrationData, CHL_R(destination_url); CHL_O(local); CHL_O(preserve_source);
                CHL_O(downtime_ms); CHL_O(timeout_s); CHL_O(timeout_strategy); CHL_O(connections);
                CHL_O(tls_dir); CHL_O(memory_mode))

#undef CHL_DEFINE_JSON
#undef CHL_O
#undef CHL_R

common::Result<VmConfig> parse_vm_config(std::string_view text) {
  return from_json_text<VmConfig>(text, "VmConfig");
}
common::Result<VmInfo> parse_vm_info(std::string_view text) {
  return from_json_text<VmInfo>(text, "VmInfo");
}
common::Result<VmmPingResponse> parse_vmm_ping(std::string_view text) {
  return from_json_text<VmmPingResponse>(text, "VmmPingResponse");
}
common::Result<PciDeviceInfo> parse_pci_device_info(std::string_view text) {
  return from_json_text<PciDeviceInfo>(text, "PciDeviceInfo");
}
common::Result<VmCounters> parse_vm_counters(std::string_view text) {
  return from_json_text<VmCounters>(text, "VmCounters");
}

}  // namespace chl::vmm_api

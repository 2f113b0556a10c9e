#pragma once
// Typed bodies of Cloud Hypervisor's REST API (vmm/src/api/openapi/cloud-hypervisor.yaml),
// JSON both ways with nlohmann_json.
//
// Conventions, the same in every struct:
// - Members are named exactly like CH's JSON keys (snake_case).
// - A field the schema lists as required is a plain member; every other field is a
//   std::optional. On output an empty optional is left out (never written as null): CH's
//   serde rejects null for fields that merely have a default (e.g. `"kvm_hyperv": null`),
//   and leaving it out lets CH pick its own default. On input, absent and null both give
//   nullopt.
// - `extra` holds every key we do not model, verbatim (including nulls). It is written back
//   on output, so a config read from vm.info and sent again loses nothing. A known key always
//   wins over the same key in `extra`.
// - Every member has a default initializer, so designated initializers compile without
//   -Wmissing-field-initializers: `CpusConfig{.boot_vcpus = 2, .max_vcpus = 4}`.
// - Integers are unsigned 64-bit where CH uses u64 (sizes, counters: u64 max = "not
//   measured" must parse).
//
// from_json throws nlohmann::json exceptions (as nlohmann requires); library callers use the
// parse_*() functions, which return Result and never throw.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace chl::vmm_api {

using Json = nlohmann::json;

// ---- payload ------------------------------------------------------------------------------

struct PayloadConfig {
  std::optional<std::string> firmware{};
  std::optional<std::string> kernel{};
  std::optional<std::string> cmdline{};
  std::optional<std::string> initramfs{};
  std::optional<std::string> igvm{};
  std::optional<std::string> host_data{};
  Json extra = Json::object();
};

// ---- cpus ---------------------------------------------------------------------------------

struct CpuTopology {
  std::optional<std::uint32_t> threads_per_core{};
  std::optional<std::uint32_t> cores_per_die{};
  std::optional<std::uint32_t> dies_per_package{};
  std::optional<std::uint32_t> packages{};
  Json extra = Json::object();
};

struct CpuAffinity {
  std::uint32_t vcpu = 0;
  std::vector<std::uint32_t> host_cpus{};
  Json extra = Json::object();
};

struct CpuFeatures {
  std::optional<bool> amx{};
  Json extra = Json::object();
};

struct CpusConfig {
  std::uint32_t boot_vcpus = 1;
  std::uint32_t max_vcpus = 1;
  std::optional<CpuTopology> topology{};
  std::optional<bool> kvm_hyperv{};
  std::optional<std::uint32_t> max_phys_bits{};
  std::optional<bool> nested{};
  std::optional<std::vector<CpuAffinity>> affinity{};
  std::optional<CpuFeatures> features{};
  std::optional<std::string> core_scheduling{};  // "Vm" | "Vcpu" | "Off"
  Json extra = Json::object();
};

// ---- memory -------------------------------------------------------------------------------

struct MemoryZoneConfig {
  std::string id{};
  std::uint64_t size = 0;
  std::optional<std::string> file{};
  std::optional<bool> mergeable{};
  std::optional<bool> shared{};
  std::optional<bool> hugepages{};
  std::optional<std::uint64_t> hugepage_size{};
  std::optional<std::int32_t> host_numa_node{};
  std::optional<std::uint64_t> hotplug_size{};
  std::optional<std::uint64_t> hotplugged_size{};
  std::optional<bool> prefault{};
  std::optional<bool> reserve{};
  Json extra = Json::object();
};

struct MemoryConfig {
  std::uint64_t size = 0;
  std::optional<std::uint64_t> hotplug_size{};
  std::optional<std::uint64_t> hotplugged_size{};
  std::optional<bool> mergeable{};
  std::optional<std::string> hotplug_method{};  // "Acpi" | "VirtioMem"
  std::optional<bool> shared{};
  std::optional<bool> hugepages{};
  std::optional<std::uint64_t> hugepage_size{};
  std::optional<bool> prefault{};
  std::optional<bool> reserve{};
  std::optional<bool> thp{};
  std::optional<std::vector<MemoryZoneConfig>> zones{};
  Json extra = Json::object();
};

// ---- rate limiting (shared by disks and net) ----------------------------------------------

struct TokenBucket {
  std::uint64_t size = 0;
  std::optional<std::uint64_t> one_time_burst{};
  std::uint64_t refill_time = 0;  // milliseconds
  Json extra = Json::object();
};

struct RateLimiterConfig {
  std::optional<TokenBucket> bandwidth{};
  std::optional<TokenBucket> ops{};
  Json extra = Json::object();
};

struct VirtQueueAffinity {
  std::uint32_t queue_index = 0;
  std::vector<std::uint32_t> host_cpus{};
  Json extra = Json::object();
};

// ---- devices ------------------------------------------------------------------------------

struct DiskConfig {
  std::optional<std::string> path{};
  std::optional<bool> readonly{};
  std::optional<bool> direct{};
  std::optional<bool> iommu{};
  std::optional<std::uint32_t> num_queues{};
  std::optional<std::uint32_t> queue_size{};
  std::optional<bool> vhost_user{};
  std::optional<std::string> vhost_socket{};
  std::optional<RateLimiterConfig> rate_limiter_config{};
  std::optional<std::uint16_t> pci_segment{};
  std::optional<std::uint8_t> pci_device_id{};
  std::optional<std::string> id{};
  std::optional<std::string> serial{};
  std::optional<std::string> rate_limit_group{};
  std::optional<std::vector<VirtQueueAffinity>> queue_affinity{};
  std::optional<bool> backing_files{};
  std::optional<bool> sparse{};
  std::optional<std::string> image_type{};        // "Raw" | "Qcow2" | "Vhdx" | ...
  std::optional<std::string> lock_granularity{};  // "ByteRange" | "Full"
  std::optional<bool> disable_io_uring{};         // in CH's VmConfig, not in its OpenAPI text
  std::optional<bool> disable_aio{};              // idem
  Json extra = Json::object();
};

// Tap fds are not part of the body: Client::vm_add_net passes them with SCM_RIGHTS (CH
// ignores fd numbers found in a body). A `fds` key read from vm.info stays in `extra`.
struct NetConfig {
  std::optional<std::string> tap{};
  std::optional<std::string> ip{};
  std::optional<std::string> mask{};
  std::optional<std::string> mac{};
  std::optional<std::string> host_mac{};
  std::optional<std::uint16_t> mtu{};
  std::optional<bool> iommu{};
  std::optional<std::uint32_t> num_queues{};
  std::optional<std::uint32_t> queue_size{};
  std::optional<bool> vhost_user{};
  std::optional<std::string> vhost_socket{};
  std::optional<std::string> vhost_mode{};  // "Client" | "Server"
  std::optional<std::string> id{};
  std::optional<std::uint16_t> pci_segment{};
  std::optional<std::uint8_t> pci_device_id{};
  std::optional<RateLimiterConfig> rate_limiter_config{};
  std::optional<bool> offload_tso{};
  std::optional<bool> offload_ufo{};
  std::optional<bool> offload_csum{};
  Json extra = Json::object();
};

struct RngConfig {
  std::string src = "/dev/urandom";
  std::optional<std::string> id{};
  std::optional<std::uint16_t> pci_segment{};
  std::optional<std::uint8_t> pci_device_id{};
  std::optional<bool> iommu{};
  Json extra = Json::object();
};

struct BalloonConfig {
  std::uint64_t size = 0;
  std::optional<std::string> id{};
  std::optional<std::uint16_t> pci_segment{};
  std::optional<std::uint8_t> pci_device_id{};
  std::optional<bool> iommu{};
  std::optional<bool> deflate_on_oom{};
  std::optional<bool> free_page_reporting{};
  Json extra = Json::object();
};

struct FsConfig {
  std::string tag{};
  std::string socket{};
  std::uint32_t num_queues = 1;
  std::uint32_t queue_size = 1024;
  std::optional<std::uint16_t> pci_segment{};
  std::optional<std::uint8_t> pci_device_id{};
  std::optional<std::string> id{};
  Json extra = Json::object();
};

struct PmemConfig {
  std::string file{};
  std::optional<std::uint64_t> size{};
  std::optional<bool> iommu{};
  std::optional<bool> discard_writes{};
  std::optional<std::uint16_t> pci_segment{};
  std::optional<std::uint8_t> pci_device_id{};
  std::optional<std::string> id{};
  Json extra = Json::object();
};

struct VsockConfig {
  std::uint64_t cid = 3;
  std::string socket{};
  std::optional<bool> iommu{};
  std::optional<std::uint16_t> pci_segment{};
  std::optional<std::uint8_t> pci_device_id{};
  std::optional<std::string> id{};
  Json extra = Json::object();
};

// A VFIO device (vm.add-device and VmConfig.devices).
struct DeviceConfig {
  std::optional<std::string> path{};
  std::optional<bool> iommu{};
  std::optional<std::uint16_t> pci_segment{};
  std::optional<std::uint8_t> pci_device_id{};
  std::optional<std::string> id{};
  std::optional<std::int8_t> x_nv_gpudirect_clique{};
  Json extra = Json::object();
};

struct NumaDistance {
  std::uint32_t destination = 0;
  std::uint32_t distance = 0;
  Json extra = Json::object();
};

struct NumaConfig {
  std::uint32_t guest_numa_id = 0;
  std::optional<std::vector<std::uint32_t>> cpus{};
  std::optional<std::vector<NumaDistance>> distances{};
  std::optional<std::vector<std::string>> memory_zones{};
  std::optional<std::vector<std::uint32_t>> pci_segments{};
  std::optional<std::string> device_id{};
  Json extra = Json::object();
};

// ---- consoles -----------------------------------------------------------------------------

enum class ConsoleMode { Off, Pty, Tty, File, Socket, Null };
std::string_view to_string(ConsoleMode m);
std::optional<ConsoleMode> console_mode_from_string(std::string_view s);

struct SerialConfig {
  ConsoleMode mode = ConsoleMode::Off;
  std::optional<std::string> file{};  // with Pty: the PTY path CH allocated (vm.info)
  std::optional<std::string> socket{};
  Json extra = Json::object();
};

struct ConsoleConfig {
  ConsoleMode mode = ConsoleMode::Off;
  std::optional<std::string> file{};
  std::optional<std::string> socket{};
  std::optional<bool> iommu{};
  std::optional<std::string> id{};
  std::optional<std::uint16_t> pci_segment{};
  std::optional<std::uint8_t> pci_device_id{};
  Json extra = Json::object();
};

struct DebugConsoleConfig {
  ConsoleMode mode = ConsoleMode::Off;
  std::optional<std::string> file{};
  std::optional<std::uint16_t> iobase{};
  Json extra = Json::object();
};

// ---- platform -----------------------------------------------------------------------------

struct PlatformConfig {
  std::optional<std::uint16_t> num_pci_segments{};
  std::optional<std::vector<std::uint16_t>> iommu_segments{};
  std::optional<std::uint8_t> iommu_address_width_bits{};
  std::optional<std::string> system_serial_number{};
  std::optional<std::string> serial_number{};  // deprecated by CH
  std::optional<std::string> system_uuid{};
  std::optional<std::string> uuid{};  // deprecated by CH
  std::optional<std::vector<std::string>> oem_strings{};
  std::optional<std::string> system_manufacturer{};
  std::optional<std::string> system_product_name{};
  std::optional<std::string> system_version{};
  std::optional<std::string> system_family{};
  std::optional<std::string> system_sku_number{};
  std::optional<std::string> chassis_asset_tag{};
  std::optional<bool> tdx{};
  std::optional<bool> sev_snp{};
  std::optional<bool> iommufd{};
  std::optional<bool> vfio_p2p_dma{};
  Json extra = Json::object();
};

// ---- the VM -------------------------------------------------------------------------------

// Kept as raw JSON (into `extra`): rate_limit_groups, generic_vhost_user, user_devices, vdpa,
// rtc, pci_segments, tpm, landlock_rules.
struct VmConfig {
  PayloadConfig payload{};
  std::optional<CpusConfig> cpus{};
  std::optional<MemoryConfig> memory{};
  std::optional<std::vector<DiskConfig>> disks{};
  std::optional<std::vector<NetConfig>> net{};
  std::optional<RngConfig> rng{};
  std::optional<BalloonConfig> balloon{};
  std::optional<std::vector<FsConfig>> fs{};
  std::optional<std::vector<PmemConfig>> pmem{};
  std::optional<SerialConfig> serial{};
  std::optional<ConsoleConfig> console{};
  std::optional<DebugConsoleConfig> debug_console{};
  std::optional<std::vector<DeviceConfig>> devices{};
  std::optional<VsockConfig> vsock{};
  std::optional<std::vector<NumaConfig>> numa{};
  std::optional<bool> iommu{};
  std::optional<bool> watchdog{};
  std::optional<bool> pvpanic{};
  std::optional<PlatformConfig> platform{};
  std::optional<bool> landlock_enable{};
  Json extra = Json::object();
};

enum class VmState { Created, Running, Shutdown, Paused, BreakPoint };
std::string_view to_string(VmState s);
std::optional<VmState> vm_state_from_string(std::string_view s);

struct VmInfo {
  VmConfig config{};
  VmState state = VmState::Created;
  std::optional<std::uint64_t> memory_actual_size{};
  std::optional<Json> device_tree{};  // id -> DeviceNode, kept raw
  Json extra = Json::object();
};

struct VmmPingResponse {
  std::string version{};
  std::optional<std::string> build_version{};
  std::optional<std::int64_t> pid{};
  std::optional<std::vector<std::string>> features{};
  Json extra = Json::object();
};

// The answer of a hot-add (vm.add-disk, vm.add-net, vm.add-fs, vm.add-device).
struct PciDeviceInfo {
  std::string id{};
  std::string bdf{};
  Json extra = Json::object();
};

// vm.counters: device id -> counter name -> value. Unmeasured latencies are u64 max.
using VmCounters = std::map<std::string, std::map<std::string, std::uint64_t>>;

// ---- request bodies -----------------------------------------------------------------------

struct VmResize {
  std::optional<std::uint32_t> desired_vcpus{};
  std::optional<std::uint64_t> desired_ram{};
  std::optional<std::uint64_t> desired_balloon{};
  Json extra = Json::object();
};

struct VmSnapshotConfig {
  std::string destination_url{};  // "file:///path/to/dir"
  Json extra = Json::object();
};

struct VmMemoryZoneUpdateData {
  std::string id{};
  std::uint32_t host_numa_node = 0;
  Json extra = Json::object();
};

struct RestoreConfig {
  std::string source_url{};  // "file:///path/to/dir"
  std::optional<bool> prefault{};
  std::optional<std::string> memory_restore_mode{};  // "Copy" | "OnDemand" | "CopyOnWrite"
  std::optional<bool> resume{};
  std::optional<std::vector<VmMemoryZoneUpdateData>> zone_updates{};
  Json extra = Json::object();
};

struct VmRemoveDevice {
  std::string id{};
  Json extra = Json::object();
};

struct ReceiveMigrationData {
  std::string receiver_url{};  // "unix:/path" or "tcp:host:port"
  std::optional<std::string> tls_dir{};
  std::optional<std::vector<VmMemoryZoneUpdateData>> zone_updates{};
  Json extra = Json::object();
};

struct SendMigrationData {
  std::string destination_url{};
  std::optional<bool> local{};  // deprecated by CH: memory_mode "MemFDs"
  std::optional<bool> preserve_source{};
  std::optional<std::uint64_t> downtime_ms{};
  std::optional<std::uint64_t> timeout_s{};
  std::optional<std::string> timeout_strategy{};  // "Cancel" | "Ignore"
  std::optional<std::uint64_t> connections{};
  std::optional<std::string> tls_dir{};
  std::optional<std::string> memory_mode{};  // "MemFDs" | "Precopy" | "Postcopy"
  Json extra = Json::object();
};

// ---- JSON conversion (ADL, for nlohmann) --------------------------------------------------

#define CHL_VMM_API_JSON(T)          \
  void to_json(Json& j, const T& v); \
  void from_json(const Json& j, T& v);

CHL_VMM_API_JSON(PayloadConfig)
CHL_VMM_API_JSON(CpuTopology)
CHL_VMM_API_JSON(CpuAffinity)
CHL_VMM_API_JSON(CpuFeatures)
CHL_VMM_API_JSON(CpusConfig)
CHL_VMM_API_JSON(MemoryZoneConfig)
CHL_VMM_API_JSON(MemoryConfig)
CHL_VMM_API_JSON(TokenBucket)
CHL_VMM_API_JSON(RateLimiterConfig)
CHL_VMM_API_JSON(VirtQueueAffinity)
CHL_VMM_API_JSON(DiskConfig)
CHL_VMM_API_JSON(NetConfig)
CHL_VMM_API_JSON(RngConfig)
CHL_VMM_API_JSON(BalloonConfig)
CHL_VMM_API_JSON(FsConfig)
CHL_VMM_API_JSON(PmemConfig)
CHL_VMM_API_JSON(VsockConfig)
CHL_VMM_API_JSON(DeviceConfig)
CHL_VMM_API_JSON(NumaDistance)
CHL_VMM_API_JSON(NumaConfig)
CHL_VMM_API_JSON(SerialConfig)
CHL_VMM_API_JSON(ConsoleConfig)
CHL_VMM_API_JSON(DebugConsoleConfig)
CHL_VMM_API_JSON(PlatformConfig)
CHL_VMM_API_JSON(VmConfig)
CHL_VMM_API_JSON(VmInfo)
CHL_VMM_API_JSON(VmmPingResponse)
CHL_VMM_API_JSON(PciDeviceInfo)
CHL_VMM_API_JSON(VmResize)
CHL_VMM_API_JSON(VmSnapshotConfig)
CHL_VMM_API_JSON(VmMemoryZoneUpdateData)
CHL_VMM_API_JSON(RestoreConfig)
CHL_VMM_API_JSON(VmRemoveDevice)
CHL_VMM_API_JSON(ReceiveMigrationData)
CHL_VMM_API_JSON(SendMigrationData)

#undef CHL_VMM_API_JSON

void to_json(Json& j, ConsoleMode m);
void from_json(const Json& j, ConsoleMode& m);
void to_json(Json& j, VmState s);
void from_json(const Json& j, VmState& s);

// ---- non-throwing entry points ------------------------------------------------------------

// Parse JSON text / a JSON value into T. Errors name what was wrong ("vm.info: config.cpus:
// [json.exception.type_error.302] type must be number, but is string").
template <typename T>
common::Result<T> from_json_value(const Json& j, std::string_view what) {
  try {
    return j.get<T>();
  } catch (const std::exception& e) {
    return common::fail(std::errc::invalid_argument, std::string(what) + ": " + e.what());
  }
}

template <typename T>
common::Result<T> from_json_text(std::string_view text, std::string_view what) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return common::fail(std::errc::invalid_argument, std::string(what) + ": not valid JSON");
  }
  return from_json_value<T>(j, what);
}

// Typed entry points (the same as from_json_text<T>).
common::Result<VmConfig> parse_vm_config(std::string_view text);
common::Result<VmInfo> parse_vm_info(std::string_view text);
common::Result<VmmPingResponse> parse_vmm_ping(std::string_view text);
common::Result<PciDeviceInfo> parse_pci_device_info(std::string_view text);
common::Result<VmCounters> parse_vm_counters(std::string_view text);

// Serialize compactly (what goes on the wire).
template <typename T>
std::string to_json_text(const T& v) {
  Json j = v;
  return j.dump();
}

}  // namespace chl::vmm_api

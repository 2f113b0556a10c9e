#pragma once
// The typed model of a kubevirt.io/v1 VirtualMachineInstance: only what ch-launcher reads.
// Fields mirror KubeVirt's API names (staging/src/kubevirt.io/api/core/v1/types.go); optional
// values stay std::optional so that "absent" and "set to the default" can be told apart, as
// KubeVirt's own defaulting does (e.g. efi.secureBoot absent means true).
// Quantities are parsed to bytes/millicores by the parser; the text is kept for messages.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace chl::vmi {

// One problem with a manifest: `path` is the field ("spec.domain.devices.disks[1].cdrom"),
// `message` the reason. Printed "path: message".
struct Violation {
  std::string path;
  std::string message;
};
using Violations = std::vector<Violation>;
std::string to_string(const Violation& v);

struct Quantity {
  std::string text;        // as written
  std::int64_t value = 0;  // rounded up to a whole unit (bytes for memory, cores for cpu)
  std::int64_t milli = 0;  // thousandths (cpu "500m" -> 500)
};

struct ObjectMeta {
  std::string name;
  std::string namespace_;  // "default" when absent
  std::string uid;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
};

struct CpuFeature {
  std::string name;
  std::string policy;  // force, require, optional, disable, forbid ("require" when absent)
};

struct Cpu {
  std::uint32_t cores = 0;    // 0 = not set
  std::uint32_t sockets = 0;  // 0 = not set
  std::uint32_t threads = 0;  // 0 = not set
  std::uint32_t max_sockets = 0;
  std::string model;  // "" = not set (KubeVirt: host-model)
  bool dedicated_cpu_placement = false;
  bool isolate_emulator_thread = false;
  bool numa_guest_mapping_passthrough = false;
  bool realtime = false;
  std::string realtime_mask;  // realtime.mask: the vCPUs made SCHED_FIFO ("" = all), "0-3,^1"
  std::vector<CpuFeature> features;
};

struct Memory {
  std::optional<Quantity> guest;
  std::optional<Quantity> max_guest;
  std::optional<Quantity> hugepages_page_size;  // hugepages.pageSize
};

struct Resources {
  std::optional<Quantity> request_memory;
  std::optional<Quantity> request_cpu;
  std::optional<Quantity> limit_memory;
  std::optional<Quantity> limit_cpu;
};

enum class Bootloader { None, Bios, Efi };

struct KernelBoot {
  bool present = false;
  std::string kernel_args;
  bool has_container = false;
  std::string image;
  std::string kernel_path;
  std::string initrd_path;
};

struct Firmware {
  std::string uuid;
  std::string serial;
  Bootloader bootloader = Bootloader::None;
  std::optional<bool> efi_secure_boot;  // absent = true (KubeVirt's default)
  bool efi_persistent = false;
  KernelBoot kernel_boot;
};

enum class DiskDevice { Disk, Cdrom, Lun, Floppy, None };
const char* to_string(DiskDevice d);

struct Disk {
  std::string name;
  DiskDevice device = DiskDevice::Disk;  // KubeVirt defaults an untyped disk to `disk`
  int device_count = 0;                  // how many of disk/cdrom/lun/floppy were given
  std::string bus;                       // "" = default (virtio for disk)
  bool bus_defaulted = false;            // `bus` filled in by KubeVirt's defaulting (defaults.hpp)
  bool readonly = false;                 // disk.readonly / cdrom.readonly (default true for cdrom)
  std::optional<std::int64_t> boot_order;
  std::string serial;
  std::string cache;  // none, writethrough, writeback
  std::string io;     // native, threads
  bool dedicated_io_thread = false;
  std::string pci_address;
  std::optional<std::int64_t> block_size_logical;   // blockSize: custom.logical, 0 = matchVolume
  std::optional<std::int64_t> block_size_physical;  // blockSize.custom.physical
  bool block_size_discard_granularity = false;      // blockSize.custom.discardGranularity given
  bool shareable = false;
};

enum class VolumeKind {
  ContainerDisk,
  EmptyDisk,
  PersistentVolumeClaim,
  DataVolume,
  Ephemeral,
  HostDisk,
  CloudInitNoCloud,
  CloudInitConfigDrive,
  Secret,
  ConfigMap,
  ServiceAccount,
  DownwardApi,
  Other,  // sysprep, downwardMetrics, memoryDump...: recognised, not served
  None,
};
// The YAML key of a kind ("containerDisk").
const char* to_string(VolumeKind k);

struct CloudInitData {
  std::string user_data;         // decoded from userDataBase64 when given so
  std::string network_data;      // decoded from networkDataBase64 when given so
  std::string user_data_secret;  // secretRef.name: read from the mounted secret
  std::string network_data_secret;
};

struct Volume {
  std::string name;
  VolumeKind kind = VolumeKind::None;
  int kind_count = 0;      // how many sources were given (must be 1)
  std::string other_kind;  // the key when kind == Other
  std::string image;       // containerDisk.image
  std::string image_path;  // containerDisk.path (inside the image)
  std::string claim_name;  // persistentVolumeClaim.claimName, dataVolume.name, ephemeral pvc
  bool read_only = false;  // persistentVolumeClaim.readOnly
  std::optional<Quantity> capacity;  // emptyDisk / hostDisk
  std::string host_path;             // hostDisk.path
  std::string host_disk_type;        // Disk, DiskOrCreate
  std::string ref_name;              // secretName / configMap name / serviceAccountName
  std::string volume_label;
  CloudInitData cloud_init;
};

enum class Binding { Bridge, Masquerade, Sriov, Slirp, Passt, Macvtap, Plugin, None };
const char* to_string(Binding b);

// interfaces[].ports[]: what masquerade forwards inbound (all ports when none are listed).
struct Port {
  std::string name;
  std::string protocol;  // "TCP" or "UDP" as written; "" = TCP
  std::int64_t port = 0;
};

struct Interface {
  std::string name;
  Binding binding = Binding::None;
  int binding_count = 0;
  std::string model;        // "" = virtio
  std::string mac_address;  // "" = generated
  std::optional<std::int64_t> boot_order;
  std::string pci_address;
  std::vector<Port> ports;
};

enum class NetworkKind { Pod, Multus, None };

struct Network {
  std::string name;
  NetworkKind kind = NetworkKind::None;
  std::string multus_network_name;
  bool multus_default = false;
  std::string vm_network_cidr;
};

struct Filesystem {
  std::string name;
  bool virtiofs = false;
};

struct HostDevice {
  std::string name;
  std::string device_name;
  bool gpu = false;  // from devices.gpus
  // gpus[].virtualGPUOptions.display.enabled (true when display is given without it); nullopt
  // when no display is asked for.
  std::optional<bool> vgpu_display;
  // Dynamic Resource Allocation: the device comes from spec.resourceClaims[claimName] (its
  // request requestName) instead of a device plugin's deviceName.
  std::string claim_name;
  std::string request_name;
};

struct Input {
  std::string name;
  std::string type;
  std::string bus;
};

// devices.sound: ich9 or ac97 ("" = ich9, KubeVirt's default).
struct Sound {
  std::string name;
  std::string model;
};

// devices.watchdog: the i6300esb (the x86 one) and what it does when it fires.
struct Watchdog {
  std::string name;
  bool i6300esb = false;
  std::string action;  // poweroff, reset, shutdown ("" = reset, KubeVirt's default)
};

struct Devices {
  std::vector<Disk> disks;
  std::vector<Interface> interfaces;
  std::vector<Filesystem> filesystems;
  std::vector<HostDevice> host_devices;  // hostDevices then gpus
  std::vector<Input> inputs;
  bool rng = false;
  std::optional<bool> autoattach_serial_console;   // absent = true
  std::optional<bool> log_serial_console;          // absent: the cluster's (DisableSerialConsoleLog)
  std::optional<bool> autoattach_graphics_device;  // absent = true in KubeVirt
  std::optional<bool> autoattach_pod_interface;    // absent = true
  std::optional<bool> autoattach_mem_balloon;      // absent = true
  std::optional<bool> autoattach_input_device;
  std::optional<bool> network_interface_multiqueue;
  std::optional<bool> block_multi_queue;
  std::optional<bool> use_virtio_transitional;
  bool disable_hotplug =
      false;  // no hotplug controller (KubeVirt: no virtio-scsi unless a disk needs it)
  bool sound = false;  // devices.sound present (its fields in sound_device)
  Sound sound_device;
  bool watchdog = false;  // devices.watchdog present (its fields in watchdog_device)
  Watchdog watchdog_device;
  bool tpm = false;
  bool tpm_persistent = false;  // tpm.persistent
  bool client_passthrough = false;
  bool downward_metrics = false;
};

// One entry of features.hyperv (relaxed, vapic, spinlocks...) as KubeVirt's converter reads it
// (converter/compute/hypervisor_features.go): its `enabled` (absent = true) and the entry's extra
// values.
struct HypervFeature {
  std::string name;  // the VMI's key: relaxed, vapic, vpindex, runtime, synic, synictimer, reset,
                     // frequencies, reenlightenment, ipi, evmcs, spinlocks, vendorid, tlbflush
  bool enabled = true;
  std::optional<std::uint32_t> spinlocks;  // spinlocks.spinlocks (retries)
  std::string vendor_id;                   // vendorid.vendorid
  std::optional<bool> direct;              // synictimer.direct.enabled, tlbflush.direct.enabled
  std::optional<bool> extended;            // tlbflush.extended.enabled
};

// spec.domain.features: each present entry with its `enabled` (absent = true).
struct Features {
  std::optional<bool> acpi;
  std::optional<bool> apic;
  std::optional<bool> smm;
  bool hyperv = false;
  std::vector<HypervFeature> hyperv_features;  // in the VMI's order
  bool hyperv_passthrough = false;
  std::optional<bool> kvm_hidden;  // features.kvm.hidden
  std::optional<bool> pvspinlock;
  std::vector<std::string> others;  // any other key
};

// One clock.timer entry as KubeVirt's converter maps it (converter/compute/clock.go): hpet, kvm,
// pit, rtc, hyperv, with `present` (absent = true), tickPolicy and (rtc) track.
struct ClockTimer {
  std::string name;  // the VMI's key
  bool present = true;
  std::string tick_policy;
  std::string track;
};

struct Clock {
  bool present = false;
  bool utc = false;
  std::optional<std::int64_t> utc_offset_seconds;
  std::string timezone;
  bool timer = false;
  std::vector<ClockTimer> timers;  // in KubeVirt's order: rtc, pit, kvm, hpet, hyperv
};

struct Domain {
  Cpu cpu;
  Memory memory;
  Resources resources;
  Firmware firmware;
  Devices devices;
  Features features;
  Clock clock;
  std::string machine_type;
  bool launch_security = false;
  bool io_threads_policy = false;
  std::string io_threads_policy_name;  // shared, auto, supplementalPool
  bool chassis = false;
};

// spec.accessCredentials[] (KubeVirt's v1.AccessCredential): an SSH public key or a user
// password from a Secret, and how it reaches the guest (propagationMethod). The launcher honours
// qemuGuestAgent only (kubevirt/access_credentials.cpp); noCloud / configDrive are refused.
struct AccessCredential {
  bool ssh_public_key = false;     // sshPublicKey present
  bool user_password = false;      // userPassword present
  bool has_secret = false;         // <type>.source.secret present
  std::string secret_name;         // <type>.source.secret.secretName
  bool qemu_guest_agent = false;   // <type>.propagationMethod.qemuGuestAgent present
  bool no_cloud = false;           // sshPublicKey.propagationMethod.noCloud
  bool config_drive = false;       // sshPublicKey.propagationMethod.configDrive
  std::vector<std::string> users;  // sshPublicKey.propagationMethod.qemuGuestAgent.users
};

struct VmiSpec {
  bool has_domain = false;
  Domain domain;
  std::vector<Volume> volumes;
  std::vector<Network> networks;
  std::string hypervisor;    // new field spec.hypervisor; "" = launcher default
  std::string architecture;  // spec.architecture; "" = host
  std::string hostname;
  std::string subdomain;
  // spec.resourceClaims (DRA): the claims' names, as given.
  std::vector<std::string> resource_claims;
  std::vector<AccessCredential> access_credentials;
  std::optional<std::int64_t> termination_grace_period_seconds;
};

struct Vmi {
  std::string api_version;
  std::string kind;
  ObjectMeta metadata;
  VmiSpec spec;
};

// Derived values every consumer needs, computed as KubeVirt does.
struct CpuTopology {
  std::uint32_t sockets = 1;
  std::uint32_t cores = 1;
  std::uint32_t threads = 1;
  [[nodiscard]] std::uint64_t vcpus() const { return std::uint64_t{sockets} * cores * threads; }
};
// cores/sockets/threads default to 1; when none is set, sockets come from the CPU limit (or
// request), rounded up — KubeVirt's GetCPUTopology.
CpuTopology cpu_topology(const Vmi& vmi);
// Guest memory in bytes: memory.guest, else limits.memory, else requests.memory (KubeVirt's
// getVirtualMemory); nullopt when none is set.
std::optional<std::int64_t> guest_memory_bytes(const Vmi& vmi);

const Volume* find_volume(const Vmi& vmi, const std::string& name);
const Network* find_network(const Vmi& vmi, const std::string& name);
// The index of `v` in spec.volumes.
std::size_t volume_index(const Vmi& vmi, const Volume& v);

}  // namespace chl::vmi

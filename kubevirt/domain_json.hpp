#pragma once
// KubeVirt's `api.Domain` as JSON (pkg/virt-launcher/virtwrap/api/schema.go), built from a small
// plain description of the running VMI. It is what the launcher sends in every
// Notify.HandleDomainEvent and answers to Cmd.GetDomain. Only the fields virt-handler reads are
// filled (docs/kubevirt/domain.md, "The domain document"); their keys are Go's field names, as
// encoding/json writes them, except ObjectMeta's own Kubernetes keys.
#include <array>
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "events/domain_state.hpp"

namespace chl::kubevirt {

using Timestamp = std::chrono::system_clock::time_point;

// One VMI interface as the domain shows it: what the guest NIC really got (its MAC, the tap it
// is attached to), named by the VMI's interface (virt-handler keys status.interfaces[] and the
// pod-cache IP by Alias.Name: pkg/network/setup/netstat.go:282, 215-231).
struct DomainInterface {
  std::string name;  // the VMI's interface name ("default"); Alias {Name, UserDefined:true}
  std::string mac;   // lowercase, "02:42:ac:11:00:02"; never empty (netstat.go:283 reads MAC.MAC)
  std::string type = "ethernet";
  std::string target_device;  // the host side ("tap0"), Target {Device, Managed:"no"}; "": none
  std::string model = "virtio-non-transitional";
  std::optional<unsigned> mtu;  // MTU {Size}
  unsigned queues = 1;          // queue pairs; > 1: Driver {Name:"vhost", Queues} (netstat.go:292)
};

// One VMI disk as the domain shows it (virt-handler maps volumeStatus[].target through these:
// pkg/virt-handler/vm.go:527-538).
struct DomainDisk {
  std::string name;             // the VMI's disk/volume name: Alias {Name, UserDefined:true}
  std::string device = "disk";  // "disk" | "cdrom"
  std::string source;           // what the VMM opens (image file or block device); "": not yet
  bool block_device = false;    // source is a block device (Source.Dev) rather than a file
  std::string target_device;    // "vda", "sda": the guest's name; "" until the VMM has it
  std::string bus = "virtio";
  bool read_only = false;
};

// One VMI filesystem (virtiofs) as the domain shows it (api.FilesystemDevice).
struct DomainFilesystem {
  std::string name;    // the VMI's filesystem name: the tag (Target.Dir)
  std::string socket;  // the virtiofs container's socket (Source.Socket)
};

// A host device the VMM has passed through (api.HostDevice, schema.go:743-757), as KubeVirt's
// hostdevice package writes it (device/hostdevice/hostdev.go:140-194): a PCI function (Type
// "pci", Managed "no", Source.Address its host address) or a mediated device (Type "mdev", Mode
// "subsystem", Model "vfio-pci", Source.Address.UUID); the alias is KubeVirt's, user-defined
// ("hostdevice-<name>", "gpu-<name>", "sriov-<interface>"). Only what the VMM reports attached.
struct DomainHostDevice {
  std::string alias;
  bool mdev = false;
  std::string source;     // the host PCI address "0000:81:00.1", or the mdev UUID
  std::string guest_bdf;  // the guest's PCI address ("0000:00:05.0"; "" when not known)
  bool operator==(const DomainHostDevice&) const = default;
};

// Guest panic details (api.GuestPanicInfo): the panic type and, for Hyper-V, its 5 arguments.
struct GuestPanic {
  std::string type;  // "hyper-v", "s390", "unknown", ...
  std::array<std::uint64_t, 5> args{};
};

// Spec.Metadata.KubeVirt.Migration (api.MigrationMetadata, virtwrap/api/schema.go): how both
// virt-handlers follow a live migration. Keys are the Go field names.
struct DomainMigration {
  std::string uid;  // the migration's UID (MigrationUID(vmi))
  std::optional<Timestamp> start;
  std::optional<Timestamp> end;
  bool completed = false;
  bool failed = false;
  std::string failure_reason;
  std::string abort_status;  // "" | "Aborting" | "Succeeded" | "Failed"
  std::string mode;          // "PreCopy" | "PostCopy" | "Paused"
};

// What the guest agent reports of the guest, as api.DomainStatus carries it (schema.go:152-182):
// Status.OSInfo, Status.Interfaces[] (KubeVirt's agent poller: convertToInterfaces, "lo" left
// out, the first IPv4 address as Ip), Status.FSFreezeStatus.
struct GuestOsInfo {
  std::string name, kernel_release, version, pretty_name, version_id, kernel_version, machine, id;
  bool operator==(const GuestOsInfo&) const = default;
};
struct GuestInterfaceStatus {
  std::string mac;
  std::string ip;
  std::vector<std::string> ips;
  std::string interface_name;
  bool operator==(const GuestInterfaceStatus&) const = default;
};

struct DomainDocument {
  // The VMI's identity (ObjectMeta, and Spec.Metadata.KubeVirt.UID).
  std::string vmi_name;
  std::string vmi_namespace;
  std::string vmi_uid;
  std::string uuid;                             // the firmware UUID (Spec.UUID)
  // Spec.Metadata.KubeVirt.GracePeriod.DeletionGracePeriodSeconds: the VMI's
  // terminationGracePeriodSeconds, KubeVirt's default 30 (converter.go:364-370).
  std::int64_t grace_period_seconds = 30;
  std::optional<Timestamp> grace_period_start;  // when a graceful shutdown began
  // GracePeriod.MarkedForGracefulShutdown: the pod got SIGTERM (virt-launcher's
  // MarkGracefulShutdownVMI, manager.go): virt-handler then shuts the domain down.
  bool marked_for_graceful_shutdown = false;
  std::optional<Timestamp> deletion_timestamp;  // set once the domain is gone
  // What virt-handler copies into the VMI's status.
  std::string hypervisor_type = "kvm";  // Spec.Type ("qemu" would mean emulation)
  std::string arch = "x86_64";
  std::string machine;  // Spec.OS.Type.Machine; empty: not reported
  std::uint64_t memory_kib = 0;
  std::uint64_t current_memory_kib = 0;  // Spec.CurrentMemory; 0: as memory_kib
  unsigned vcpus = 1;                    // Spec.VCPU.CPUs (the maximum)
  bool acpi = true;                      // Spec.Features.ACPI: graceful shutdown possible
  std::vector<DomainInterface> interfaces;
  std::vector<DomainDisk> disks;
  // The guest agent's channel (Spec.Devices.Channels, org.qemu.guest_agent.0): virt-handler sets
  // the AgentConnected condition when its state is "connected" (vm.go:665-674) and then calls
  // GetGuestInfo on every reconcile. "disconnected" until an agent answers.
  bool agent_channel = true;
  std::string agent_state = "disconnected";
  std::string agent_channel_path;  // Source.Path; "": Source null
  std::vector<DomainFilesystem> filesystems;
  // SR-IOV interfaces, passed through as host devices: Spec.Devices.HostDevices with the alias
  // "sriov-<interface>" (virt-handler's status for them, netstat.go:313-323, 415-423).
  std::vector<std::string> sriov_interfaces;
  // VFIO host devices, GPUs (and on Cloud Hypervisor SR-IOV VFs) read back from the VMM
  // (apply_vmm_info): Spec.Devices.HostDevices after the SR-IOV ones above.
  std::vector<DomainHostDevice> host_devices;
  // The state, in the launcher's vocabulary; translated with to_kubevirt_state.
  events::DomainState state = events::DomainState::Shutoff;
  events::StateReason reason = events::StateReason::Unknown;
  std::optional<GuestPanic> panic;  // Status.GuestPanicInfo, the latest panic
  int panic_count = 0;              // Status.PanicCount
  std::optional<DomainMigration> migration;  // Spec.Metadata.KubeVirt.Migration
  // Spec.Metadata.KubeVirt.AccessCredential (api.AccessCredentialMetadata, schema.go:441: no
  // json tags, so {"Succeeded", "Message"}); unset until the first access-credential pass.
  struct AccessCredential {
    bool succeeded = false;
    std::string message;
  };
  std::optional<AccessCredential> access_credential;
  // From the guest agent (guest_agent/poller.hpp); empty until it reports.
  GuestOsInfo os_info;                                 // Status.OSInfo
  std::vector<GuestInterfaceStatus> guest_interfaces;  // Status.Interfaces
  std::string fs_freeze_status;                        // Status.FSFreezeStatus.Status
};

// `<namespace>_<name>`: the domain's name, as KubeVirt names it.
std::string domain_name(const std::string& vmi_namespace, const std::string& vmi_name);

// A Kubernetes metav1.Time as JSON writes it: RFC 3339 in UTC, whole seconds ("...T18:47:53Z").
std::string kubernetes_time(Timestamp t);

// The api.Domain JSON. A domain in NoState (gone) is written as KubeVirt writes it then: the
// identity, the VMI's UID and the status only.
nlohmann::json to_domain_json(const DomainDocument& d);

}  // namespace chl::kubevirt

#pragma once
// Test support: virt-handler's reading of a domain document, as KubeVirt d923fdb does it
// (../shared/reference/kubevirt-domain-contract.md §0 and §1). Two steps:
//   go_decode_domain   Go's encoding/json into api.Domain
//   (pkg/virt-launcher/virtwrap/api/schema.go,
//                      what notify-server/server.go:54-94 and cache.go:277-310 do): a JSON value of
//                      the wrong type for a field is an error (UnmarshalTypeError), unknown keys
//                      are ignored, keys match case-insensitively, null leaves a pointer, slice or
//                      map nil and any other field untouched. The result is the decoded value as
//                      JSON with Go's shape: every struct field present, absent ones at their zero
//                      value, nil pointers/slices/maps as null.
//   read_as_virt_handler  every read of §1 in virt-handler's order (sync vm.go:1320 →
//                      updateVMIStatus → updateVMIStatusFromDomain …): a read that panics in Go
//                      (CRASH) and each silent misreport the contract names is a failure naming
//                      the contract row and KubeVirt's file:line; what virt-handler would write
//                      into the VMI's status from the domain is returned.
// The VMI phase (§2.2) and the shutdown loop (§2.3-2.4) are virt_handler_phase.hpp /
// virt_handler_loop.* (not here).
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace chl::test {

struct GoDecoded {
  nlohmann::json value;  // api.Domain as Go holds it (see above)
  std::string error;     // "" when Go decodes it; else json.Unmarshal's complaint
  std::vector<std::string>
      unmodelled;  // keys of api.Domain fields this decoder does not type-check
};
GoDecoded go_decode_domain(const std::string& text);

// The VMI as virt-handler has it when it reads the domain.
struct HandlerVmi {
  std::string name, namespace_, uid;
  // false: made up from the documents (no VMI given): the reads that need its spec (interface and
  // volume names, the grace length or a grace of 0, ACPI) are skipped; the CRASH reads are not.
  bool spec_known = true;
  std::vector<std::string> interfaces;  // spec.domain.devices.interfaces[].name
  // What the guest NIC must have: the VMI's macAddress, or what the test knows it got.
  std::map<std::string, std::string> guest_macs;
  std::vector<std::string> volumes;  // spec.volumes[].name
  struct VolumeStatus {
    std::string name;
    bool hotplug = false;
    std::string phase;  // as the VMI has it ("HotplugVolumeMounted")
  };
  std::vector<VolumeStatus> volume_status;  // status.volumeStatus
  std::optional<std::int64_t> termination_grace_period_seconds;
  bool acpi = true;  // spec.domain.features.acpi enabled (the default)
  // virt-handler's pod-interface cache (netpod/discover.go:106-137): the pod interface's IPs
  // as phase 1 found them, by VMI interface name. status.interfaces[].ip comes from here
  // (netstat.go:215-231), keyed by the domain interface's Alias name.
  std::map<std::string, std::vector<std::string>> pod_ips;

  // From the VMI JSON as virt-handler sends it (SyncVirtualMachine's vmiJson).
  static HandlerVmi from_vmi_json(const nlohmann::json& vmi);
};

// What virt-handler writes into the VMI's status from the domain (§1).
struct DerivedStatus {
  bool synced = false;  // false: sync() does not run on this domain (absent, or a stale UID)
  std::string not_synced_why;
  struct Interface {
    std::string name, mac, ip;
    std::vector<std::string> ips;
    int queue_count = 1;
    std::string link_state = "up";
  };
  std::vector<Interface> interfaces;  // status.interfaces (netstat.go:279-290, 215-231)
  struct Volume {
    std::string name, target, phase;
  };
  std::vector<Volume> volumes;               // status.volumeStatus (vm.go:522-560)
  std::string machine;                       // status.machine.type (vm.go:2353-2360)
  std::optional<std::string> guest_current;  // status.memory.guestCurrent (vm.go:943-953)
  bool agent_connected = false;              // AgentConnected condition (vm.go:665-674)
  std::string status, reason;                // Status.Status / Status.Reason as decoded
  const Interface* interface(const std::string& name) const;
  const Volume* volume(const std::string& name) const;
};

struct HandlerRead {
  DerivedStatus status;
  // "contract §1 <row>: CRASH …(file:line)" / "…: misreport …": empty when virt-handler reads
  // the document as the contract says it must.
  std::vector<std::string> failures;
};

// Read a decoded document (go_decode_domain(...).value) as virt-handler does, for `vmi`.
HandlerRead read_as_virt_handler(const nlohmann::json& domain, const HandlerVmi& vmi);

// Both, on the text the launcher sent; a decode error is a failure (§0: the event is dropped,
// the launcher gets success:false).
HandlerRead decode_and_read(const std::string& text, const HandlerVmi& vmi);

// KubeVirt's parseLibvirtQuantity (vm.go): "65536Ki" for {65536, "KiB"}; nullopt for a unit it
// does not know.
std::optional<std::string> libvirt_quantity(std::uint64_t value, const std::string& unit);

}  // namespace chl::test

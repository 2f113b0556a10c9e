#pragma once
// The guest agent's cache (guest_agent/guest_cache.hpp: qemu-ga's own answers) as KubeVirt's
// launcher hands it on, with libvirt's mapping in between (virDomainGetGuestInfo) and KubeVirt's
// conversions (pkg/virt-launcher/virtwrap/manager.go:2571-2665 GetGuestInfo/GetUsers/
// GetFilesystems; agent-poller/agent_poller.go convertTo*):
//   GetGuestInfo   -> v1.VirtualMachineInstanceGuestAgentInfo (users and filesystems: the first 10)
//   GetUsers       -> []v1.VirtualMachineInstanceGuestOSUser (all)
//   GetFilesystems -> []v1.VirtualMachineInstanceFileSystem (all)
// and the domain's Status.OSInfo / Status.Interfaces / FSFreezeStatus (domain_json.hpp).
// Keys and omitempty as encoding/json writes KubeVirt's types (api/core/v1/types.go:2902-2976).
#include <nlohmann/json.hpp>
#include <vector>

#include "guest_agent/guest_cache.hpp"
#include "kubevirt/domain_json.hpp"

namespace chl::kubevirt {

nlohmann::json guest_info_json(const guest_agent::GuestCache& c);
nlohmann::json guest_users_json(const guest_agent::GuestCache& c, int limit = -1);
nlohmann::json guest_filesystems_json(const guest_agent::GuestCache& c, int limit = -1);

GuestOsInfo guest_os_info(const guest_agent::GuestCache& c);
// "lo" left out; Ip the first IPv4 address, else the first address (convertToIPAddresses).
std::vector<GuestInterfaceStatus> guest_interfaces(const guest_agent::GuestCache& c);

}  // namespace chl::kubevirt

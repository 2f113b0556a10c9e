#pragma once
// What the poller (poller.hpp) last learnt from the guest agent: each command's "return" value as
// qemu-ga sent it (qga/qapi-schema.json). Header-only and plain data, so the KubeVirt documents
// (kubevirt/guest_info_json.hpp) read it without linking the client.
#include <nlohmann/json.hpp>
#include <string>

namespace chl::guest_agent {

// The last "return" value of each command (null: not known yet).
struct GuestCache {
  nlohmann::json info;       // guest-info {version, supported_commands[{name, enabled, ...}]}
  nlohmann::json host_name;  // guest-get-host-name {host-name}
  nlohmann::json os_info;    // guest-get-osinfo {name, kernel-release, ...}
  nlohmann::json timezone;   // guest-get-timezone {zone?, offset}
  nlohmann::json users;      // guest-get-users [{user, domain?, login-time}]
  nlohmann::json fs_info;    // guest-get-fsinfo [{name, mountpoint, type, used-bytes, ...}]
  nlohmann::json
      interfaces;         // guest-network-get-interfaces [{name, hardware-address, ip-addresses}]
  std::string fs_freeze;  // guest-fsfreeze-status: "thawed" | "frozen" | "" (unknown)
};

}  // namespace chl::guest_agent

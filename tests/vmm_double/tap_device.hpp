#pragma once
// What Cloud Hypervisor v52 does to a tap when it creates a virtio-net device, with the same
// syscalls in the same order, so a VMM without the privilege for one of them fails here as it
// fails there (docs/vmm-double.md, "CH's privileged operations").
//   by name  (NetConfig.tap):  virtio_devices::Net::new -> net_util::open_tap
//            (net_util/src/open_tap.rs, net_util/src/tap.rs Tap::open_named)
//   by fds   (NetConfig.fds, vm.add-net with SCM_RIGHTS): virtio_devices::Net::from_tap_fds
//            (virtio-devices/src/net.rs, tap.rs Tap::from_tap_fd)
// Both end in Net::new_with_tap, which reads the tap's MTU (SIOCGIFMTU, a warning when it
// fails). TUNSETOFFLOAD comes later, when the guest's driver activates the device
// (net.rs activate): the double runs no guest driver and does not issue it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"

namespace chl::vmm_double {

struct TapRequest {
  std::optional<std::string> name;  // NetConfig.tap
  std::vector<int> fds;             // NetConfig.fds (the fds CH was handed); used when no name
  std::optional<std::uint16_t> mtu;
  std::optional<std::string> host_mac;  // "aa:bb:..."
  std::optional<std::string> ip;        // IPv4 only in the double
  std::optional<std::string> mask;
  unsigned queue_pairs = 1;  // num_queues / 2
};

struct OpenedTaps {
  std::vector<common::UniqueFd> queues;  // CH's Tap files, one per queue pair
  std::string if_name;
  std::optional<std::string> host_mac;  // by name: CH writes the tap's MAC back into the config
  // CH's error chain below "Cannot create virtio-net device" when it failed; empty on success.
  std::vector<std::string> error;
};

OpenedTaps open_ch_taps(const TapRequest& req);

// Rust's io::Error Display for an OS error: "<strerror> (os error N)".
std::string rust_os_error(int err);

}  // namespace chl::vmm_double

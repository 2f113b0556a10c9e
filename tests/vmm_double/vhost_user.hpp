#pragma once
// The vhost-user frontend side of Cloud Hypervisor v52's virtio-fs device, as the double plays
// it: what Fs::new does when the VM is created (virtio-devices/src/vhost_user/fs.rs), with the
// vhost crate's (0.16) Frontend on the wire. It connects to the backend's socket (retrying every
// 100 ms for 60 s: vu_common_ctrl.rs connect_vhost_user), then negotiates exactly as
// negotiate_features_vhost_user does:
//   SET_OWNER; GET_FEATURES (acked = CH's DEFAULT_VIRTIO_FEATURES & the backend's);
//   if VHOST_USER_F_PROTOCOL_FEATURES was acked: GET_PROTOCOL_FEATURES, SET_PROTOCOL_FEATURES
//   (CH's MQ | CONFIGURE_MEM_SLOTS | REPLY_ACK | INFLIGHT_SHMFD | LOG_SHMFD | DEVICE_STATE & the
//   backend's); with REPLY_ACK acked every later request carries NEED_REPLY;
//   if MQ was acked: GET_QUEUE_NUM, and fewer queues than 1 + num_queues fails.
// The connection stays open as long as the VM exists (virtiofsd serves one frontend and exits
// when it hangs up). What the guest's driver would do next (SET_FEATURES, SET_MEM_TABLE with the
// guest memory's fds, the vrings) needs a guest: the double has none.
// Failures are CH's error chain below "Error from device manager", with its texts (vhost_user/
// mod.rs Error, the vhost crate's Display), e.g. {"Cannot create virtio-fs device",
// "Connection to socket failed", "vhost-user: can't connect to peer: No such file or directory
// (os error 2)"}.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"

namespace chl::vmm_double {

struct VhostUserSession {
  common::UniqueFd fd;
  std::uint64_t acked_features = 0;
  std::uint64_t acked_protocol_features = 0;
  std::uint64_t backend_queues = 0;  // GET_QUEUE_NUM's answer (2 when MQ is not acked)
};

// CH's Fs::new handshake on `socket` for a device with `num_queues` request queues. On failure
// returns CH's error chain (non-empty) and leaves `out` closed.
std::vector<std::string> vhost_user_fs_connect(
    const std::string& socket, std::uint64_t num_queues, VhostUserSession& out,
    std::chrono::milliseconds connect_timeout = std::chrono::seconds(60));

}  // namespace chl::vmm_double

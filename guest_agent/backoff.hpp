#pragma once
// The guest agent client's reconnect schedule (agent_client.cpp), apart from the loop so that a
// test can drive it on a fake clock.
//
// KubeVirt's virt-launcher never polls for an agent: libvirt tells it when the guest opens the
// virtio-serial channel (the agent's CONNECTED/DISCONNECTED lifecycle events), and its pollers run
// only while connected (pkg/virt-launcher/virtwrap/agent-poller/agent_poller.go;
// ../shared/reference/kubevirt-guest-agent-contract.md §3). Cloud Hypervisor's hybrid vsock has no
// such event: the only way to learn that an agent listens is to try `CONNECT <port>`
// (kubevirt-guest-agent-contract.md §6). So we try, on this schedule:
//   - while the agent is expected (the first `patience` after the client starts, and after a
//     connection that had reached the agent is lost: a guest booting or rebooting, an agent
//     restarting), `min` doubling to `max` (1 s .. 10 s): the agent is found within 10 s of
//     coming up;
//   - once the agent has not answered for `patience` (5 min: a guest that runs no agent, the usual
//     case on CH, whose distro images start qemu-ga on virtio-serial), the doubling goes on up to
//     `idle_max` (60 s): an agent installed or started later is found within a minute, and an
//     agentless VM costs one attempt a minute instead of six;
//   - an agent that answers resets the schedule to `min`.
#include <algorithm>
#include <chrono>

namespace chl::guest_agent {

struct BackoffOptions {
  std::chrono::milliseconds min{1000};
  std::chrono::milliseconds max{10000};        // while the agent is expected
  std::chrono::milliseconds patience{300000};  // how long the agent is expected
  std::chrono::milliseconds idle_max{60000};   // afterwards
};

class ReconnectBackoff {
 public:
  using Clock = std::chrono::steady_clock;

  ReconnectBackoff(BackoffOptions o, Clock::time_point now)
      : o_(o), next_(o.min), expected_since_(now) {}

  // The wait before the next attempt, the last one having failed at `now`.
  std::chrono::milliseconds next(Clock::time_point now) {
    const auto wait = next_;
    const auto cap = now - expected_since_ >= o_.patience ? std::max(o_.idle_max, o_.max) : o_.max;
    next_ = std::min(next_ * 2, cap);
    return wait;
  }
  // The agent answered.
  void answered() { next_ = o_.min; }
  // A connection that had reached the agent was lost at `now`: it is expected back soon.
  void lost(Clock::time_point now) {
    next_ = o_.min;
    expected_since_ = now;
  }

 private:
  BackoffOptions o_;
  std::chrono::milliseconds next_;
  Clock::time_point expected_since_;
};

}  // namespace chl::guest_agent

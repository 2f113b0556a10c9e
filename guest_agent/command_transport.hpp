#pragma once
// The other way to reach the guest's qemu-ga: through someone who already holds its channel and
// carries whole commands, as KubeVirt's virt-launcher does through libvirt
// (virDomainQemuAgentCommand; libvirt frames, resynchronises with guest-sync and times out by
// itself, qemu_agent.c). On the QEMU path libvirt owns the virtio-serial chardev (QEMU's socket
// chardev takes one client), so the launcher's AgentClient runs over this instead of a Connector;
// the libvirt module implements it (drivers/libvirt/agent_transport.hpp). Header only: the
// guest_agent room, the launcher core and the kubevirt module see the interface, only the libvirt
// module links libvirt.
//
// Connected or not is the holder's word (libvirt's agent lifecycle event,
// VIR_DOMAIN_EVENT_ID_AGENT_LIFECYCLE, which is also what KubeVirt's Channel state comes from).
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.hpp"

namespace chl::guest_agent {

struct TransportCommand {
  std::string command;       // "guest-ping"
  nlohmann::json arguments;  // null: none
  std::string wire;          // {"execute":…,"arguments":…} as qemu-ga reads it
  std::chrono::milliseconds timeout;
  bool expect_reply = true;  // false: guest-shutdown and the like, which answer nothing
};

class CommandTransport {
 public:
  // The agent's whole reply text ({"return": …} or {"error": …}); an error is the holder's (the
  // agent not connected, a timeout, the domain gone).
  using Done = std::function<void(common::Result<std::string>)>;
  using StateHandler = std::function<void(bool connected)>;
  virtual ~CommandTransport() = default;
  // Report the agent's state: once now and at every change, always on the io thread the
  // transport was made for and never from inside this call. One watcher; null stops reporting.
  virtual void watch(StateHandler on_state) = 0;
  // Run one command; `done` runs once, on that io thread, never from inside this call. Commands
  // run one at a time, in the order given.
  virtual void async_command(TransportCommand c, Done done) = 0;
  // "libvirt's agent channel of domain ns_name" (logs, errors).
  [[nodiscard]] virtual std::string describe() const = 0;
};

}  // namespace chl::guest_agent

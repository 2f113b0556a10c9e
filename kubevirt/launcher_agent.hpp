#pragma once
// virt-launcher mode's guest agent (docs/guest-agent.md): the client of the guest's qemu-ga, the
// poller and its cache, on the service's event loop, and what the domain document shows of them
// (the channel's state, Status.OSInfo / Interfaces / FSFreezeStatus). LauncherHandler owns one
// while the VM runs and answers the agent RPCs from it (launcher_agent.cpp).
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "guest_agent/agent_client.hpp"
#include "guest_agent/poller.hpp"
#include "kubevirt/domain_json.hpp"

namespace chl::kubevirt {

// Where the agent is: the driver's channel (libvirt's, on the QEMU path), else Cloud
// Hypervisor's hybrid vsock socket and the guest's vsock port. Neither: no transport on this path
// (the domain still shows the channel, "disconnected").
struct AgentLinkOptions {
  std::shared_ptr<guest_agent::CommandTransport> transport;
  std::filesystem::path vsock_socket;
  std::uint32_t vsock_port = 1024;
  guest_agent::ClientOptions client;
  guest_agent::PollerOptions poller;
};

// What the domain shows of the agent.
struct AgentView {
  bool connected = false;
  GuestOsInfo os_info;
  std::vector<GuestInterfaceStatus> interfaces;
  std::string fs_freeze;
  bool operator==(const AgentView&) const = default;
};

class AgentLink {
 public:
  using OnChange = std::function<void(const AgentView&)>;  // loop thread

  // Loop thread (or before the loop runs). Starts connecting at once.
  AgentLink(boost::asio::io_context& io, AgentLinkOptions options, OnChange on_change);
  ~AgentLink();

  // The domain paused (the poller rests, as KubeVirt's on SUSPENDED) or running again.
  void set_paused(bool paused);
  [[nodiscard]] bool connected() const { return client_ && client_->connected(); }
  [[nodiscard]] guest_agent::GuestCache cache() const;
  // Null when this path has no transport.
  [[nodiscard]] std::shared_ptr<guest_agent::AgentClient> client() const { return client_; }
  [[nodiscard]] boost::asio::io_context& io() { return io_; }

  // ---- what the launcher does through the agent (launcher_agent_ops.cpp), loop thread ----
  using Done = std::function<void(common::Status)>;
  // KubeVirt's FreezeVMI: read guest-fsfreeze-status, freeze unless frozen, then thaw by itself
  // after `unfreeze_timeout` unless Unfreeze came first (0: no safety thaw).
  void freeze(std::chrono::seconds unfreeze_timeout, Done done);
  // KubeVirt's UnfreezeVMI: cancel the safety thaw; thaw unless thawed.
  void unfreeze(Done done);
  // KubeVirt's setGuestTime: guest-set-time with the host's clock, every second for up to 60 s
  // until the agent takes it (or says it cannot); a new call replaces one under way.
  void set_guest_time();
  // guest-shutdown {"mode":"reboot"} (libvirt: virDomainReboot(GUEST_AGENT)).
  void reboot(Done done);

 private:
  void changed();
  void set_time_attempt(std::uint64_t gen, std::chrono::steady_clock::time_point until);

  boost::asio::io_context& io_;
  std::shared_ptr<guest_agent::AgentClient> client_;
  std::shared_ptr<guest_agent::Poller> poller_;
  OnChange on_change_;
  bool paused_ = false;
  AgentView last_;
  std::unique_ptr<boost::asio::steady_timer> safety_thaw_;
  std::unique_ptr<boost::asio::steady_timer> set_time_;
  std::uint64_t set_time_gen_ = 0;
  // Replies and timers that come after the link is gone find this expired.
  std::shared_ptr<char> alive_ = std::make_shared<char>();
};

}  // namespace chl::kubevirt

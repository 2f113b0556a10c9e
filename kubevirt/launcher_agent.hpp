#pragma once
// virt-launcher mode's guest agent (docs/guest-agent.md): the client of the guest's qemu-ga, the
// poller and its cache, on the service's event loop, and what the domain document shows of them
// (the channel's state, Status.OSInfo / Interfaces / FSFreezeStatus). LauncherHandler owns one
// while the VM runs and answers the agent RPCs from it (launcher_agent.cpp).
#include <boost/asio/io_context.hpp>
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

// Where the agent is: Cloud Hypervisor's hybrid vsock socket and the guest's vsock port. An empty
// socket: no transport on this path (the domain still shows the channel, "disconnected").
struct AgentLinkOptions {
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

 private:
  void changed();

  boost::asio::io_context& io_;
  std::shared_ptr<guest_agent::AgentClient> client_;
  std::shared_ptr<guest_agent::Poller> poller_;
  OnChange on_change_;
  bool paused_ = false;
  AgentView last_;
};

}  // namespace chl::kubevirt

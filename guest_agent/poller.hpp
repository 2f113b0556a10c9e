#pragma once
// The one poller of the guest agent, with KubeVirt's cadence (pkg/virt-launcher/virtwrap/
// agent-poller/agent_poller.go, Poll: the first round at once, then an interval that starts at
// 10 s, or the tick when shorter, and doubles up to the tick; the ticks are virt-launcher's
// defaults, cmd/virt-launcher/virt-launcher.go:366-370):
//   sys     120 s  guest-network-get-interfaces, guest-get-osinfo, guest-get-host-name,
//   guest-get-timezone user     10 s  guest-get-users fs      300 s  guest-get-fsinfo version 300 s
//   guest-info freeze    5 s  guest-fsfreeze-status
// It runs while the agent is connected (start/stop) and caches each command's last "return"
// value; the launcher's RPCs read the cache and never wait for the agent. A change of the OS
// info, the interfaces or the freeze status calls the change handler (KubeVirt's
// AsyncAgentStore.Store -> AgentUpdated: a domain event).
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "guest_agent/agent_client.hpp"
#include "guest_agent/guest_cache.hpp"

namespace chl::guest_agent {

struct PollerOptions {
  std::chrono::milliseconds initial{10000};
  std::chrono::milliseconds sys{120000};
  std::chrono::milliseconds user{10000};
  std::chrono::milliseconds fs{300000};
  std::chrono::milliseconds version{300000};
  std::chrono::milliseconds freeze{5000};
  std::chrono::milliseconds command_timeout{10000};
};

class Poller : public std::enable_shared_from_this<Poller> {
 public:
  enum class Changed { OsInfo, Interfaces, FsFreeze };
  using ChangeHandler = std::function<void(Changed)>;

  static std::shared_ptr<Poller> create(boost::asio::io_context& io,
                                        std::shared_ptr<AgentClient> agent,
                                        PollerOptions options = {});
  ~Poller();

  void set_change_handler(ChangeHandler h) { on_change_ = std::move(h); }
  // Begin polling (the agent connected, the domain runs); stop (disconnected, paused). The cache
  // is kept across stop/start: it is what was last seen.
  void start();
  void stop();
  [[nodiscard]] bool running() const { return running_; }

  [[nodiscard]] const GuestCache& cache() const { return cache_; }
  // Record a freeze status learnt outside the poller (after Freeze/Unfreeze).
  void set_fs_freeze(const std::string& status);
  // Run the freeze-status command now (after Freeze/Unfreeze), as the 5 s poll would.
  void refresh_fs_freeze();

 private:
  struct Group {
    std::string name;
    std::vector<std::string> commands;
    std::chrono::milliseconds tick;
    std::chrono::milliseconds interval{};
    std::unique_ptr<boost::asio::steady_timer> timer;
  };

  Poller(boost::asio::io_context& io, std::shared_ptr<AgentClient> agent, PollerOptions options);
  void run_group(Group& g);
  void arm(Group& g);
  void store(const std::string& command, nlohmann::json value);

  boost::asio::io_context& io_;
  std::shared_ptr<AgentClient> agent_;
  PollerOptions opts_;
  std::vector<Group> groups_;
  bool running_ = false;
  std::uint64_t gen_ = 0;
  GuestCache cache_;
  ChangeHandler on_change_;
};

}  // namespace chl::guest_agent

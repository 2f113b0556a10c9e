#include "guest_agent/poller.hpp"

#include "common/log.hpp"

namespace chl::guest_agent {

using Json = nlohmann::json;
using boost::system::error_code;

std::shared_ptr<Poller> Poller::create(boost::asio::io_context& io,
                                       std::shared_ptr<AgentClient> agent, PollerOptions options) {
  return std::shared_ptr<Poller>(new Poller(io, std::move(agent), options));
}

Poller::Poller(boost::asio::io_context& io, std::shared_ptr<AgentClient> agent,
               PollerOptions options)
    : io_(io), agent_(std::move(agent)), opts_(options) {
  auto group = [&](std::string name, std::vector<std::string> cmds,
                   std::chrono::milliseconds tick) {
    Group g;
    g.name = std::move(name);
    g.commands = std::move(cmds);
    g.tick = tick;
    g.timer = std::make_unique<boost::asio::steady_timer>(io_);
    groups_.push_back(std::move(g));
  };
  group("sys",
        {"guest-network-get-interfaces", "guest-get-osinfo", "guest-get-host-name",
         "guest-get-timezone"},
        opts_.sys);
  group("user", {"guest-get-users"}, opts_.user);
  group("fs", {"guest-get-fsinfo"}, opts_.fs);
  group("version", {"guest-info"}, opts_.version);
  group("freeze", {"guest-fsfreeze-status"}, opts_.freeze);
}

Poller::~Poller() {
  for (auto& g : groups_) g.timer->cancel();
}

void Poller::start() {
  if (running_) return;
  running_ = true;
  ++gen_;
  for (auto& g : groups_) {
    g.interval = std::min(opts_.initial, g.tick);
    run_group(g);  // the first round at once
    arm(g);
  }
}

void Poller::stop() {
  if (!running_) return;
  running_ = false;
  ++gen_;
  for (auto& g : groups_) g.timer->cancel();
}

void Poller::arm(Group& g) {
  g.timer->expires_after(g.interval);
  const auto gen = gen_;
  g.timer->async_wait([self = weak_from_this(), &g, gen](const error_code& ec) {
    auto me = self.lock();
    if (ec || !me || me->gen_ != gen) return;
    me->run_group(g);
    if (g.interval < g.tick) g.interval = std::min(g.interval * 2, g.tick);
    me->arm(g);
  });
}

void Poller::run_group(Group& g) {
  for (const auto& cmd : g.commands) {
    agent_->execute(cmd, nullptr, opts_.command_timeout,
                    [self = weak_from_this(), cmd, gen = gen_](common::Result<Json> r) {
                      auto me = self.lock();
                      if (!me || me->gen_ != gen) return;
                      if (!r) {
                        // Kept as last seen; an agent without the command keeps answering so.
                        CHL_LOG_DEBUG("guest agent poll: {}", r.error().message());
                        return;
                      }
                      me->store(cmd, std::move(*r));
                    });
  }
}

void Poller::refresh_fs_freeze() {
  agent_->execute("guest-fsfreeze-status", nullptr, opts_.command_timeout,
                  [self = weak_from_this()](common::Result<Json> r) {
                    auto me = self.lock();
                    if (me && r) me->store("guest-fsfreeze-status", std::move(*r));
                  });
}

void Poller::set_fs_freeze(const std::string& status) { store("guest-fsfreeze-status", status); }

void Poller::store(const std::string& command, Json value) {
  std::optional<Changed> changed;
  auto put = [&](Json& slot, std::optional<Changed> what) {
    if (slot == value) return;
    slot = std::move(value);
    changed = what;
  };
  if (command == "guest-info")
    put(cache_.info, std::nullopt);
  else if (command == "guest-get-host-name")
    put(cache_.host_name, std::nullopt);
  else if (command == "guest-get-osinfo")
    put(cache_.os_info, Changed::OsInfo);
  else if (command == "guest-get-timezone")
    put(cache_.timezone, std::nullopt);
  else if (command == "guest-get-users")
    put(cache_.users, std::nullopt);
  else if (command == "guest-get-fsinfo")
    put(cache_.fs_info, std::nullopt);
  else if (command == "guest-network-get-interfaces")
    put(cache_.interfaces, Changed::Interfaces);
  else if (command == "guest-fsfreeze-status" && value.is_string()) {
    const std::string s = value.get<std::string>();
    if (s != cache_.fs_freeze) {
      cache_.fs_freeze = s;
      changed = Changed::FsFreeze;
    }
  }
  if (changed && on_change_) on_change_(*changed);
}

}  // namespace chl::guest_agent

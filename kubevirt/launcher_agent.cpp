// The guest agent in virt-launcher mode: AgentLink (the client, the poller, the domain's view of
// them) and LauncherHandler's agent RPCs (GetGuestInfo, GetUsers, GetFilesystems, GuestPing,
// Exec). Every agent call runs on the service's loop and never waits there: the RPC's thread
// waits for the answer, bounded (docs/guest-agent.md).
#include "kubevirt/launcher_agent.hpp"

#include <boost/asio/post.hpp>

#include "common/log.hpp"
#include "guest_agent/connector.hpp"
#include "guest_agent/exec.hpp"
#include "kubevirt/guest_info_json.hpp"
#include "kubevirt/launcher_handler.hpp"
#include "launcher/launcher_service.hpp"

namespace chl::kubevirt {

using common::fail;
using common::Result;
using common::Status;
using Json = nlohmann::json;

AgentLink::AgentLink(boost::asio::io_context& io, AgentLinkOptions options, OnChange on_change)
    : io_(io),
      on_change_(std::move(on_change)),
      safety_thaw_(std::make_unique<boost::asio::steady_timer>(io)),
      set_time_(std::make_unique<boost::asio::steady_timer>(io)) {
  // One client and one poller for both paths: over the driver's channel (libvirt), else over
  // Cloud Hypervisor's hybrid vsock.
  if (options.transport)
    client_ = guest_agent::AgentClient::create(io_, options.transport, options.client);
  else if (!options.vsock_socket.empty())
    client_ = guest_agent::AgentClient::create(
        io_, guest_agent::hybrid_vsock_connector(options.vsock_socket, options.vsock_port),
        options.client);
  else
    return;
  poller_ = guest_agent::Poller::create(io_, client_, options.poller);
  poller_->set_change_handler([this](guest_agent::Poller::Changed) { changed(); });
  client_->set_state_handler([this](bool up) {
    // KubeVirt's pollers start on the agent's CONNECTED event and stop on DISCONNECTED.
    if (up && !paused_) poller_->start();
    if (!up) poller_->stop();
    changed();
  });
  client_->start();
}

AgentLink::~AgentLink() {
  safety_thaw_->cancel();
  set_time_->cancel();
  if (poller_) poller_->stop();
  if (client_) client_->stop();
}

void AgentLink::set_paused(bool paused) {
  if (paused_ == paused || !poller_) return;
  paused_ = paused;
  if (paused)
    poller_->stop();
  else if (client_->connected())
    poller_->start();
}

guest_agent::GuestCache AgentLink::cache() const {
  return poller_ ? poller_->cache() : guest_agent::GuestCache{};
}

void AgentLink::changed() {
  AgentView v;
  v.connected = connected();
  const auto c = cache();
  v.os_info = guest_os_info(c);
  v.interfaces = guest_interfaces(c);
  v.fs_freeze = c.fs_freeze;
  if (v == last_) return;
  last_ = v;
  if (on_change_) on_change_(v);
}

// ---- LauncherHandler: the agent's life beside the VM's ----

void LauncherHandler::start_agent(launcher::LauncherService& service) {
  AgentLinkOptions o;
  o.transport = service.agent_transport();
  o.vsock_socket = opts_.agent_vsock_socket;
  o.vsock_port = opts_.agent_vsock_port;
  auto link =
      std::make_unique<AgentLink>(service.io(), o, [this](const AgentView& v) { on_agent(v); });
  AgentLink* raw = link.get();
  {
    std::lock_guard lock(mu_);
    agent_ = std::move(link);
  }
  // The poller rests while the domain is paused (agent_poller.go: stop on SUSPENDED).
  service.bus().subscribe([raw](const events::DomainEvent& e) {
    raw->set_paused(e.state != events::DomainState::Running);
  });
}

void LauncherHandler::stop_agent() {
  std::unique_ptr<AgentLink> gone;
  {
    std::lock_guard lock(mu_);
    gone = std::move(agent_);
    doc_.agent_state = "disconnected";  // no VM, no agent: told with the next event
  }
}

void LauncherHandler::on_agent(const AgentView& v) {
  std::lock_guard lock(mu_);
  if (phase_ == Phase::Finished) return;
  doc_.agent_state = v.connected ? "connected" : "disconnected";
  doc_.os_info = v.os_info;
  doc_.guest_interfaces = v.interfaces;
  // KubeVirt's FSFreezeStatus: "frozen" or "thawed"; unknown stays empty.
  doc_.fs_freeze_status = v.fs_freeze;
  // Nothing polls these: each change is a domain event (AsyncAgentStore.Store -> AgentUpdated).
  if (notify_ && added_)
    notify_->send_domain_event(to_domain_json(doc_).dump(), DomainEventType::Modified);
}

// ---- the agent RPCs ----

namespace {

// The agent of the running VM (loop thread), or why there is none.
Result<AgentLink*> link_of(AgentLink* a, const std::string& what) {
  if (!a || !a->client())
    return fail(std::errc::not_connected, what + ": this VM has no guest agent channel");
  return a;
}

}  // namespace

Result<std::string> LauncherHandler::agent_document(const std::string& what, DocumentOf of) {
  AgentLink* a;
  {
    std::lock_guard lock(mu_);
    a = agent_.get();
  }
  auto j = on_service(what, [a, of](auto&, auto reply) {
    reply(a ? of(a->cache()) : of(guest_agent::GuestCache{}));
  });
  if (!j) return tl::unexpected(j.error());
  return j->dump();
}

Result<std::string> LauncherHandler::get_guest_info() {
  return agent_document("GetGuestInfo",
                        [](const guest_agent::GuestCache& c) { return guest_info_json(c); });
}

Result<std::string> LauncherHandler::get_users() {
  return agent_document("GetUsers",
                        [](const guest_agent::GuestCache& c) { return guest_users_json(c); });
}

Result<std::string> LauncherHandler::get_filesystems() {
  return agent_document("GetFilesystems",
                        [](const guest_agent::GuestCache& c) { return guest_filesystems_json(c); });
}

Status LauncherHandler::guest_ping(std::string_view, std::int32_t timeout_seconds) {
  AgentLink* a;
  events::DomainState state;
  std::string vmi_name;
  bool migrating = false;
  {
    std::lock_guard lock(mu_);
    a = agent_.get();
    state = doc_.state;
    // A migration under way: the source's VMM holds its API, the target's VM is not there yet.
    migrating = migrating_ || (migration_role_ == MigrationRole::Target && doc_.migration &&
                               !doc_.migration->end);
    vmi_name = doc_.vmi_name.empty() ? opts_.name : doc_.vmi_name;
  }
  // A paused domain answers success (manager.go:755: paused for a healthy reason).
  if (state == events::DomainState::Paused) return {};
  const auto timeout = std::chrono::seconds(timeout_seconds > 0 ? timeout_seconds : 5);
  auto r = on_service("guest-ping", [a, timeout](auto&, auto reply) {
    auto l = link_of(a, "guest-ping");
    if (!l) return reply(tl::unexpected(l.error()));
    (*l)->client()->execute("guest-ping", nullptr, timeout, std::move(reply));
  });
  if (r) return {};
  // manager.go GuestPing: an agent that does not answer while a live migration is in progress
  // is no failure (isLiveMigrationInProgress).
  if (migrating) {
    CHL_LOG_DEBUG("virt-launcher: GuestPing failed with {} during the migration; suppressed",
                  r.error().message());
    return {};
  }
  // server.go GuestPing: a Warning event, and the error to virt-probe.
  k8s_event("Warning", "GuestAgentPingFailed", "GuestAgentPing probe failed for VMI " + vmi_name);
  return tl::unexpected(r.error());
}

Result<ExecOutput> LauncherHandler::exec(std::string_view, const std::string& command,
                                         const std::vector<std::string>& args,
                                         std::int32_t timeout_seconds) {
  if (command.empty()) return fail(std::errc::invalid_argument, "Exec: no command");
  AgentLink* a;
  {
    std::lock_guard lock(mu_);
    a = agent_.get();
  }
  const auto timeout = std::chrono::seconds(timeout_seconds > 0 ? timeout_seconds : 1);
  auto r = on_service(
      "exec " + command,
      [a, command, args, timeout](auto&, auto reply) {
        auto l = link_of(a, "guest-exec");
        if (!l) return reply(tl::unexpected(l.error()));
        guest_agent::guest_exec((*l)->io(), (*l)->client(), command, args, timeout,
                                [reply = std::move(reply)](Result<guest_agent::ExecResult> e) {
                                  if (!e) return reply(tl::unexpected(e.error()));
                                  reply(Json{{"exit_code", e->exit_code}, {"out", e->out}});
                                });
      },
      timeout + std::chrono::seconds(5));  // cmd-client's deadline: timeoutSeconds + 5 s
  if (!r) return tl::unexpected(r.error());
  return ExecOutput{(*r)["exit_code"].get<int>(), (*r)["out"].get<std::string>()};
}

}  // namespace chl::kubevirt

#include "drivers/libvirt/agent_transport.hpp"

#include <libvirt/libvirt-qemu.h>

#include <boost/asio/post.hpp>
#include <cstdint>

#include "common/log.hpp"

namespace chl::libvirt {

using common::fail;
using common::Result;
using Json = nlohmann::json;

namespace {

// libvirt's error for an agent command: the agent not there (not connected, or it stopped
// answering: VIR_ERR_AGENT_UNRESPONSIVE, "QEMU guest agent is not connected" / "Guest agent is not
// responding"), or anything else (the agent's own error comes back as libvirt's
// VIR_ERR_INTERNAL_ERROR "unable to execute QEMU agent command '…': <desc>", qemu_agent.c
// qemuAgentCheckError).
tl::unexpected<common::Error> agent_fail(const std::string& what) {
  std::errc code = std::errc::protocol_error;
  if (virErrorPtr e = virGetLastError()) {
    if (e->code == VIR_ERR_AGENT_UNRESPONSIVE)
      code = std::errc::timed_out;
    else if (e->code == VIR_ERR_OPERATION_INVALID || e->code == VIR_ERR_NO_DOMAIN)
      code = std::errc::not_connected;  // the domain is not running
    else if (e->code == VIR_ERR_NO_SUPPORT || e->code == VIR_ERR_OPERATION_UNSUPPORTED ||
             e->code == VIR_ERR_ARGUMENT_UNSUPPORTED)
      code = std::errc::operation_not_supported;
  }
  return fail(code, what + ": " + libvirt_last_error());
}

// libvirt's agent timeout is in whole seconds.
int seconds_of(std::chrono::milliseconds t) {
  const auto s = (t.count() + 999) / 1000;
  return static_cast<int>(std::max<std::int64_t>(1, s));
}

// The commands KubeVirt sends through libvirt's typed API, and that API (one row each).
using TypedCall = Result<std::string> (*)(virDomainPtr, const guest_agent::TransportCommand&);
struct TypedRow {
  const char* command;
  TypedCall call;
};
const TypedRow kTyped[] = {
    // SoftRebootVMI: dom.Reboot(DOMAIN_REBOOT_GUEST_AGENT) (= guest-shutdown {"mode":"reboot"});
    // a power-down the same way with virDomainShutdownFlags(SHUTDOWN_GUEST_AGENT).
    {"guest-shutdown",
     [](virDomainPtr d, const guest_agent::TransportCommand& c) -> Result<std::string> {
       const bool reboot = c.arguments.is_object() && c.arguments.value("mode", "") == "reboot";
       const int rc = reboot ? virDomainReboot(d, VIR_DOMAIN_REBOOT_GUEST_AGENT)
                             : virDomainShutdownFlags(d, VIR_DOMAIN_SHUTDOWN_GUEST_AGENT);
       if (rc != 0) return agent_fail(reboot ? "virDomainReboot" : "virDomainShutdownFlags");
       return std::string(R"({"return":{}})");
     }},
    // setGuestTime: dom.SetTime(secs, nsecs, 0) (= guest-set-time {"time": ns}).
    {"guest-set-time",
     [](virDomainPtr d, const guest_agent::TransportCommand& c) -> Result<std::string> {
       if (!c.arguments.is_object() || !c.arguments.contains("time") ||
           !c.arguments["time"].is_number_integer())
         return fail(std::errc::invalid_argument, "guest-set-time: no time given");
       const auto ns = c.arguments["time"].get<std::int64_t>();
       if (virDomainSetTime(d, ns / 1000000000, static_cast<unsigned int>(ns % 1000000000), 0) != 0)
         return agent_fail("virDomainSetTime");
       return std::string(R"({"return":{}})");
     }},
};

}  // namespace

LibvirtAgentTransport::LibvirtAgentTransport(boost::asio::io_context& io, std::string domain_name)
    : io_(io),
      name_(std::move(domain_name)),
      self_(std::make_shared<LibvirtAgentTransport*>(this)),
      shared_(std::make_shared<Shared>()) {
  shared_->io = &io_;
  thread_ = std::thread(&LibvirtAgentTransport::worker, shared_, self_);
}

LibvirtAgentTransport::~LibvirtAgentTransport() {
  bool exited;
  {
    std::unique_lock lk(shared_->mu);
    shared_->quit = true;
    shared_->jobs.clear();
    shared_->cv.notify_all();
    // A call in progress ends by libvirt's agent timeout, or at once when the domain is gone.
    exited = shared_->cv.wait_for(lk, kLeaveWait, [this] { return shared_->exited; });
  }
  if (exited) {
    thread_.join();
  } else {
    CHL_LOG_WARN("guest agent: a libvirt call has not returned in {} s; leaving it behind",
                 kLeaveWait.count());
    thread_.detach();
  }
  *self_ = nullptr;
}

void LibvirtAgentTransport::set_domain(virDomainPtr dom) {
  {
    std::lock_guard lk(shared_->mu);
    if (dom) {
      (void)virDomainRef(dom);
      shared_->dom.reset(dom);
    } else {
      shared_->dom.reset();
    }
  }
  if (!dom)
    boost::asio::post(io_, [p = self_] {
      if (*p) (*p)->set_connected(false);
    });
}

void LibvirtAgentTransport::set_connected(bool up) {
  if (connected_ == up) return;
  connected_ = up;
  CHL_LOG_INFO("guest agent: libvirt reports the agent {} ({})", up ? "connected" : "disconnected",
               name_);
  if (on_state_) on_state_(up);
}

void LibvirtAgentTransport::watch(StateHandler on_state) {
  on_state_ = std::move(on_state);
  if (!on_state_) return;
  boost::asio::post(io_, [p = self_] {
    if (*p && (*p)->on_state_) (*p)->on_state_((*p)->connected_);
  });
}

void LibvirtAgentTransport::async_command(guest_agent::TransportCommand c, Done done) {
  {
    std::lock_guard lk(shared_->mu);
    if (!shared_->quit) {
      shared_->jobs.push_back(Job{std::move(c), std::move(done)});
      shared_->cv.notify_all();
      return;
    }
  }
  boost::asio::post(io_, [done = std::move(done)] {
    done(fail(std::errc::not_connected, "the launcher is leaving"));
  });
}

std::string LibvirtAgentTransport::describe() const {
  return "libvirt's agent channel of domain " + name_;
}

void LibvirtAgentTransport::worker(std::shared_ptr<Shared> s,
                                   std::shared_ptr<LibvirtAgentTransport*> self) {
  std::unique_lock lk(s->mu);
  for (;;) {
    s->cv.wait(lk, [&] { return s->quit || !s->jobs.empty(); });
    if (s->quit) break;
    Job job = std::move(s->jobs.front());
    s->jobs.pop_front();
    VirDomain dom;
    if (s->dom) {
      (void)virDomainRef(s->dom.get());
      dom.reset(s->dom.get());
    }
    lk.unlock();
    Result<std::string> r = dom ? run(dom.get(), job.c)
                                : fail(std::errc::not_connected, "the domain does not exist (yet)");
    dom.reset();
    lk.lock();
    if (s->quit) break;
    boost::asio::post(*s->io, [self, done = std::move(job.done), r = std::move(r)]() mutable {
      if (*self) done(std::move(r));
    });
  }
  s->exited = true;
  s->cv.notify_all();
}

Result<std::string> LibvirtAgentTransport::run(virDomainPtr dom,
                                               const guest_agent::TransportCommand& c) {
  for (const auto& row : kTyped)
    if (c.command == row.command) return row.call(dom, c);
  // KubeVirt's QemuAgentCommand(cmd, domainName): virDomainQemuAgentCommand with libvirt's
  // default timeout; ours is the command's own.
  VirString reply(virDomainQemuAgentCommand(dom, c.wire.c_str(), seconds_of(c.timeout), 0));
  if (!reply) return agent_fail("virDomainQemuAgentCommand");
  return std::string(reply.get());
}

}  // namespace chl::libvirt

#pragma once
// The guest agent through libvirt, as KubeVirt's virt-launcher reaches it: libvirt owns the
// domain's org.qemu.guest_agent.0 channel and its agent monitor (qemu_agent.c: framing,
// guest-sync before every command, its own timeout), and the launcher sends whole commands
// (guest_agent/command_transport.hpp). A table maps the few commands KubeVirt sends through
// libvirt's typed API to that API (manager.go: SoftRebootVMI -> virDomainReboot(GUEST_AGENT),
// setGuestTime -> virDomainSetTime); the rest go through virDomainQemuAgentCommand (KubeVirt's
// QemuAgentCommand: guest-ping, guest-exec, the poller's commands, guest-fsfreeze-*).
//
// The calls block, so they run on the transport's own thread, one at a time (libvirt runs one
// agent command per domain anyway), and their results are posted to the io thread. Connected is
// libvirt's agent lifecycle event (VIR_DOMAIN_EVENT_ID_AGENT_LIFECYCLE, registered by
// LibvirtDriver before the domain exists, so none is missed), as KubeVirt's channel state.
#include <libvirt/libvirt.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "drivers/libvirt/handles.hpp"
#include "guest_agent/command_transport.hpp"

namespace chl::libvirt {

class LibvirtAgentTransport final : public guest_agent::CommandTransport {
 public:
  LibvirtAgentTransport(boost::asio::io_context& io, std::string domain_name);
  ~LibvirtAgentTransport() override;
  LibvirtAgentTransport(const LibvirtAgentTransport&) = delete;
  LibvirtAgentTransport& operator=(const LibvirtAgentTransport&) = delete;

  // The domain the commands go to (a reference is taken), or none (nullptr: the domain is gone;
  // also reports disconnected). Any thread.
  void set_domain(virDomainPtr dom);
  // libvirt's agent lifecycle event, or the channel state read from the live XML (io thread).
  void set_connected(bool up);

  void watch(StateHandler on_state) override;
  void async_command(guest_agent::TransportCommand c, Done done) override;
  [[nodiscard]] std::string describe() const override;

  // How long the transport's end waits for a libvirt call in progress.
  static constexpr std::chrono::seconds kLeaveWait{15};

 private:
  struct Job {
    guest_agent::TransportCommand c;
    Done done;
  };
  // What the worker thread shares with the transport. A worker stuck in a call to a libvirtd
  // that stopped answering (the client library has no call timeout) is left behind at the
  // transport's end, with this, and posts nothing more (`quit`).
  struct Shared {
    boost::asio::io_context* io = nullptr;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Job> jobs;
    VirDomain dom;
    bool quit = false;
    bool exited = false;
  };
  static void worker(std::shared_ptr<Shared> s, std::shared_ptr<LibvirtAgentTransport*> self);
  static common::Result<std::string> run(virDomainPtr dom, const guest_agent::TransportCommand& c);

  boost::asio::io_context& io_;
  std::string name_;
  // Lives as long as handlers posted to io_ may run: they find the transport through it.
  std::shared_ptr<LibvirtAgentTransport*> self_;
  bool connected_ = false;  // io thread
  StateHandler on_state_;   // io thread
  std::shared_ptr<Shared> shared_;
  std::thread thread_;  // last: started once the rest is ready
};

}  // namespace chl::libvirt

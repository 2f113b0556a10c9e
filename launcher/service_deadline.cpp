// LauncherService: the bound on the launcher's end (issue #34). Whatever is pending, a stop
// that has not ended by its deadline is abandoned: the VMM killed, Shutoff/Destroyed
// (launcher/abandoned) published, the service torn down (docs/launcher.md, docs/qemu/lifecycle.md).
#include <chrono>
#include <string>

#include "common/log.hpp"
#include "launcher/launcher_service.hpp"

namespace chl::launcher {
using events::DomainState;

void LauncherService::bound_exit(std::chrono::seconds within, const std::string& why) {
  if (torn_down_) return;
  const auto by = std::chrono::steady_clock::now() + within;
  if (exit_by_ && *exit_by_ <= by) return;  // an earlier bound holds
  exit_by_ = by;
  exit_deadline_.expires_at(by);
  exit_deadline_.async_wait([this, within, why](boost::system::error_code ec) {
    if (ec || torn_down_) return;
    abandon("the VM has not ended " + std::to_string(within.count()) + " s after " + why);
  });
}

void LauncherService::abandon(const std::string& why) {
  if (torn_down_) return;
  CHL_LOG_ERROR("{}: killing the VMM and leaving without its final event", why);
  forced_ = true;
  stopping_ = true;
  driver_->request_stop(events::StopRequest::Forced);
  driver_->kill_vmm();
  abandoned_ = true;
  // The end, as the launcher leaves it: the VMM was killed (and dies with the launcher anyway:
  // PR_SET_PDEATHSIG on Cloud Hypervisor, AUTODESTROY on libvirt once the connection closes).
  events::DomainEvent e;
  e.type = events::DomainEventType::Stopped;
  e.detail = events::EventDetail::Destroyed;
  e.state = DomainState::Shutoff;
  e.reason = events::StateReason::Destroyed;
  e.cause = "launcher/abandoned";
  e.properties = {{"error", why}};
  bus_.publish(e);
  teardown();
}

}  // namespace chl::launcher

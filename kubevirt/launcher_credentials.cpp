// LauncherHandler's access credentials (access_credentials.hpp): started with the VM when its
// VMI has qemuGuestAgent credentials (KubeVirt starts them from SyncVMI, manager.go:1051), run
// on the service's loop over the agent's client, and each result shown in the domain as
// Spec.Metadata.KubeVirt.AccessCredential with a MODIFIED event when it changes (virt-handler
// turns it into the AccessCredentialsSynchronized condition, vm.go:595).
#include "common/log.hpp"
#include "kubevirt/launcher_handler.hpp"
#include "launcher/launcher_service.hpp"

namespace chl::kubevirt {

void LauncherHandler::start_access_credentials(launcher::LauncherService& service,
                                               const vmi::Vmi& vmi) {
  auto sources = agent_credentials(vmi);
  if (sources.empty()) return;  // nothing to watch (HandleQemuAgentAccessCredentials)
  AccessCredentialsOptions o;
  o.secret_base = opts_.secret_dir;
  o.batch = opts_.access_credentials_batch;
  o.resync = opts_.access_credentials_resync;
  std::shared_ptr<guest_agent::AgentClient> client;
  {
    std::lock_guard lock(mu_);
    if (agent_) client = agent_->client();
  }
  if (!client)
    CHL_LOG_WARN(
        "access credentials: this VM has no guest agent channel: every pass reports the agent "
        "offline");
  CHL_LOG_INFO("access credentials: {} through the guest agent, Secrets under {}", sources.size(),
               o.secret_base.string());
  auto creds = AccessCredentials::create(
      service.io(), std::move(client), std::move(sources), o,
      [this](const AccessCredentialResult& r) { on_access_credential(r); });
  creds->start();
  std::lock_guard lock(mu_);
  creds_ = std::move(creds);
}

void LauncherHandler::stop_access_credentials() {
  std::shared_ptr<AccessCredentials> gone;
  {
    std::lock_guard lock(mu_);
    gone = std::move(creds_);
  }
  if (gone) gone->stop();
}

void LauncherHandler::on_access_credential(const AccessCredentialResult& r) {
  std::lock_guard lock(mu_);
  if (phase_ == Phase::Finished) return;
  if (doc_.access_credential && doc_.access_credential->succeeded == r.succeeded &&
      doc_.access_credential->message == r.message)
    return;
  doc_.access_credential = DomainDocument::AccessCredential{r.succeeded, r.message};
  if (notify_ && added_)
    notify_->send_domain_event(to_domain_json(doc_).dump(), DomainEventType::Modified);
}

}  // namespace chl::kubevirt

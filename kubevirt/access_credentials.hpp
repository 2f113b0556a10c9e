#pragma once
// Access credentials through the guest agent, as KubeVirt's virt-launcher propagates them
// (pkg/virt-launcher/virtwrap/access-credentials/access_credentials.go, KubeVirt d923fdb):
// spec.accessCredentials entries with propagationMethod.qemuGuestAgent name Secrets that
// virt-controller mounts at <private dir>/secret/<secretName>-access-cred/ (pkg/config/config.go:
// SecretSourceDir = /var/run/kubevirt-private/secret; access_credentials.go:124 getSecretDir).
// SSH: every file not named "..*" of the Secret, every non-empty trimmed line a key, for each of
// the entry's users; password: the file name is the user, its trimmed content the password.
//
// The directories are watched (inotify on the launcher's loop, never blocking). As KubeVirt's
// watchSecrets (:440-486): a change is applied at the next batch tick (15 s), everything again on
// a forced resync (5 min), and a pass that failed is retried at the next tick or change. A pass:
// guest-ping (else "Guest agent is offline"), then per user `guest-ssh-add-authorized-keys
// {username, keys, reset: true}` (libvirt's virDomainAuthorizedSSHKeysSet with flags 0), then
// `guest-set-user-password {username, password (base64), crypted: false}`
// (virDomainSetUserPassword). The result is KubeVirt's AccessCredentialMetadata {Succeeded,
// Message}, handed to on_result.
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "guest_agent/agent_client.hpp"
#include "vmi/vmi.hpp"

namespace chl::kubevirt {

// One spec.accessCredentials[] entry the agent propagates.
struct CredentialSource {
  enum class Kind { SshPublicKey, UserPassword };
  Kind kind = Kind::SshPublicKey;
  std::string secret;              // secretName
  std::vector<std::string> users;  // SSH: qemuGuestAgent.users
};

// The entries of `vmi` with propagationMethod.qemuGuestAgent and a Secret (getSecretDirs).
std::vector<CredentialSource> agent_credentials(const vmi::Vmi& vmi);

// <base>/<secret>-access-cred (access_credentials.go:124).
std::filesystem::path secret_dir(const std::filesystem::path& base, const std::string& secret);

// What the Secrets hold now, and what was wrong reading them (each message names the Secret, and
// the file and line of a malformed key).
struct CredentialSet {
  std::map<std::string, std::vector<std::string>> keys;  // user -> its Secrets' keys, in order
  std::map<std::string, std::string> passwords;          // user -> password
  std::vector<std::string> errors;
};
CredentialSet read_credentials(const std::filesystem::path& base,
                               const std::vector<CredentialSource>& sources);

// api.AccessCredentialMetadata (virtwrap/api/schema.go:441).
struct AccessCredentialResult {
  bool succeeded = false;
  std::string message;
  bool operator==(const AccessCredentialResult&) const = default;
};

struct AccessCredentialsOptions {
  std::filesystem::path secret_base = "/var/run/kubevirt-private/secret";
  std::chrono::milliseconds batch{15000};  // resyncCheckIntervalSeconds (access_credentials.go:91)
  std::chrono::milliseconds resync{300000};  // resyncInterval (:449)
  std::chrono::milliseconds command_timeout{10000};
};

struct AccessCredentialStats {
  std::uint64_t passes = 0;   // passes begun
  std::uint64_t applied = 0;  // passes that succeeded
  std::uint64_t changes = 0;  // inotify events seen
};

class AccessCredentials : public std::enable_shared_from_this<AccessCredentials> {
 public:
  using OnResult = std::function<void(const AccessCredentialResult&)>;  // loop thread

  // Loop thread (or before the loop runs). `agent` may be null (no agent on this path): every
  // pass then says the agent is offline.
  static std::shared_ptr<AccessCredentials> create(boost::asio::io_context& io,
                                                   std::shared_ptr<guest_agent::AgentClient> agent,
                                                   std::vector<CredentialSource> sources,
                                                   AccessCredentialsOptions options,
                                                   OnResult on_result);
  ~AccessCredentials();
  AccessCredentials(const AccessCredentials&) = delete;
  AccessCredentials& operator=(const AccessCredentials&) = delete;

  void start();
  void stop();
  [[nodiscard]] const AccessCredentialStats& stats() const { return stats_; }

 private:
  AccessCredentials(boost::asio::io_context& io, std::shared_ptr<guest_agent::AgentClient> agent,
                    std::vector<CredentialSource> sources, AccessCredentialsOptions options,
                    OnResult on_result);
  void watch_dirs();
  void read_events();
  void arm_batch();
  void arm_resync();
  void maybe_pass();
  void pass();
  void apply(std::shared_ptr<CredentialSet> set, std::size_t user_index, std::size_t pass_gen);
  void apply_passwords(std::shared_ptr<CredentialSet> set, std::size_t index, std::size_t pass_gen);
  void finish_pass();
  void report(bool succeeded, std::string message);

  boost::asio::io_context& io_;
  std::shared_ptr<guest_agent::AgentClient> agent_;
  std::vector<CredentialSource> sources_;
  AccessCredentialsOptions opts_;
  OnResult on_result_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> events_;
  std::map<int, std::filesystem::path> watches_;  // watch descriptor -> directory
  std::vector<char> ebuf_;
  boost::asio::steady_timer batch_;
  boost::asio::steady_timer resync_;
  bool running_ = false;
  bool reload_ = true;   // watchSecrets' `reload`: the next tick or change runs a pass
  bool changed_ = true;  // `fileChangeDetected`
  bool in_pass_ = false;
  bool pass_failed_ = false;                         // this pass reported an error (`reportedErr`)
  std::size_t gen_ = 0;                              // bumps on stop: late agent replies leave
  AccessCredentialResult last_{true, "(none yet)"};  // the last result reported, for the log
  AccessCredentialStats stats_;
};

}  // namespace chl::kubevirt

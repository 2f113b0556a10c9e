// Access credentials through the guest agent (access_credentials.hpp; KubeVirt's
// pkg/virt-launcher/virtwrap/access-credentials/access_credentials.go, cited by line below).
#include "kubevirt/access_credentials.hpp"

#include <sys/inotify.h>

#include <algorithm>
#include <array>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "common/log.hpp"
#include "guest_agent/exec.hpp"

namespace chl::kubevirt {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n\v\f");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n\v\f");
  return std::string(s.substr(b, e - b + 1));
}

std::string encode_base64(std::string_view in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const auto n = (std::uint32_t(std::uint8_t(in[i])) << 16) |
                   (std::uint32_t(std::uint8_t(in[i + 1])) << 8) | std::uint8_t(in[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += kAlphabet[(n >> k) & 63];
  }
  if (i < in.size()) {
    std::uint32_t n = std::uint32_t(std::uint8_t(in[i])) << 16;
    if (i + 1 < in.size()) n |= std::uint32_t(std::uint8_t(in[i + 1])) << 8;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// An authorized_keys line: [options] <type> <base64 blob> [comment], the blob's first field
// naming the same type (RFC 4253 6.6). KubeVirt forwards any non-empty line and qemu-ga refuses
// only a '#' line (qga/commands-posix-ssh.c check_openssh_pub_key) — one bad line then fails
// the user's whole command; we name the line instead.
bool is_public_key(const std::string& line) {
  if (line.empty() || line[0] == '#') return false;
  std::istringstream in(line);
  std::vector<std::string> tokens;
  for (std::string t; in >> t;) tokens.push_back(t);
  for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
    const std::string& type = tokens[i];
    if (type.rfind("ssh-", 0) != 0 && type.rfind("ecdsa-sha2-", 0) != 0 &&
        type.rfind("sk-", 0) != 0)
      continue;
    std::string blob;
    if (!guest_agent::decode_base64(tokens[i + 1], blob) || blob.size() < 4) return false;
    const std::size_t n = (std::size_t(std::uint8_t(blob[0])) << 24) |
                          (std::size_t(std::uint8_t(blob[1])) << 16) |
                          (std::size_t(std::uint8_t(blob[2])) << 8) | std::uint8_t(blob[3]);
    return n == type.size() && blob.size() >= 4 + n && blob.compare(4, n, type) == 0;
  }
  return false;
}

// The Secret's files as the kubelet's atomic writer leaves them: <key> -> ..data/<key>, with
// "..data" and "..<timestamp>" beside them (skipped: access_credentials.go:662, 691).
common::Result<std::vector<fs::path>> secret_files(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("..", 0) == 0) continue;
    std::error_code sec;
    if (fs::is_directory(it->symlink_status(sec)) || sec) continue;
    files.push_back(it->path());
  }
  if (ec)
    return common::fail(
        ec, "error occurred while reading the list of secrets files from the base directory " +
                dir.string());
  std::sort(files.begin(), files.end());
  return files;
}

common::Result<std::string> read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in)
    return common::fail(
        std::errc::io_error,
        "error occurred while reading the access credential secret file [" + p.string() + "]");
  std::ostringstream s;
  s << in.rdbuf();  // an empty file sets s's failbit: an empty text
  return s.str();
}

}  // namespace

std::vector<CredentialSource> agent_credentials(const vmi::Vmi& vmi) {
  std::vector<CredentialSource> out;
  for (const auto& c : vmi.spec.access_credentials) {
    if (!c.qemu_guest_agent || c.secret_name.empty() || c.ssh_public_key == c.user_password)
      continue;
    CredentialSource s;
    s.kind = c.ssh_public_key ? CredentialSource::Kind::SshPublicKey
                              : CredentialSource::Kind::UserPassword;
    s.secret = c.secret_name;
    s.users = c.users;
    out.push_back(std::move(s));
  }
  return out;
}

fs::path secret_dir(const fs::path& base, const std::string& secret) {
  return base / (secret + "-access-cred");
}

CredentialSet read_credentials(const fs::path& base, const std::vector<CredentialSource>& sources) {
  CredentialSet set;
  std::map<std::string, std::vector<std::string>>
      secret_keys;  // secretMap (access_credentials.go:617)
  for (const auto& s : sources) {
    const fs::path dir = secret_dir(base, s.secret);
    const bool ssh = s.kind == CredentialSource::Kind::SshPublicKey;
    auto files = secret_files(dir);
    if (!files) {
      set.errors.push_back("Secret " + s.secret + ": " + files.error().message());
      continue;
    }
    std::vector<std::string> keys;
    bool bad = false;
    std::size_t passwords = 0;
    for (const auto& f : *files) {
      auto text = read_text(f);
      if (!text) {
        set.errors.push_back("Secret " + s.secret + ": " + text.error().message());
        bad = true;
        continue;
      }
      if (!ssh) {
        // readAndAddPasswordsFromDirectory (:682): the file name is the user.
        std::string pw = trim(*text);
        if (pw.empty()) continue;
        set.passwords[f.filename().string()] = std::move(pw);
        ++passwords;
        continue;
      }
      std::istringstream lines(*text);
      std::size_t n = 0;
      for (std::string line; std::getline(lines, line);) {
        ++n;
        line = trim(line);
        if (line.empty()) continue;
        if (!is_public_key(line)) {
          set.errors.push_back("Secret " + s.secret + ": key " + f.filename().string() + " line " +
                               std::to_string(n) + " (" + f.string() +
                               "): not an OpenSSH public key");
          bad = true;
          continue;
        }
        keys.push_back(std::move(line));
      }
    }
    if (!ssh) {
      if (passwords == 0 && !bad)
        set.errors.push_back("Secret " + s.secret + " (" + dir.string() +
                             "): no user password in it (a key named after the user)");
      continue;
    }
    if (keys.empty() && !bad)
      set.errors.push_back("Secret " + s.secret + " (" + dir.string() +
                           "): no SSH public key in it");
    if (!bad && !keys.empty()) secret_keys[s.secret] = std::move(keys);
    for (const auto& u : s.users) set.keys[u];  // the user is named, keys or not
  }
  // userSSHMap (:632): every user gets the keys of all its Secrets, in the VMI's order.
  for (const auto& s : sources) {
    if (s.kind != CredentialSource::Kind::SshPublicKey) continue;
    auto it = secret_keys.find(s.secret);
    if (it == secret_keys.end()) continue;
    for (const auto& u : s.users) {
      auto& k = set.keys[u];
      k.insert(k.end(), it->second.begin(), it->second.end());
    }
  }
  return set;
}

std::shared_ptr<AccessCredentials> AccessCredentials::create(
    boost::asio::io_context& io, std::shared_ptr<guest_agent::AgentClient> agent,
    std::vector<CredentialSource> sources, AccessCredentialsOptions options, OnResult on_result) {
  return std::shared_ptr<AccessCredentials>(new AccessCredentials(
      io, std::move(agent), std::move(sources), std::move(options), std::move(on_result)));
}

AccessCredentials::AccessCredentials(boost::asio::io_context& io,
                                     std::shared_ptr<guest_agent::AgentClient> agent,
                                     std::vector<CredentialSource> sources,
                                     AccessCredentialsOptions options, OnResult on_result)
    : io_(io),
      agent_(std::move(agent)),
      sources_(std::move(sources)),
      opts_(std::move(options)),
      on_result_(std::move(on_result)),
      ebuf_(16 * 1024),
      batch_(io),
      resync_(io) {}

AccessCredentials::~AccessCredentials() { stop(); }

void AccessCredentials::start() {
  if (running_) return;
  running_ = true;
  const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {
    // Without a watch, changes are still picked up by the forced resync.
    CHL_LOG_WARN("access credentials: inotify_init1: {}; Secret changes wait for the {} s resync",
                 std::strerror(errno), opts_.resync.count() / 1000);
  } else {
    events_ = std::make_unique<boost::asio::posix::stream_descriptor>(io_, fd);  // owns fd
    watch_dirs();
    read_events();
  }
  arm_batch();
  arm_resync();
}

void AccessCredentials::stop() {
  if (!running_) return;
  running_ = false;
  in_pass_ = false;  // a pass under way is abandoned: its replies find gen_ moved on
  ++gen_;
  batch_.cancel();
  resync_.cancel();
  if (events_) {
    boost::system::error_code ec;
    events_->close(ec);  // closing the inotify fd removes its watches
    events_.reset();
  }
  watches_.clear();
}

// fsnotify's Add mask (KubeVirt's watcher.Add(dir), access_credentials.go:577). A directory
// missing now is watched once it is there (tried again before each pass).
void AccessCredentials::watch_dirs() {
  if (!events_) return;
  constexpr std::uint32_t kMask = IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_ATTRIB | IN_MODIFY |
                                  IN_MOVE_SELF | IN_DELETE | IN_DELETE_SELF;
  std::set<fs::path> watched;
  for (const auto& [wd, dir] : watches_) watched.insert(dir);
  for (const auto& s : sources_) {
    const fs::path dir = secret_dir(opts_.secret_base, s.secret);
    if (watched.count(dir)) continue;
    const int wd = ::inotify_add_watch(events_->native_handle(), dir.c_str(), kMask);
    if (wd < 0) {
      CHL_LOG_DEBUG("access credentials: not watching {} yet: {}", dir.string(),
                    std::strerror(errno));
      continue;
    }
    watches_[wd] = dir;
    watched.insert(dir);
  }
}

void AccessCredentials::read_events() {
  if (!events_) return;
  events_->async_read_some(
      boost::asio::buffer(ebuf_),
      [self = weak_from_this(), gen = gen_](boost::system::error_code ec, std::size_t n) {
        auto me = self.lock();
        if (!me || gen != me->gen_ || ec == boost::asio::error::operation_aborted) return;
        if (ec) {
          CHL_LOG_WARN("access credentials: reading inotify events: {}", ec.message());
          return;
        }
        for (std::size_t off = 0; off + sizeof(inotify_event) <= n;) {
          inotify_event ev{};
          std::memcpy(&ev, me->ebuf_.data() + off, sizeof ev);
          if (ev.mask & IN_IGNORED)
            me->watches_.erase(ev.wd);  // the directory went: watched again later
          off += sizeof(inotify_event) + ev.len;
        }
        ++me->stats_.changes;
        // `case <-l.watcher.Events: fileChangeDetected = true` — and a pending reload runs at once.
        me->changed_ = true;
        if (me->reload_) me->maybe_pass();
        me->read_events();
      });
}

void AccessCredentials::arm_batch() {
  batch_.expires_after(opts_.batch);
  batch_.async_wait([self = weak_from_this(), gen = gen_](boost::system::error_code ec) {
    auto me = self.lock();
    if (!me || ec || gen != me->gen_) return;
    if (me->changed_) me->reload_ = true;  // "Reloading access credentials because secret changed"
    if (me->reload_) me->maybe_pass();
    me->arm_batch();
  });
}

void AccessCredentials::arm_resync() {
  resync_.expires_after(opts_.resync);
  resync_.async_wait([self = weak_from_this(), gen = gen_](boost::system::error_code ec) {
    auto me = self.lock();
    if (!me || ec || gen != me->gen_) return;
    CHL_LOG_INFO("access credentials: resyncing (recurring resync period)");
    me->reload_ = true;
    me->maybe_pass();
    me->arm_resync();
  });
}

void AccessCredentials::maybe_pass() {
  if (in_pass_) return;  // the pass under way ends with reload_ as it found things
  changed_ = false;
  pass();
}

void AccessCredentials::report(bool succeeded, std::string message) {
  if (!succeeded) pass_failed_ = true;
  AccessCredentialResult r{succeeded, std::move(message)};
  // Logged when it changes (an agent-less VM would say "offline" at every batch tick).
  if (!(r == last_)) {
    if (succeeded)
      CHL_LOG_INFO("access credentials: applied through the guest agent");
    else
      CHL_LOG_WARN("access credentials: {}", r.message);
    last_ = r;
  }
  if (on_result_) on_result_(r);
}

// reloadCredentialFiles (access_credentials.go:488-553), one agent command at a time.
void AccessCredentials::pass() {
  in_pass_ = true;
  pass_failed_ = false;
  ++stats_.passes;
  watch_dirs();
  const std::size_t gen = gen_;
  auto done_ping = [self = weak_from_this(), gen](common::Result<Json> r) {
    auto me = self.lock();
    if (!me || gen != me->gen_) return;
    if (!r) {
      me->report(false, "Guest agent is offline");
      me->reload_ = true;
      me->in_pass_ = false;
      return;
    }
    auto set =
        std::make_shared<CredentialSet>(read_credentials(me->opts_.secret_base, me->sources_));
    // Step 1: a Secret that could not be read is reported and retried (:502-511).
    for (const auto& e : set->errors) me->report(false, e);
    me->apply(set, 0, gen);
  };
  if (!agent_) {
    boost::asio::post(io_, [done_ping] {
      done_ping(common::fail(std::errc::not_connected, "this VM has no guest agent channel"));
    });
    return;
  }
  agent_->execute("guest-ping", nullptr, opts_.command_timeout, done_ping);
}

// Step 2: the authorized keys of each user (:514-534).
void AccessCredentials::apply(std::shared_ptr<CredentialSet> set, std::size_t user_index,
                              std::size_t gen) {
  auto it = set->keys.begin();
  std::advance(it, std::min(user_index, set->keys.size()));
  // A user whose Secrets gave no key (reported above) is left as the guest has it: setting an
  // empty list with reset would wipe its authorized_keys.
  while (it != set->keys.end() && it->second.empty()) {
    ++it;
    ++user_index;
  }
  if (it == set->keys.end()) return apply_passwords(set, 0, gen);
  const std::string user = it->first;
  Json args = {{"username", user}, {"keys", it->second}, {"reset", true}};
  agent_->execute(
      "guest-ssh-add-authorized-keys", std::move(args), opts_.command_timeout,
      [self = weak_from_this(), gen, set, user_index, user](common::Result<Json> r) {
        auto me = self.lock();
        if (!me || gen != me->gen_) return;
        if (!r)
          me->report(false, "Error encountered writing ssh pub key access credentials for user [" +
                                user + "]: " + r.error().message());
        me->apply(set, user_index + 1, gen);
      });
}

// Step 3: the passwords (:537-547).
void AccessCredentials::apply_passwords(std::shared_ptr<CredentialSet> set, std::size_t index,
                                        std::size_t gen) {
  if (index >= set->passwords.size()) return finish_pass();
  auto it = set->passwords.begin();
  std::advance(it, index);
  const std::string user = it->first;
  // libvirt's qemuAgentSetUserPassword: the password base64-encoded, crypted false.
  Json args = {{"username", user}, {"password", encode_base64(it->second)}, {"crypted", false}};
  agent_->execute("guest-set-user-password", std::move(args), opts_.command_timeout,
                  [self = weak_from_this(), gen, set, index, user](common::Result<Json> r) {
                    auto me = self.lock();
                    if (!me || gen != me->gen_) return;
                    if (!r)
                      me->report(false, "Error encountered setting password for user [" + user +
                                            "]: " + r.error().message());
                    me->apply_passwords(set, index + 1, gen);
                  });
}

void AccessCredentials::finish_pass() {
  if (!pass_failed_) {
    ++stats_.applied;
    report(true, "");
  }
  reload_ = pass_failed_;  // a failed pass is retried at the next tick or change
  in_pass_ = false;
}

}  // namespace chl::kubevirt

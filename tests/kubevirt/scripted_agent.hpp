#pragma once
// A scripted stand-in for the guest's qemu-ga, on a Unix socket (what the VMM double bridges the
// guest's vsock port to: VMM_DOUBLE_VSOCK_LISTEN). It is for the commands a real host qemu-ga
// must never run on the host (SSH keys, passwords): it records every command and checks their
// arguments as qemu-ga does (QEMU 7.2, qga/commands-posix-ssh.c, qga/commands-posix.c,
// qga/qapi-schema.json), and keeps a pretend guest's authorized_keys and passwords. Serves one
// client at a time, as qemu-ga in listen mode. Header-only, for tests.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.hpp"
#include "guest_agent/exec.hpp"

namespace chl::test {

class ScriptedAgent {
 public:
  explicit ScriptedAgent(std::filesystem::path socket) : path_(std::move(socket)) {
    listen_ = common::UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path_.c_str());
    std::filesystem::remove(path_);
    ok_ = listen_.valid() &&
          ::bind(listen_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
          ::listen(listen_.get(), 4) == 0 && ::pipe2(stop_, O_CLOEXEC) == 0;
    if (ok_) thread_ = std::thread([this] { serve(); });
  }
  ~ScriptedAgent() { stop(); }
  ScriptedAgent(const ScriptedAgent&) = delete;
  ScriptedAgent& operator=(const ScriptedAgent&) = delete;

  [[nodiscard]] bool ok() const { return ok_; }
  // The agent goes: the listener and the connection close.
  void stop() {
    if (!thread_.joinable()) return;
    (void)!::write(stop_[1], "x", 1);
    thread_.join();
    ::close(stop_[0]);
    ::close(stop_[1]);
    std::filesystem::remove(path_);
  }

  std::vector<nlohmann::json> commands() const {
    std::lock_guard l(mu_);
    return commands_;
  }
  std::vector<nlohmann::json> commands(const std::string& name) const {
    std::vector<nlohmann::json> out;
    for (auto& c : commands())
      if (c.value("execute", "") == name) out.push_back(c);
    return out;
  }
  std::map<std::string, std::vector<std::string>> authorized_keys() const {
    std::lock_guard l(mu_);
    return keys_;
  }
  std::map<std::string, std::string> passwords() const {
    std::lock_guard l(mu_);
    return passwords_;
  }

 private:
  using Json = nlohmann::json;

  static Json error(const std::string& cls, const std::string& desc) {
    return Json{{"error", {{"class", cls}, {"desc", desc}}}};
  }

  // One command, as qemu-ga answers it.
  Json answer(const Json& cmd) {
    const std::string name = cmd.value("execute", "");
    const Json args = cmd.value("arguments", Json::object());
    std::lock_guard l(mu_);
    commands_.push_back(cmd);
    if (name == "guest-sync-delimited" || name == "guest-sync")
      return {{"return", args.value("id", 0)}};
    if (name == "guest-ping") return {{"return", Json::object()}};
    if (name == "guest-info") {
      Json cmds = Json::array();
      for (const char* c :
           {"guest-ping", "guest-info", "guest-sync-delimited", "guest-exec", "guest-exec-status",
            "guest-ssh-add-authorized-keys", "guest-ssh-get-authorized-keys",
            "guest-ssh-remove-authorized-keys", "guest-set-user-password"})
        cmds.push_back({{"name", c}, {"enabled", true}, {"success-response", true}});
      return {{"return", {{"version", "7.2.0"}, {"supported_commands", cmds}}}};
    }
    if (name == "guest-ssh-add-authorized-keys" || name == "guest-ssh-get-authorized-keys") {
      // QAPI: username (str) and, to add, keys (['str']) are mandatory; reset optional.
      if (!args.contains("username") || !args["username"].is_string())
        return error("GenericError", "Parameter 'username' is missing");
      const std::string user = args["username"];
      if (!users_.count(user))
        return error("GenericError", "failed to get passwd entry for user '" + user + "'");
      if (name == "guest-ssh-get-authorized-keys") return {{"return", {{"keys", keys_[user]}}}};
      if (!args.contains("keys") || !args["keys"].is_array())
        return error("GenericError", "Parameter 'keys' is missing");
      if (args.contains("reset") && !args["reset"].is_boolean())
        return error("GenericError", "Parameter 'reset' expects a boolean");
      std::vector<std::string> keys;
      for (const auto& k : args["keys"]) {
        // check_openssh_pub_key: not empty, not a comment, one line.
        if (!k.is_string()) return error("GenericError", "Parameter 'keys' expects a string list");
        const std::string s = k;
        if (s.empty() || s[0] == '#' || s.find('\n') != std::string::npos)
          return error("GenericError", "invalid OpenSSH public key: '" + s + "'");
        keys.push_back(s);
      }
      auto& have = keys_[user];
      if (args.value("reset", false)) have.clear();
      for (auto& k : keys)
        if (std::find(have.begin(), have.end(), k) == have.end()) have.push_back(k);
      return {{"return", Json::object()}};
    }
    if (name == "guest-set-user-password") {
      for (const char* p : {"username", "password", "crypted"})
        if (!args.contains(p))
          return error("GenericError", std::string("Parameter '") + p + "' is missing");
      if (!args["crypted"].is_boolean())
        return error("GenericError", "Parameter 'crypted' expects a boolean");
      std::string pw;
      if (!args["password"].is_string() ||
          !guest_agent::decode_base64(args["password"].get<std::string>(), pw))
        return error("GenericError", "Invalid base64 data");
      const std::string user = args["username"];
      if (!users_.count(user))
        return error("GenericError", "child process has failed to set user password");
      passwords_[user] = pw;
      return {{"return", Json::object()}};
    }
    if (name == "guest-exec") {
      const std::string path = args.value("path", "");
      std::string out;
      int code = 0;
      if (path == "/bin/echo") {
        for (const auto& a : args.value("arg", Json::array()))
          out += (out.empty() ? "" : " ") + a.get<std::string>();
        out += "\n";
      } else if (path == "/bin/false") {
        code = 1;
      } else if (path != "/bin/true") {
        return error("GenericError",
                     "Guest agent command failed, error was 'Failed to execute child process “" +
                         path + "” (No such file or directory)'");
      }
      const int pid = next_pid_++;
      exec_[pid] = {code, out};
      return {{"return", {{"pid", pid}}}};
    }
    if (name == "guest-exec-status") {
      auto it = exec_.find(args.value("pid", -1));
      if (it == exec_.end()) return error("GenericError", "Invalid parameter 'pid'");
      return {{"return",
               {{"exited", true},
                {"exitcode", it->second.first},
                {"out-data", base64(it->second.second)}}}};
    }
    return error("CommandNotFound", "The command " + name + " has not been found");
  }

 public:
  static std::string base64(const std::string& in) {
    static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string o;
    std::size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
      unsigned n =
          (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8 | (unsigned char)in[i + 2];
      o += {t[n >> 18 & 63], t[n >> 12 & 63], t[n >> 6 & 63], t[n & 63]};
    }
    if (i + 1 == in.size()) {
      unsigned n = (unsigned char)in[i] << 16;
      o += {t[n >> 18 & 63], t[n >> 12 & 63], '=', '='};
    } else if (i + 2 == in.size()) {
      unsigned n = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8;
      o += {t[n >> 18 & 63], t[n >> 12 & 63], t[n >> 6 & 63], '='};
    }
    return o;
  }

 private:
  // Complete JSON objects out of `buf` (0xFF resets, as qemu-ga's parser after a delimiter).
  std::vector<Json> frames(std::string& buf) {
    std::vector<Json> out;
    std::size_t start = std::string::npos;
    int depth = 0;
    bool in_str = false, esc = false;
    std::size_t consumed = 0;
    for (std::size_t i = 0; i < buf.size(); ++i) {
      const char c = buf[i];
      if (static_cast<unsigned char>(c) == 0xFF) {
        depth = 0, in_str = false, start = std::string::npos, consumed = i + 1;
        continue;
      }
      if (in_str) {
        if (esc)
          esc = false;
        else if (c == '\\')
          esc = true;
        else if (c == '"')
          in_str = false;
        continue;
      }
      if (c == '"')
        in_str = true;
      else if (c == '{') {
        if (depth++ == 0) start = i;
      } else if (c == '}' && depth > 0 && --depth == 0) {
        out.push_back(Json::parse(buf.substr(start, i + 1 - start), nullptr, false));
        consumed = i + 1;
      } else if (depth == 0) {
        consumed = i + 1;
      }
    }
    buf.erase(0, consumed);
    return out;
  }

  void serve() {
    common::UniqueFd client;
    std::string buf;
    for (;;) {
      pollfd p[3] = {{stop_[0], POLLIN, 0}, {listen_.get(), POLLIN, 0}, {client.get(), POLLIN, 0}};
      if (::poll(p, client.valid() ? 3 : 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (p[0].revents) return;  // stop(): client and listener close with this thread
      if (!client.valid() && (p[1].revents & POLLIN)) {
        client = common::UniqueFd(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        buf.clear();
        continue;
      }
      if (client.valid() && p[2].revents) {
        char b[4096];
        const ssize_t n = ::read(client.get(), b, sizeof b);
        if (n <= 0) {
          client = common::UniqueFd();
          continue;
        }
        buf.append(b, static_cast<std::size_t>(n));
        for (const auto& cmd : frames(buf)) {
          if (cmd.is_discarded()) continue;
          std::string reply = answer(cmd).dump() + "\n";
          // guest-sync-delimited's answer is preceded by 0xFF (qga/main.c).
          if (cmd.value("execute", "") == "guest-sync-delimited")
            reply.insert(reply.begin(), '\xff');
          (void)!::write(client.get(), reply.data(), reply.size());
        }
      }
    }
  }

  std::filesystem::path path_;
  common::UniqueFd listen_;
  int stop_[2] = {-1, -1};
  bool ok_ = false;
  std::thread thread_;
  mutable std::mutex mu_;
  std::set<std::string> users_{"root", "fedora"};  // the pretend guest's /etc/passwd
  std::vector<Json> commands_;
  std::map<std::string, std::vector<std::string>> keys_;
  std::map<std::string, std::string> passwords_;
  std::map<int, std::pair<int, std::string>> exec_;
  int next_pid_ = 1000;
};

}  // namespace chl::test

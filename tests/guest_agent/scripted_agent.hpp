#pragma once
// A scripted stand-in of qemu-ga on a Unix socket, for what a REAL qemu-ga on the host must never
// do (tests/guest_agent/host_qemu_ga.hpp blocks them): guest-fsfreeze-freeze/-thaw, guest-set-time,
// guest-shutdown. It speaks qemu-ga's protocol as qemu-ga 7.2 does (qga/main.c,
// qga/commands-posix.c): one client at a time, newline-delimited JSON, guest-sync-delimited
// answered with 0xFF before the reply, errors as {"error":{"class","desc"}}, and nothing at all
// after a guest-shutdown that worked. It keeps the freeze state and records every command (name and
// arguments) in order.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.hpp"
#include "common/unix_socket.hpp"

namespace chl::test {

class ScriptedAgent {
 public:
  struct Call {
    std::string command;
    nlohmann::json arguments;
  };

  explicit ScriptedAgent(const std::filesystem::path& socket) {
    auto l = common::listen_unix(socket);
    if (!l) throw std::runtime_error("scripted agent: " + l.error().message());
    listener_ = std::move(*l);
    thread_ = std::thread([this] { serve(); });
  }
  ~ScriptedAgent() {
    stop_ = true;
    thread_.join();
  }
  ScriptedAgent(const ScriptedAgent&) = delete;
  ScriptedAgent& operator=(const ScriptedAgent&) = delete;

  std::vector<Call> calls() const {
    std::lock_guard l(mu_);
    return calls_;
  }
  // The calls of `command` so far.
  std::vector<Call> calls_of(const std::string& command) const {
    std::vector<Call> out;
    for (auto& c : calls())
      if (c.command == command) out.push_back(c);
    return out;
  }
  std::string freeze_state() const {
    std::lock_guard l(mu_);
    return frozen_ ? "frozen" : "thawed";
  }
  int connections() const { return connections_.load(); }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{listener_.get(), POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      common::UniqueFd c(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c) continue;
      ++connections_;
      serve_one(c.get());
    }
  }
  void serve_one(int fd) {
    std::string buf;
    while (!stop_) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char b[4096];
      const ssize_t n = ::read(fd, b, sizeof b);
      if (n <= 0) return;
      buf.append(b, static_cast<std::size_t>(n));
      for (auto nl = buf.find('\n'); nl != std::string::npos; nl = buf.find('\n')) {
        std::string line = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        while (!line.empty() && static_cast<unsigned char>(line[0]) == 0xFF) line.erase(0, 1);
        if (line.empty()) continue;
        const std::string reply = answer(line);
        if (!reply.empty() && ::write(fd, reply.data(), reply.size()) < 0) return;
      }
    }
  }
  std::string answer(const std::string& line) {
    using Json = nlohmann::json;
    const Json j = Json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("execute"))
      return R"({"error":{"class":"GenericError","desc":"JSON parse error"}})"
             "\n";
    const std::string cmd = j["execute"];
    const Json args = j.value("arguments", Json());
    std::lock_guard l(mu_);
    calls_.push_back({cmd, args});
    auto ok = [](const Json& v) { return Json{{"return", v}}.dump() + "\n"; };
    if (cmd == "guest-sync-delimited") return "\xff" + ok(args.value("id", 0));
    if (cmd == "guest-ping") return ok(Json::object());
    if (cmd == "guest-info") {
      Json list = Json::array();
      for (const char* c :
           {"guest-ping", "guest-get-time", "guest-info", "guest-shutdown",
            "guest-network-get-interfaces", "guest-get-fsinfo", "guest-get-host-name",
            "guest-get-users", "guest-get-timezone", "guest-get-osinfo", "guest-set-time",
            "guest-fsfreeze-status", "guest-fsfreeze-freeze", "guest-fsfreeze-thaw"})
        list.push_back({{"name", c}, {"enabled", true}, {"success-response", true}});
      return ok({{"version", "7.2.0-scripted"}, {"supported_commands", list}});
    }
    if (cmd == "guest-get-osinfo")
      return ok({{"id", "scripted"},
                 {"name", "Scripted"},
                 {"pretty-name", "Scripted agent"},
                 {"kernel-release", "6.1"},
                 {"machine", "x86_64"}});
    if (cmd == "guest-get-host-name") return ok({{"host-name", "scripted"}});
    if (cmd == "guest-get-timezone") return ok({{"zone", "UTC"}, {"offset", 0}});
    if (cmd == "guest-get-users" || cmd == "guest-get-fsinfo" ||
        cmd == "guest-network-get-interfaces")
      return ok(Json::array());
    if (cmd == "guest-fsfreeze-status") return ok(frozen_ ? "frozen" : "thawed");
    if (cmd == "guest-fsfreeze-freeze") {
      if (frozen_)  // qemu-ga: "Command guest-fsfreeze-freeze has been disabled" while frozen
        return R"({"error":{"class":"GenericError","desc":"Command guest-fsfreeze-freeze has been disabled: the agent is in frozen state"}})"
               "\n";
      frozen_ = true;
      return ok(1);
    }
    if (cmd == "guest-fsfreeze-thaw") {
      const int n = frozen_ ? 1 : 0;
      frozen_ = false;
      return ok(n);
    }
    if (cmd == "guest-set-time") return ok(Json::object());
    if (cmd == "guest-shutdown") return "";  // success: no reply (qga/qapi-schema.json)
    return Json{{"error",
                 {{"class", "CommandNotFound"},
                  {"desc", "The command " + cmd + " has not been found"}}}}
               .dump() +
           "\n";
  }

  common::UniqueFd listener_;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  mutable std::mutex mu_;
  std::vector<Call> calls_;
  bool frozen_ = false;
  std::thread thread_;
};

}  // namespace chl::test

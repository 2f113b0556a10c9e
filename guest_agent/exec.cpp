#include "guest_agent/exec.hpp"

#include <boost/asio/steady_timer.hpp>

namespace chl::guest_agent {

using Json = nlohmann::json;
using common::fail;

bool decode_base64(std::string_view in, std::string& out) {
  out.clear();
  unsigned acc = 0;
  int bits = 0;
  for (const char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      v = c - '0' + 52;
    else if (c == '+')
      v = 62;
    else if (c == '/')
      v = 63;
    else if (c == '=')
      break;
    else
      return false;
    acc = (acc << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return true;
}

namespace {

// libvirt's default wait for one agent reply (qemu_agent.c QEMU_AGENT_WAIT_TIME).
constexpr std::chrono::milliseconds kCommandTimeout{5000};

struct ExecRun : std::enable_shared_from_this<ExecRun> {
  ExecRun(boost::asio::io_context& io, std::shared_ptr<AgentClient> a)
      : agent(std::move(a)), timer(io) {}
  std::shared_ptr<AgentClient> agent;
  boost::asio::steady_timer timer;
  std::string path;
  long long pid = 0;
  std::chrono::steady_clock::time_point until;
  std::chrono::milliseconds interval{};
  ExecDone done;

  void status() {
    agent->execute(
        "guest-exec-status", {{"pid", pid}}, kCommandTimeout,
        [self = shared_from_this()](common::Result<Json> r) {
          if (!r) return self->done(tl::unexpected(r.error().wrap("exec " + self->path)));
          const Json& s = *r;
          if (s.is_object() && s.value("exited", false)) {
            ExecResult res;
            res.exit_code = s.value("exitcode", 0);
            if (s.contains("signal") && s["signal"].is_number_integer())
              res.exit_code = 128 + s["signal"].get<int>();
            if (!decode_base64(s.value("out-data", ""), res.out) ||
                !decode_base64(s.value("err-data", ""), res.err))
              return self->done(fail(std::errc::protocol_error,
                                     "exec " + self->path + ": the agent's output is not base64"));
            return self->done(std::move(res));
          }
          if (std::chrono::steady_clock::now() + self->interval > self->until)
            return self->done(fail(std::errc::timed_out,
                                   "exec " + self->path + ": timed out waiting for guest pid [" +
                                       std::to_string(self->pid) + "] to exit"));
          self->timer.expires_after(self->interval);
          self->timer.async_wait([self](const boost::system::error_code& ec) {
            if (!ec) self->status();
          });
        });
  }
};

}  // namespace

void guest_exec(boost::asio::io_context& io, std::shared_ptr<AgentClient> agent, std::string path,
                std::vector<std::string> args, std::chrono::seconds timeout, ExecDone done) {
  auto run = std::make_shared<ExecRun>(io, agent);
  run->path = path;
  run->done = std::move(done);
  run->until = std::chrono::steady_clock::now() + timeout;
  run->interval = std::max<std::chrono::milliseconds>(
      std::chrono::milliseconds(timeout.count() * 100), std::chrono::milliseconds(10));
  Json a = {{"path", path}, {"arg", args}, {"capture-output", true}};
  agent->execute("guest-exec", std::move(a), kCommandTimeout, [run](common::Result<Json> r) {
    if (!r) return run->done(tl::unexpected(r.error().wrap("exec " + run->path)));
    run->pid = r->is_object() ? r->value("pid", 0LL) : 0LL;
    if (run->pid <= 0)
      return run->done(
          fail(std::errc::protocol_error,
               "exec " + run->path + ": invalid pid returned by the agent: " + r->dump()));
    run->status();
  });
}

}  // namespace chl::guest_agent

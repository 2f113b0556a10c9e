#pragma once
// A command run in the guest through the agent, as KubeVirt's Exec does it
// (pkg/virt-launcher/virtwrap/agent/exec.go GuestExec): guest-exec {"path", "arg",
// "capture-output": true} -> {"pid"}; then guest-exec-status {"pid"} at once and every timeout x
// 100 ms until it reports "exited" or the timeout passes. Its stdout is "out-data" base64-decoded.
// A non-zero exit is a result (exit_code), not an error; an error is the agent's or the
// transport's, or the time running out.
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "guest_agent/agent_client.hpp"

namespace chl::guest_agent {

struct ExecResult {
  int exit_code = 0;
  std::string out;  // stdout
  std::string err;  // stderr
};

using ExecDone = std::function<void(common::Result<ExecResult>)>;

// Runs on `io`'s thread; `done` runs once there.
void guest_exec(boost::asio::io_context& io, std::shared_ptr<AgentClient> agent, std::string path,
                std::vector<std::string> args, std::chrono::seconds timeout, ExecDone done);

// Standard base64 (qemu-ga's out-data/err-data); false on a malformed input.
bool decode_base64(std::string_view in, std::string& out);

}  // namespace chl::guest_agent

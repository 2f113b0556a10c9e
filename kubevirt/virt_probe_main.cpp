// virt-probe: the exec probe KubeVirt puts in the compute container for guestAgentPing and exec
// probes (virt-controller services/template.go:1468 wrapGuestAgentPingWithVirtProbe,
// rendercontainer.go:268 wrapExecProbeWithVirtProbe):
//   virt-probe --domainName <ns>_<name> --timeoutSeconds N --guestAgentPing
//   virt-probe --domainName <ns>_<name> --timeoutSeconds N --command <argv0> -- <args…>
// Our own binary with KubeVirt's command line and exit codes (cmd/virt-probe/virt-probe.go,
// KubeVirt d923fdb): it dials the launcher's command socket (--socket, default
// cmdclient.SocketOnGuest() = /var/run/kubevirt/sockets/launcher-sock), checks the command version
// as cmdclient.NewClient does (CmdInfo.Info within 5 s, version 1), then calls GuestPing or Exec
// with a deadline of timeoutSeconds + 5 s (client.go:706-747). Exits:
//   GuestPing: 0 answered, 1 failed (or no connection);
//   Exec: the guest command's exit code (its stdout printed, with a newline, when not empty);
//         255 (Go's os.Exit(-1)) when the call failed without an answer;
//   flags: 2 on a bad flag (pflag's ExitOnError), 0 for --help.
// Transport: the project's own HTTP/2 + gRPC client (h2_client.hpp) and protobuf-lite: no gRPC
// library.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "kubevirt/h2_client.hpp"
#include "kubevirt/proto_lite/cmd.pb.h"
#include "kubevirt/proto_lite/cmd_info.pb.h"

namespace {

using chl::kubevirt::GrpcCode;
using chl::kubevirt::GrpcReply;
using chl::kubevirt::RpcChannel;
namespace cmd = ::kubevirt_lite::cmd::v1;
namespace info = ::kubevirt_lite::cmd::info;

constexpr auto kShortTimeout = std::chrono::seconds(5);  // cmd-client/client.go:142

constexpr const char* kUsage =
    "Usage of virt-probe:\n"
    "      --command string         Command to execute on the guest\n"
    "      --domainName string      Domain Name of the Virtual Machine to connect the agent to. "
    "Usually "
    "namespace_vmname\n"
    "      --guestAgentPing         Flag to specify readiness probe based of guest-agent ping\n"
    "      --memProfile string      Path to store a memory profile. Profiling is skipped if empty\n"
    "      --socket string          Socket for connecting to the cmd server (default "
    "\"/var/run/kubevirt/sockets/launcher-sock\")\n"
    "      --timeoutSeconds int32   Duration in seconds the probe will wait for the guest command "
    "to return. "
    "(default 1)\n"
    "  -v, --v value                log level for V logs\n";

struct Flags {
  std::string socket = "/var/run/kubevirt/sockets/launcher-sock";
  std::string domain_name;
  std::string command;
  std::int32_t timeout_seconds = 1;
  bool guest_agent_ping = false;
  std::vector<std::string> args;  // pflag.Args(): after "--", and any non-flag word
};

int flag_error(const std::string& msg) {
  std::fprintf(stderr, "%s\n%s", msg.c_str(), kUsage);
  return 2;
}

bool parse_bool(const std::string& v, bool& out) {
  // Go's strconv.ParseBool
  if (v == "1" || v == "t" || v == "T" || v == "true" || v == "TRUE" || v == "True")
    return out = true, true;
  if (v == "0" || v == "f" || v == "F" || v == "false" || v == "FALSE" || v == "False")
    return !(out = false);
  return false;
}

// pflag's parsing of virt-probe's flags: --name=value or --name value, a bool without a value,
// "--" ends the flags, other words are arguments. nullopt: parsed; else the exit code.
std::optional<int> parse(const std::vector<std::string>& argv, Flags& f) {
  const std::map<std::string, std::string*> strings = {
      {"socket", &f.socket}, {"domainName", &f.domain_name}, {"command", &f.command}};
  std::string ignored;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--") {
      f.args.insert(f.args.end(), argv.begin() + static_cast<long>(i) + 1, argv.end());
      break;
    }
    if (a.size() < 2 || a[0] != '-') {
      f.args.push_back(a);
      continue;
    }
    const bool long_form = a.rfind("--", 0) == 0;
    std::string name = a.substr(long_form ? 2 : 1);
    std::optional<std::string> value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (name == "h" || name == "help") {
      std::fprintf(stderr, "%s", kUsage);
      return 0;
    }
    if (!long_form && name != "v")
      return flag_error("unknown shorthand flag: '" + name.substr(0, 1) + "' in " + a);
    const auto need_value = [&]() -> std::optional<int> {
      if (value) return std::nullopt;
      if (i + 1 >= argv.size()) return flag_error("flag needs an argument: " + a);
      value = argv[++i];
      return std::nullopt;
    };
    if (name == "guestAgentPing") {
      if (value && !parse_bool(*value, f.guest_agent_ping))
        return flag_error("invalid argument \"" + *value +
                          "\" for \"--guestAgentPing\" flag: strconv.ParseBool: parsing \"" +
                          *value + "\": invalid syntax");
      if (!value) f.guest_agent_ping = true;
      continue;
    }
    if (auto it = strings.find(name); it != strings.end()) {
      if (auto e = need_value()) return e;
      *it->second = *value;
      continue;
    }
    if (name == "memProfile" || name == "v") {  // Go's heap profile; klog's verbosity: no use here
      if (auto e = need_value()) return e;
      continue;
    }
    if (name == "timeoutSeconds") {
      if (auto e = need_value()) return e;
      char* end = nullptr;
      errno = 0;
      const long long t = std::strtoll(value->c_str(), &end, 0);
      if (value->empty() || *end != '\0' || errno != 0 || t < INT32_MIN || t > INT32_MAX)
        return flag_error("invalid argument \"" + *value +
                          "\" for \"--timeoutSeconds\" flag: strconv.ParseInt: parsing \"" +
                          *value + "\": invalid syntax");
      f.timeout_seconds = static_cast<std::int32_t>(t);
      continue;
    }
    return flag_error("unknown flag: --" + name);
  }
  return std::nullopt;
}

int run(const Flags& f) {
  RpcChannel rpc(f.socket);
  const auto now = [] { return std::chrono::steady_clock::now(); };
  // cmdclient.NewClient: the version check (newClientWithInfoClient).
  {
    info::CmdInfoResponse versions;
    GrpcReply r = rpc.call("/kubevirt.cmd.info.CmdInfo/Info",
                           info::CmdInfoRequest{}.SerializeAsString(), now() + kShortTimeout);
    if (r.code == GrpcCode::Ok && !versions.ParseFromString(r.body))
      r = {GrpcCode::Internal, "cannot parse CmdInfoResponse", {}};
    bool v1 = false;
    for (auto v : versions.supportedcmdversions()) v1 = v1 || v == 1;
    if (r.code != GrpcCode::Ok || !v1) {
      CHL_LOG_ERROR("Failed to connect cmd client: could not check cmd server version on {}: {}",
                    f.socket,
                    r.code != GrpcCode::Ok ? r.message : "no compatible version (want 1)");
      return 1;
    }
  }
  const auto deadline = now() + std::chrono::seconds(f.timeout_seconds) + kShortTimeout;
  if (f.guest_agent_ping) {
    cmd::GuestPingRequest req;
    req.set_domainname(f.domain_name);
    req.set_timeoutseconds(f.timeout_seconds);
    GrpcReply r = rpc.call("/kubevirt.cmd.v1.Cmd/GuestPing", req.SerializeAsString(), deadline);
    cmd::GuestPingResponse resp;
    if (r.code == GrpcCode::Ok && !resp.ParseFromString(r.body))
      r = {GrpcCode::Internal, "cannot parse GuestPingResponse", {}};
    // handleError: a gRPC error, or an old server's Response{success:false, message}.
    if (r.code != GrpcCode::Ok ||
        (!resp.response().success() && !resp.response().message().empty())) {
      CHL_LOG_ERROR("Failed to ping the guest: {}",
                    r.code != GrpcCode::Ok ? r.message : resp.response().message());
      return 1;
    }
    return 0;
  }
  cmd::ExecRequest req;
  req.set_domainname(f.domain_name);
  req.set_command(f.command);
  for (const auto& a : f.args) req.add_args(a);
  req.set_timeoutseconds(f.timeout_seconds);
  GrpcReply r = rpc.call("/kubevirt.cmd.v1.Cmd/Exec", req.SerializeAsString(), deadline);
  int exit_code = -1;
  std::string out;
  cmd::ExecResponse resp;
  if (r.code == GrpcCode::Ok) {
    if (resp.ParseFromString(r.body)) {
      exit_code = resp.exitcode();
      out = resp.stdout();
    } else {
      r = {GrpcCode::Internal, "cannot parse ExecResponse", {}};
    }
  }
  if (!out.empty()) std::printf("%s\n", out.c_str());  // fmt.Println(stdOut)
  if (r.code != GrpcCode::Ok || (!resp.response().success() && !resp.response().message().empty()))
    CHL_LOG_ERROR("Failed executing the command: {}",
                  r.code != GrpcCode::Ok ? r.message : resp.response().message());
  std::fflush(stdout);
  return exit_code & 0xff;  // os.Exit(exitCode): the status is its low byte (-1 -> 255)
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (auto code = parse(std::vector<std::string>(argv + 1, argv + argc), f)) return *code;
  chl::common::log::init("virt-probe", spdlog::level::info, "");
  return run(f);
}

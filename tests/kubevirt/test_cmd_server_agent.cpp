// The command server's guest agent RPCs through a gRPC client, as virt-handler and virt-probe
// call them: GetGuestInfo/GetUsers/GetFilesystems carry the handler's JSON; GuestPing and Exec
// answer a failure both in the Response and as a gRPC error (KubeVirt's server.go returns
// (resp, err), so virt-probe exits non-zero); Exec's non-zero exit is success with exitCode; a
// handler without them (CmdHandler's defaults) is refused like any unsupported RPC.
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include <mutex>

#include "kubevirt/cmd_server.hpp"
#include "kubevirt/proto/cmd.grpc.pb.h"
#include "tests/support/test_support.hpp"

namespace {

using namespace chl::kubevirt;
using namespace std::chrono_literals;
namespace v1 = ::kubevirt::cmd::v1;
using chl::common::Result;
using chl::common::Status;

// The lifecycle RPCs are not the subject here.
class Base : public CmdHandler {
 public:
  Status sync(std::string_view, const SyncOptions&) override { return {}; }
  Status pause(std::string_view) override { return {}; }
  Status unpause(std::string_view) override { return {}; }
  Status shutdown(std::string_view) override { return {}; }
  Status kill(std::string_view) override { return {}; }
  Status delete_domain(std::string_view) override { return {}; }
  Status soft_reboot(std::string_view) override { return {}; }
  Status reset(std::string_view) override { return {}; }
  Status ping() override { return {}; }
  Result<std::string> get_domain() override { return std::string(); }
  Result<std::string> get_domain_stats() override { return std::string(); }
  Result<std::string> get_qemu_version() override { return std::string("v"); }
  Status sync_cpus(std::string_view) override { return {}; }
  Status sync_memory(std::string_view) override { return {}; }
};

class AgentHandler final : public Base {
 public:
  std::mutex mu;
  bool agent_up = true;
  std::string last_exec;
  Result<std::string> get_guest_info() override {
    return std::string(R"({"guestAgentVersion":"7.2.22"})");
  }
  Result<std::string> get_users() override { return std::string(R"([{"userName":"root"}])"); }
  Result<std::string> get_filesystems() override { return std::string(R"([{"diskName":"vda1"}])"); }
  Status guest_ping(std::string_view domain, std::int32_t timeout) override {
    std::lock_guard l(mu);
    last_exec = std::string(domain) + " " + std::to_string(timeout);
    if (!agent_up)
      return chl::common::fail(std::errc::not_connected,
                               "guest-ping: the guest agent is not connected");
    return {};
  }
  Result<ExecOutput> exec(std::string_view, const std::string& command,
                          const std::vector<std::string>& args, std::int32_t) override {
    std::lock_guard l(mu);
    last_exec = command;
    for (const auto& a : args) last_exec += " " + a;
    if (!agent_up)
      return chl::common::fail(std::errc::not_connected,
                               "guest-exec: the guest agent is not connected");
    if (command == "/bin/false") return ExecOutput{1, ""};
    return ExecOutput{0, "out\n"};
  }
};

template <typename H>
struct Fixture {
  chl::test::TempDir dir{"kva"};
  H handler;
  std::unique_ptr<CmdServer> server;
  std::unique_ptr<v1::Cmd::Stub> cmd;
  Fixture() {
    auto s = CmdServer::start(
        {.share_dir = dir.path(), .not_supported = "not supported by cloud-hypervisor"}, handler);
    REQUIRE(s);
    server = std::move(*s);
    cmd = v1::Cmd::NewStub(grpc::CreateChannel("unix:" + ready_socket_path(dir.path()).string(),
                                               grpc::InsecureChannelCredentials()));
  }
  static std::unique_ptr<grpc::ClientContext> ctx() {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + 5s);
    return c;
  }
};

}  // namespace

TEST_CASE(
    "cmd server, guest agent: GetGuestInfo/GetUsers/GetFilesystems carry the handler's documents") {
  Fixture<AgentHandler> f;
  v1::EmptyRequest e;
  v1::GuestInfoResponse gi;
  REQUIRE(f.cmd->GetGuestInfo(f.ctx().get(), e, &gi).ok());
  CHECK(gi.response().success());
  CHECK(gi.guestinforesponse() == R"({"guestAgentVersion":"7.2.22"})");
  v1::GuestUserListResponse u;
  REQUIRE(f.cmd->GetUsers(f.ctx().get(), e, &u).ok());
  CHECK(u.guestuserlistresponse() == R"([{"userName":"root"}])");
  v1::GuestFilesystemsResponse fs;
  REQUIRE(f.cmd->GetFilesystems(f.ctx().get(), e, &fs).ok());
  CHECK(fs.guestfilesystemsresponse() == R"([{"diskName":"vda1"}])");
}

TEST_CASE(
    "cmd server, guest agent: GuestPing and Exec — success, a non-zero exit as success with its "
    "code, a failure as a gRPC error") {
  Fixture<AgentHandler> f;
  v1::GuestPingRequest p;
  p.set_domainname("ns_vm");
  p.set_timeoutseconds(3);
  v1::GuestPingResponse pr;
  REQUIRE(f.cmd->GuestPing(f.ctx().get(), p, &pr).ok());
  CHECK(pr.response().success());
  CHECK(f.handler.last_exec == "ns_vm 3");

  v1::ExecRequest x;
  x.set_domainname("ns_vm");
  x.set_command("/bin/echo");
  x.add_args("a");
  x.add_args("b");
  x.set_timeoutseconds(2);
  v1::ExecResponse xr;
  REQUIRE(f.cmd->Exec(f.ctx().get(), x, &xr).ok());
  CHECK(xr.response().success());
  CHECK(xr.exitcode() == 0);
  CHECK(xr.stdout() == "out\n");
  CHECK(f.handler.last_exec == "/bin/echo a b");
  x.set_command("/bin/false");
  REQUIRE(f.cmd->Exec(f.ctx().get(), x, &xr).ok());
  CHECK(xr.response().success());
  CHECK(xr.exitcode() == 1);

  f.handler.agent_up = false;
  auto s = f.cmd->GuestPing(f.ctx().get(), p, &pr);
  CHECK(s.error_code() == grpc::StatusCode::UNKNOWN);
  CHECK(s.error_message() == "guest-ping: the guest agent is not connected");
  s = f.cmd->Exec(f.ctx().get(), x, &xr);
  CHECK(s.error_code() == grpc::StatusCode::UNKNOWN);
  CHECK(s.error_message().find("not connected") != std::string::npos);
  // The server keeps serving.
  v1::EmptyRequest e;
  v1::GuestInfoResponse gi;
  CHECK(f.cmd->GetGuestInfo(f.ctx().get(), e, &gi).ok());
}

TEST_CASE(
    "cmd server, guest agent: a handler without the agent RPCs refuses them as not supported, gRPC "
    "status OK") {
  Fixture<Base> f;
  v1::GuestPingRequest p;
  v1::GuestPingResponse pr;
  REQUIRE(f.cmd->GuestPing(f.ctx().get(), p, &pr).ok());
  CHECK_FALSE(pr.response().success());
  CHECK(pr.response().message() == "not supported by cloud-hypervisor");
  v1::ExecRequest x;
  v1::ExecResponse xr;
  REQUIRE(f.cmd->Exec(f.ctx().get(), x, &xr).ok());
  CHECK_FALSE(xr.response().success());
  CHECK(xr.response().message() == "not supported by cloud-hypervisor");
}

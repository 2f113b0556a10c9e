// The command server through a gRPC client on its socket, as virt-handler dials it: the
// readiness rename, Info, every implemented RPC reaching the handler with its arguments, errors
// as success:false, every other RPC refused at once, a client leaving mid-call.
#include <doctest/doctest.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <future>
#include <set>

#include "kubevirt/cmd_server.hpp"
#include "kubevirt/proto/cmd.grpc.pb.h"
#include "kubevirt/proto/cmd_info.grpc.pb.h"
#include "tests/support/test_support.hpp"

namespace {

using namespace chl::kubevirt;
using namespace std::chrono_literals;
namespace v1 = ::kubevirt::cmd::v1;
namespace info = ::kubevirt::cmd::info;
using chl::common::Result;
using chl::common::Status;

// Records every call; answers what the test sets.
class FakeHandler final : public CmdHandler {
 public:
  std::mutex mu;
  std::vector<std::string> calls;  // "pause <vmi json>"
  SyncOptions last_options;
  std::optional<chl::common::Error> fail_with;
  bool throw_in_ping = false;
  std::promise<void> sync_entered;
  std::shared_future<void> sync_release;  // when set, sync waits for it

  Status record(const std::string& what, std::string_view vmi) {
    std::lock_guard lock(mu);
    calls.push_back(what + " " + std::string(vmi));
    if (fail_with) return tl::unexpected(*fail_with);
    return {};
  }
  Status sync(std::string_view vmi, const SyncOptions& o) override {
    if (sync_release.valid()) {
      sync_entered.set_value();
      sync_release.wait();
    }
    {
      std::lock_guard lock(mu);
      last_options = o;
    }
    return record("sync", vmi);
  }
  Status pause(std::string_view vmi) override { return record("pause", vmi); }
  Status unpause(std::string_view vmi) override { return record("unpause", vmi); }
  Status shutdown(std::string_view vmi) override { return record("shutdown", vmi); }
  Status kill(std::string_view vmi) override { return record("kill", vmi); }
  Status delete_domain(std::string_view vmi) override { return record("delete", vmi); }
  Status soft_reboot(std::string_view vmi) override { return record("soft_reboot", vmi); }
  Status reset(std::string_view vmi) override { return record("reset", vmi); }
  Status sync_cpus(std::string_view vmi) override { return record("sync_cpus", vmi); }
  Status sync_memory(std::string_view vmi) override { return record("sync_memory", vmi); }
  Status ping() override {
    if (throw_in_ping) throw std::runtime_error("boom");
    return record("ping", "");
  }
  Result<std::string> get_domain() override {
    CHL_TRY_VOID(record("get_domain", ""));
    return std::string(R"({"kind":"Domain"})");
  }
  Result<std::string> get_domain_stats() override {
    CHL_TRY_VOID(record("get_domain_stats", ""));
    return std::string(R"({"Name":"ns1_vm1"})");
  }
  Result<std::string> get_qemu_version() override {
    CHL_TRY_VOID(record("get_qemu_version", ""));
    return std::string("cloud-hypervisor v52.0");
  }
  std::vector<std::string> take_calls() {
    std::lock_guard lock(mu);
    return std::exchange(calls, {});
  }
};

struct Fixture {
  chl::test::TempDir dir{"kvc"};
  FakeHandler handler;
  std::unique_ptr<CmdServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Cmd::Stub> cmd;

  Fixture() {
    auto s = CmdServer::start(
        {.share_dir = dir.path(), .not_supported = "not supported by cloud-hypervisor"}, handler);
    REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().message()));
    server = std::move(*s);
    channel = grpc::CreateChannel("unix:" + ready_socket_path(dir.path()).string(),
                                  grpc::InsecureChannelCredentials());
    cmd = v1::Cmd::NewStub(channel);
  }
  static std::unique_ptr<grpc::ClientContext> ctx(std::chrono::milliseconds timeout = 5s) {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + timeout);
    return c;
  }
};

v1::VMIRequest vmi_request(const std::string& json) {
  v1::VMIRequest r;
  r.mutable_vmi()->set_vmijson(json);
  return r;
}

}  // namespace

TEST_CASE("cmd server: serves on launcher-sock (renamed from launcher-init-sock), Info says [1]") {
  Fixture f;
  CHECK(std::filesystem::is_socket(ready_socket_path(f.dir.path())));
  CHECK_FALSE(std::filesystem::exists(init_socket_path(f.dir.path())));
  CHECK(f.server->socket_path() == f.dir.path() / "sockets" / "launcher-sock");

  auto info_stub = info::CmdInfo::NewStub(f.channel);
  info::CmdInfoResponse versions;
  REQUIRE(info_stub->Info(Fixture::ctx().get(), {}, &versions).ok());
  REQUIRE(versions.supportedcmdversions_size() == 1);
  CHECK(versions.supportedcmdversions(0) == 1);

  f.server.reset();  // stopping removes the socket
  CHECK_FALSE(std::filesystem::exists(ready_socket_path(f.dir.path())));
}

TEST_CASE("cmd server: every implemented RPC reaches the handler with the VMI") {
  Fixture f;
  v1::Response r;
  const std::string vmi = R"({"metadata":{"name":"vm1"}})";
  using Rpc =
      grpc::Status (v1::Cmd::Stub::*)(grpc::ClientContext*, const v1::VMIRequest&, v1::Response*);
  const std::pair<Rpc, const char*> rpcs[] = {
      {&v1::Cmd::Stub::PauseVirtualMachine, "pause"},
      {&v1::Cmd::Stub::UnpauseVirtualMachine, "unpause"},
      {&v1::Cmd::Stub::ShutdownVirtualMachine, "shutdown"},
      {&v1::Cmd::Stub::KillVirtualMachine, "kill"},
      {&v1::Cmd::Stub::DeleteVirtualMachine, "delete"},
      {&v1::Cmd::Stub::SoftRebootVirtualMachine, "soft_reboot"},
      {&v1::Cmd::Stub::ResetVirtualMachine, "reset"},
      {&v1::Cmd::Stub::SyncVirtualMachineCPUs, "sync_cpus"},
      {&v1::Cmd::Stub::SyncVirtualMachineMemory, "sync_memory"},
  };
  for (const auto& [rpc, name] : rpcs) {
    CAPTURE(name);
    REQUIRE(((*f.cmd).*rpc)(Fixture::ctx().get(), vmi_request(vmi), &r).ok());
    CHECK(r.success());
    CHECK(f.handler.take_calls() == std::vector<std::string>{std::string(name) + " " + vmi});
  }
  REQUIRE(f.cmd->Ping(Fixture::ctx().get(), {}, &r).ok());
  CHECK(r.success());

  v1::DomainResponse domain;
  REQUIRE(f.cmd->GetDomain(Fixture::ctx().get(), {}, &domain).ok());
  CHECK(domain.response().success());
  CHECK(domain.domain() == R"({"kind":"Domain"})");
  v1::DomainStatsResponse stats;
  REQUIRE(f.cmd->GetDomainStats(Fixture::ctx().get(), {}, &stats).ok());
  CHECK(stats.response().success());
  CHECK(stats.domainstats() == R"({"Name":"ns1_vm1"})");
  v1::QemuVersionResponse version;
  REQUIRE(f.cmd->GetQemuVersion(Fixture::ctx().get(), {}, &version).ok());
  CHECK(version.version() == "cloud-hypervisor v52.0");
  CHECK(f.handler.take_calls() ==
        std::vector<std::string>{"ping ", "get_domain ", "get_domain_stats ", "get_qemu_version "});
}

TEST_CASE("cmd server: Sync carries the VMI and the options a launcher honours") {
  Fixture f;
  v1::VMIRequest req = vmi_request(R"({"spec":{}})");
  auto* o = req.mutable_options();
  (*o->mutable_interfacedomainattachment())["default"] = "tap";
  o->mutable_virtualmachinesmbios()->set_manufacturer("KubeVirt");
  o->mutable_virtualmachinesmbios()->set_family("KubeVirt");
  o->set_memballoonstatsperiod(10);
  o->add_preallocatedvolumes("disk0");
  o->mutable_clusterconfig()->set_expanddisksenabled(true);
  o->mutable_clusterconfig()->set_serialconsolelogdisabled(true);
  v1::Response r;
  REQUIRE(f.cmd->SyncVirtualMachine(Fixture::ctx().get(), req, &r).ok());
  CHECK(r.success());
  CHECK(f.handler.take_calls() == std::vector<std::string>{R"(sync {"spec":{}})"});
  const SyncOptions& s = f.handler.last_options;
  CHECK(s.interface_domain_attachment == std::map<std::string, std::string>{{"default", "tap"}});
  REQUIRE(s.smbios.has_value());
  CHECK(s.smbios->manufacturer == "KubeVirt");
  CHECK(s.smbios->family == "KubeVirt");
  CHECK(s.mem_balloon_stats_period == 10);
  CHECK(s.preallocated_volumes == std::vector<std::string>{"disk0"});
  CHECK(s.expand_disks);
  CHECK(s.serial_console_log_disabled);
  CHECK_FALSE(s.free_page_reporting_disabled);
}

TEST_CASE("cmd server: a handler error is success:false with its message, serving goes on") {
  Fixture f;
  f.handler.fail_with = chl::common::Error{std::make_error_code(std::errc::invalid_argument),
                                           "spec.domain.devices.disks[0]: no matching volume"};
  v1::Response r;
  REQUIRE(f.cmd->SyncVirtualMachine(Fixture::ctx().get(), vmi_request("{}"), &r).ok());
  CHECK_FALSE(r.success());
  CHECK(r.message() == "spec.domain.devices.disks[0]: no matching volume");
  v1::DomainResponse domain;
  REQUIRE(f.cmd->GetDomain(Fixture::ctx().get(), {}, &domain).ok());
  CHECK_FALSE(domain.response().success());
  CHECK(domain.domain().empty());

  f.handler.fail_with.reset();
  f.handler.throw_in_ping = true;  // a bug in the handler is an answer too, not a dead server
  REQUIRE(f.cmd->Ping(Fixture::ctx().get(), {}, &r).ok());
  CHECK_FALSE(r.success());
  CHECK(r.message() == "internal error: boom");
  f.handler.throw_in_ping = false;
  REQUIRE(f.cmd->Ping(Fixture::ctx().get(), {}, &r).ok());
  CHECK(r.success());
}

TEST_CASE(
    "cmd server: every other RPC of kubevirt.cmd.v1.Cmd is refused at once as not supported") {
  Fixture f;
  const std::set<std::string> implemented = {"SyncVirtualMachine",
                                             "PauseVirtualMachine",
                                             "UnpauseVirtualMachine",
                                             "ShutdownVirtualMachine",
                                             "KillVirtualMachine",
                                             "DeleteVirtualMachine",
                                             "SoftRebootVirtualMachine",
                                             "ResetVirtualMachine",
                                             "SyncVirtualMachineCPUs",
                                             "SyncVirtualMachineMemory",
                                             "Ping",
                                             "GetDomain",
                                             "GetDomainStats",
                                             "GetQemuVersion",
                                             // live migration: the handler's to answer
                                             "SyncMigrationTarget",
                                             "MigrateVirtualMachine",
                                             "CancelVirtualMachineMigration",
                                             "FinalizeVirtualMachineMigration",
                                             "SignalTargetPodCleanup",
                                             // SR-IOV hotplug: the handler's to answer
                                             "HotplugHostDevices"};
  // Each method by its wire name, with an empty request (a valid encoding of every request);
  // the answer's Response is field 1 of every answer type but Response itself.
  grpc::TemplatedGenericStub<v1::EmptyRequest, v1::Response> plain(f.channel);
  grpc::TemplatedGenericStub<v1::EmptyRequest, v1::DomainResponse> wrapped(f.channel);
  const auto* service = v1::VMIRequest::descriptor()->file()->FindServiceByName("Cmd");
  REQUIRE(service != nullptr);
  int refused = 0;
  for (int i = 0; i < service->method_count(); ++i) {
    const auto* m = service->method(i);
    if (implemented.count(m->name())) continue;
    CAPTURE(m->name());
    const std::string path = "/kubevirt.cmd.v1.Cmd/" + m->name();
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    std::promise<grpc::Status> done;
    v1::Response response;
    v1::DomainResponse domain_response;
    v1::EmptyRequest empty;
    if (m->output_type()->name() == "Response")
      plain.UnaryCall(&ctx, path, {}, &empty, &response,
                      [&](grpc::Status s) { done.set_value(std::move(s)); });
    else
      wrapped.UnaryCall(&ctx, path, {}, &empty, &domain_response,
                        [&](grpc::Status s) { done.set_value(std::move(s)); });
    const grpc::Status s = done.get_future().get();
    REQUIRE_MESSAGE(s.ok(), s.error_message());  // an answer, not UNIMPLEMENTED, not a timeout
    if (m->output_type()->name() != "Response") response = domain_response.response();
    CHECK_FALSE(response.success());
    CHECK(response.message() == "not supported by cloud-hypervisor");
    ++refused;
  }
  CHECK(refused == 16);
  CHECK(f.handler.take_calls().empty());
  // HotplugHostDevices reaches the handler: one without it (CmdHandler's default) refuses.
  v1::Response r;
  REQUIRE(f.cmd->HotplugHostDevices(Fixture::ctx().get(), vmi_request("{}"), &r).ok());
  CHECK_FALSE(r.success());
  CHECK(r.message() == "HotplugHostDevices: not supported");
}

TEST_CASE("cmd server: a client leaving mid-call does not stop the server") {
  Fixture f;
  std::promise<void> release;
  f.handler.sync_release = release.get_future().share();
  auto entered = f.handler.sync_entered.get_future();
  v1::Response r;
  auto leaving = Fixture::ctx(200ms);
  const grpc::Status s = f.cmd->SyncVirtualMachine(leaving.get(), vmi_request("{}"), &r);
  CHECK(s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK(entered.wait_for(5s) == std::future_status::ready);
  release.set_value();  // the handler finishes its work; nobody is there for the answer
  REQUIRE(chl::test::wait_until(5s, [&] { return f.handler.take_calls().size() == 1; }));
  REQUIRE(f.cmd->Ping(Fixture::ctx().get(), {}, &r).ok());
  CHECK(r.success());
}

TEST_CASE("cmd server: a stale launcher-sock is replaced, a path it cannot bind is a clear error") {
  chl::test::TempDir dir("kvc");
  std::filesystem::create_directories(dir / "sockets");
  chl::test::leave_stale_socket(ready_socket_path(dir.path()));
  FakeHandler handler;
  {
    auto s = CmdServer::start({.share_dir = dir.path()}, handler);
    REQUIRE(s.has_value());
    auto channel = grpc::CreateChannel("unix:" + ready_socket_path(dir.path()).string(),
                                       grpc::InsecureChannelCredentials());
    v1::Response r;
    REQUIRE(v1::Cmd::NewStub(channel)->Ping(Fixture::ctx().get(), {}, &r).ok());
    CHECK(r.success());
  }
  // A Unix socket path longer than sun_path allows.
  const auto too_long = dir / std::string(120, 'x');
  auto s = CmdServer::start({.share_dir = too_long}, handler);
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().message().find("launcher-init-sock") != std::string::npos);
}

#include "kubevirt/cmd_server.hpp"

#include <exception>
#include <system_error>

#include "common/log.hpp"
#include "common/unix_socket.hpp"
#include "kubevirt/h2_server.hpp"
#include "kubevirt/proto_lite/cmd.pb.h"
#include "kubevirt/proto_lite/cmd_info.pb.h"

namespace chl::kubevirt {

// Lite messages of the same wire contract (kubevirt/lite_proto.cmake).
namespace v1 = ::kubevirt_lite::cmd::v1;
namespace info = ::kubevirt_lite::cmd::info;

std::filesystem::path init_socket_path(const std::filesystem::path& share_dir) {
  return share_dir / "sockets" / "launcher-init-sock";
}
std::filesystem::path ready_socket_path(const std::filesystem::path& share_dir) {
  return share_dir / "sockets" / "launcher-sock";
}

namespace {

// The Response inside any answer: Response itself, or the `response` field of the others.
v1::Response* response_of(v1::Response* r) { return r; }
template <typename R>
v1::Response* response_of(R* r) {
  return r->mutable_response();
}

void fail(v1::Response* out, const char* rpc, const std::string& message) {
  out->set_success(false);
  out->set_message(message);
  CHL_LOG_WARN("cmd: {} failed: {}", rpc, message);
}

// Run one handler call; its error (or an exception escaping it) is the Response's message.
template <typename F>
void answer(v1::Response* out, const char* rpc, F&& call) {
  try {
    auto result = call();
    out->set_success(result.has_value());
    if (!result) fail(out, rpc, result.error().message());
  } catch (const std::exception& e) {
    fail(out, rpc, std::string("internal error: ") + e.what());
  }
}

// answer(), except that a handler without the RPC (CmdHandler's default, function_not_supported)
// is refused as the RPCs the server does not route: the configured message, gRPC status OK.
// Returns false when refused so.
template <typename F>
bool answer_or_refuse(v1::Response* out, const char* rpc, const std::string& not_supported,
                      F&& call) {
  try {
    auto result = call();
    out->set_success(result.has_value());
    if (result) return true;
    if (result.error().code == std::errc::function_not_supported) {
      fail(out, rpc, not_supported);
      return false;
    }
    fail(out, rpc, result.error().message());
  } catch (const std::exception& e) {
    fail(out, rpc, std::string("internal error: ") + e.what());
  }
  return true;
}

SyncOptions to_sync_options(const v1::VirtualMachineOptions& o) {
  SyncOptions s;
  s.interface_domain_attachment.insert(o.interfacedomainattachment().begin(),
                                       o.interfacedomainattachment().end());
  if (o.has_virtualmachinesmbios()) {
    const auto& b = o.virtualmachinesmbios();
    s.smbios = SmBios{b.manufacturer(), b.product(), b.version(), b.sku(), b.family()};
  }
  s.mem_balloon_stats_period = o.memballoonstatsperiod();
  s.preallocated_volumes.assign(o.preallocatedvolumes().begin(), o.preallocatedvolumes().end());
  s.expand_disks = o.expanddisksenabled() || o.clusterconfig().expanddisksenabled();
  s.free_page_reporting_disabled = o.clusterconfig().freepagereportingdisabled();
  s.serial_console_log_disabled = o.clusterconfig().serialconsolelogdisabled();
  return s;
}

// A method taking a Request and answering an Answer through `body(request, answer)`.
template <typename Request, typename Answer, typename F>
RpcMethod method(bool may_block, F body) {
  return {[body = std::move(body)](const std::string& bytes) -> GrpcReply {
            Request request;
            if (!request.ParseFromString(bytes))
              return {GrpcCode::Internal, "cannot parse the request", {}};
            Answer out;
            body(request, out);
            return {GrpcCode::Ok, {}, out.SerializeAsString()};
          },
          may_block};
}

constexpr const char* kCmd = "/kubevirt.cmd.v1.Cmd/";

class Routes {
 public:
  Routes(CmdHandler& handler, std::string not_supported)
      : handler_(handler), not_supported_(std::move(not_supported)) {}

  std::map<std::string, RpcMethod> build() {
    routes_["/kubevirt.cmd.info.CmdInfo/Info"] =
        method<info::CmdInfoRequest, info::CmdInfoResponse>(
            false,
            [](const auto&, info::CmdInfoResponse& out) { out.add_supportedcmdversions(1); });
    CmdHandler& h = handler_;
    add<v1::VMIRequest, v1::Response>("SyncVirtualMachine", [&h](const auto& req, auto& out) {
      answer(&out, "SyncVirtualMachine",
             [&] { return h.sync(req.vmi().vmijson(), to_sync_options(req.options())); });
    });
    vmi("PauseVirtualMachine", &CmdHandler::pause);
    vmi("UnpauseVirtualMachine", &CmdHandler::unpause);
    vmi("ShutdownVirtualMachine", &CmdHandler::shutdown);
    vmi("KillVirtualMachine", &CmdHandler::kill);
    vmi("DeleteVirtualMachine", &CmdHandler::delete_domain);
    vmi("SoftRebootVirtualMachine", &CmdHandler::soft_reboot);
    vmi("ResetVirtualMachine", &CmdHandler::reset);
    vmi("SyncVirtualMachineCPUs", &CmdHandler::sync_cpus);
    vmi("SyncVirtualMachineMemory", &CmdHandler::sync_memory);
    // Live migration (the handler may refuse it: a hypervisor without it).
    add<v1::VMIRequest, v1::Response>("SyncMigrationTarget", [&h](const auto& req, auto& out) {
      answer(&out, "SyncMigrationTarget", [&] {
        return h.sync_migration_target(req.vmi().vmijson(), to_sync_options(req.options()));
      });
    });
    add<v1::MigrationRequest, v1::Response>("MigrateVirtualMachine", [&h](const auto& req, auto& out) {
      answer(&out, "MigrateVirtualMachine",
             [&] { return h.migrate(req.vmi().vmijson(), req.options()); });
    });
    vmi("CancelVirtualMachineMigration", &CmdHandler::cancel_migration);
    vmi("FinalizeVirtualMachineMigration", &CmdHandler::finalize_migration);
    vmi("SignalTargetPodCleanup", &CmdHandler::signal_target_pod_cleanup);
    vmi("HotplugHostDevices", &CmdHandler::hotplug_host_devices);
    add<v1::EmptyRequest, v1::Response>(
        "Ping", [&h](const auto&, auto& out) { answer(&out, "Ping", [&] { return h.ping(); }); });
    add<v1::EmptyRequest, v1::DomainResponse>("GetDomain", [&h](const auto&, auto& out) {
      answer(out.mutable_response(), "GetDomain", [&] {
        return h.get_domain().map([&](std::string json) { out.set_domain(std::move(json)); });
      });
    });
    add<v1::EmptyRequest, v1::DomainStatsResponse>("GetDomainStats", [&h](const auto&, auto& out) {
      answer(out.mutable_response(), "GetDomainStats", [&] {
        return h.get_domain_stats().map(
            [&](std::string json) { out.set_domainstats(std::move(json)); });
      });
    });
    add<v1::EmptyRequest, v1::QemuVersionResponse>("GetQemuVersion", [&h](const auto&, auto& out) {
      answer(out.mutable_response(), "GetQemuVersion", [&] {
        return h.get_qemu_version().map(
            [&](std::string version) { out.set_version(std::move(version)); });
      });
    });

    add_guest_agent_routes();

    // Everything else (docs/kubevirt/protocol.md lists why each is not supported): refused at once.
    refuse<v1::MemoryDumpRequest, v1::Response>("VirtualMachineMemoryDump");
    refuse<v1::EmptyRequest, v1::SEVInfoResponse>("GetSEVInfo");
    refuse<v1::VMIRequest, v1::LaunchMeasurementResponse>("GetLaunchMeasurement");
    refuse<v1::InjectLaunchSecretRequest, v1::Response>("InjectLaunchSecret");
    refuse<v1::EmptyRequest, v1::DirtyRateStatsResponse>("GetDomainDirtyRateStats");
    refuse<v1::VMIRequest, v1::ScreenshotResponse>("GetScreenshot");
    refuse<v1::BackupRequest, v1::Response>("BackupVirtualMachine");
    refuse<v1::RedefineCheckpointRequest, v1::RedefineCheckpointResponse>("RedefineCheckpoint");
    refuse<v1::VMStatsRequest, v1::VMStatsResponse>("GetVMStats");
    return std::move(routes_);
  }

 private:
  // The guest agent's RPCs (server.go GetGuestInfo, GetUsers, GetFilesystems, GuestPing, Exec,
  // FreezeVirtualMachine, UnfreezeVirtualMachine).
  // GuestPing and Exec answer a failure both in the Response and as a gRPC error (status
  // Unknown), as KubeVirt's server returns (resp, err): virt-probe exits non-zero on it.
  void add_guest_agent_routes() {
    CmdHandler& h = handler_;
    const std::string ns = not_supported_;
    // Freeze (server.go FreezeVirtualMachine: the unfreeze timeout rides beside the VMI).
    add<v1::FreezeRequest, v1::Response>(
        "FreezeVirtualMachine", [&h, ns](const auto& req, auto& out) {
          answer_or_refuse(&out, "FreezeVirtualMachine", ns, [&] {
            return h.freeze(req.vmi().vmijson(), req.unfreezetimeoutseconds());
          });
        });
    add<v1::VMIRequest, v1::Response>(
        "UnfreezeVirtualMachine", [&h, ns](const auto& req, auto& out) {
          answer_or_refuse(&out, "UnfreezeVirtualMachine", ns,
                           [&] { return h.unfreeze(req.vmi().vmijson()); });
        });
    add<v1::EmptyRequest, v1::GuestInfoResponse>("GetGuestInfo", [&h, ns](const auto&, auto& out) {
      answer_or_refuse(out.mutable_response(), "GetGuestInfo", ns, [&] {
        return h.get_guest_info().map(
            [&](std::string json) { out.set_guestinforesponse(std::move(json)); });
      });
    });
    add<v1::EmptyRequest, v1::GuestUserListResponse>("GetUsers", [&h, ns](const auto&, auto& out) {
      answer_or_refuse(out.mutable_response(), "GetUsers", ns, [&] {
        return h.get_users().map(
            [&](std::string json) { out.set_guestuserlistresponse(std::move(json)); });
      });
    });
    add<v1::EmptyRequest, v1::GuestFilesystemsResponse>(
        "GetFilesystems", [&h, ns](const auto&, auto& out) {
          answer_or_refuse(out.mutable_response(), "GetFilesystems", ns, [&] {
            return h.get_filesystems().map(
                [&](std::string json) { out.set_guestfilesystemsresponse(std::move(json)); });
          });
        });
    routes_[std::string(kCmd) + "GuestPing"] = {
        [&h, ns](const std::string& bytes) -> GrpcReply {
          v1::GuestPingRequest req;
          if (!req.ParseFromString(bytes))
            return {GrpcCode::Internal, "cannot parse the request", {}};
          v1::GuestPingResponse out;
          const bool routed = answer_or_refuse(out.mutable_response(), "GuestPing", ns, [&] {
            return h.guest_ping(req.domainname(), req.timeoutseconds());
          });
          if (routed && !out.response().success())
            return {GrpcCode::Unknown, out.response().message(), {}};
          return {GrpcCode::Ok, {}, out.SerializeAsString()};
        },
        true};
    routes_[std::string(kCmd) + "Exec"] = {
        [&h, ns](const std::string& bytes) -> GrpcReply {
          v1::ExecRequest req;
          if (!req.ParseFromString(bytes))
            return {GrpcCode::Internal, "cannot parse the request", {}};
          v1::ExecResponse out;
          std::vector<std::string> args(req.args().begin(), req.args().end());
          const bool routed = answer_or_refuse(out.mutable_response(), "Exec", ns, [&] {
            return h.exec(req.domainname(), req.command(), args, req.timeoutseconds())
                .map([&](ExecOutput o) {
                  out.set_exitcode(o.exit_code);
                  out.set_stdout(std::move(o.stdout_text));
                });
          });
          if (routed && !out.response().success())
            return {GrpcCode::Unknown, out.response().message(), {}};
          return {GrpcCode::Ok, {}, out.SerializeAsString()};
        },
        true};
  }

  template <typename Request, typename Answer, typename F>
  void add(const char* rpc, F body) {
    routes_[std::string(kCmd) + rpc] = method<Request, Answer>(true, std::move(body));
  }
  // An RPC taking the VMI and answering a plain Response through handler.<fn>(vmi_json).
  void vmi(const char* rpc, common::Status (CmdHandler::*fn)(std::string_view)) {
    CmdHandler& h = handler_;
    add<v1::VMIRequest, v1::Response>(rpc, [&h, rpc, fn](const v1::VMIRequest& req, auto& out) {
      answer(&out, rpc, [&] { return (h.*fn)(req.vmi().vmijson()); });
    });
  }
  template <typename Request, typename Answer>
  void refuse(const char* rpc) {
    routes_[std::string(kCmd) + rpc] =
        method<Request, Answer>(false, [rpc, message = not_supported_](const auto&, Answer& out) {
          fail(response_of(&out), rpc, message);
        });
  }

  CmdHandler& handler_;
  std::string not_supported_;
  std::map<std::string, RpcMethod> routes_;
};

}  // namespace

struct CmdServer::Impl {
  std::unique_ptr<RpcServer> server;
};

CmdServer::CmdServer(std::unique_ptr<Impl> impl, std::filesystem::path socket_path)
    : impl_(std::move(impl)), socket_path_(std::move(socket_path)) {}

common::Result<std::unique_ptr<CmdServer>> CmdServer::start(CmdServerOptions options,
                                                            CmdHandler& handler) {
  const auto init = init_socket_path(options.share_dir);
  const auto ready = ready_socket_path(options.share_dir);
  if (auto address = common::unix_address(init); !address)  // the longer of the two names
    return tl::unexpected(std::move(address.error()).wrap("command server"));
  std::error_code ec;
  std::filesystem::create_directories(init.parent_path(), ec);
  if (ec) return common::fail(ec, "creating " + init.parent_path().string());
  std::filesystem::remove(ready, ec);  // a previous launcher's socket: not ready yet

  auto listener = common::listen_unix(init, 64);
  if (!listener) return tl::unexpected(std::move(listener.error()).wrap("command server"));
  auto server = RpcServer::start(std::move(*listener),
                                 Routes(handler, std::move(options.not_supported)).build());
  if (!server) return tl::unexpected(std::move(server.error()).wrap("command server"));
  if (::rename(init.c_str(), ready.c_str()) != 0)
    return common::fail_errno("command server: renaming " + init.string() + " to " +
                              ready.string());
  CHL_LOG_INFO("cmd: serving kubevirt.cmd.v1 on {}", ready.string());
  auto impl = std::make_unique<Impl>();
  impl->server = std::move(*server);
  return std::unique_ptr<CmdServer>(new CmdServer(std::move(impl), ready));
}

CmdServer::~CmdServer() {
  impl_->server->stop(std::chrono::seconds(1));
  std::error_code ec;
  std::filesystem::remove(socket_path_, ec);
}

}  // namespace chl::kubevirt

#include "kubevirt/cmd_server.hpp"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <exception>
#include <system_error>

#include "common/log.hpp"
#include "common/unix_socket.hpp"
#include "kubevirt/proto/cmd.grpc.pb.h"
#include "kubevirt/proto/cmd_info.grpc.pb.h"

namespace chl::kubevirt {

namespace v1 = ::kubevirt::cmd::v1;
namespace info = ::kubevirt::cmd::info;

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
grpc::Status answer(v1::Response* out, const char* rpc, F&& call) {
  try {
    auto result = call();
    out->set_success(result.has_value());
    if (!result) fail(out, rpc, result.error().message());
  } catch (const std::exception& e) {
    fail(out, rpc, std::string("internal error: ") + e.what());
  }
  return grpc::Status::OK;
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

class InfoService final : public info::CmdInfo::Service {
  grpc::Status Info(grpc::ServerContext*, const info::CmdInfoRequest*,
                    info::CmdInfoResponse* out) override {
    out->add_supportedcmdversions(1);
    return grpc::Status::OK;
  }
};

// An RPC the launcher does not implement: an immediate, clear refusal.
#define CHL_CMD_NOT_SUPPORTED(Rpc, Request, Answer)                                      \
  grpc::Status Rpc(grpc::ServerContext*, const v1::Request*, v1::Answer* out) override { \
    fail(response_of(out), #Rpc, not_supported_);                                        \
    return grpc::Status::OK;                                                             \
  }

// An RPC taking the VMI and answering a plain Response through handler.<method>(vmi_json).
#define CHL_CMD_VMI(Rpc, method)                                                                  \
  grpc::Status Rpc(grpc::ServerContext*, const v1::VMIRequest* req, v1::Response* out) override { \
    return answer(out, #Rpc, [&] { return handler_.method(req->vmi().vmijson()); });              \
  }

class CmdService final : public v1::Cmd::Service {
 public:
  CmdService(CmdHandler& handler, std::string not_supported)
      : handler_(handler), not_supported_(std::move(not_supported)) {}

  grpc::Status SyncVirtualMachine(grpc::ServerContext*, const v1::VMIRequest* req,
                                  v1::Response* out) override {
    return answer(out, "SyncVirtualMachine", [&] {
      return handler_.sync(req->vmi().vmijson(), to_sync_options(req->options()));
    });
  }
  CHL_CMD_VMI(PauseVirtualMachine, pause)
  CHL_CMD_VMI(UnpauseVirtualMachine, unpause)
  CHL_CMD_VMI(ShutdownVirtualMachine, shutdown)
  CHL_CMD_VMI(KillVirtualMachine, kill)
  CHL_CMD_VMI(DeleteVirtualMachine, delete_domain)
  CHL_CMD_VMI(SoftRebootVirtualMachine, soft_reboot)
  CHL_CMD_VMI(ResetVirtualMachine, reset)
  CHL_CMD_VMI(SyncVirtualMachineCPUs, sync_cpus)
  CHL_CMD_VMI(SyncVirtualMachineMemory, sync_memory)

  grpc::Status Ping(grpc::ServerContext*, const v1::EmptyRequest*, v1::Response* out) override {
    return answer(out, "Ping", [&] { return handler_.ping(); });
  }
  grpc::Status GetDomain(grpc::ServerContext*, const v1::EmptyRequest*,
                         v1::DomainResponse* out) override {
    return answer(out->mutable_response(), "GetDomain", [&] {
      return handler_.get_domain().map([&](std::string json) { out->set_domain(std::move(json)); });
    });
  }
  grpc::Status GetDomainStats(grpc::ServerContext*, const v1::EmptyRequest*,
                              v1::DomainStatsResponse* out) override {
    return answer(out->mutable_response(), "GetDomainStats", [&] {
      return handler_.get_domain_stats().map(
          [&](std::string json) { out->set_domainstats(std::move(json)); });
    });
  }
  grpc::Status GetQemuVersion(grpc::ServerContext*, const v1::EmptyRequest*,
                              v1::QemuVersionResponse* out) override {
    return answer(out->mutable_response(), "GetQemuVersion", [&] {
      return handler_.get_qemu_version().map(
          [&](std::string version) { out->set_version(std::move(version)); });
    });
  }

  // Everything else (docs/kubevirt.md lists why each is not supported).
  CHL_CMD_NOT_SUPPORTED(FreezeVirtualMachine, FreezeRequest, Response)
  CHL_CMD_NOT_SUPPORTED(UnfreezeVirtualMachine, VMIRequest, Response)
  CHL_CMD_NOT_SUPPORTED(MigrateVirtualMachine, MigrationRequest, Response)
  CHL_CMD_NOT_SUPPORTED(SyncMigrationTarget, VMIRequest, Response)
  CHL_CMD_NOT_SUPPORTED(CancelVirtualMachineMigration, VMIRequest, Response)
  CHL_CMD_NOT_SUPPORTED(SignalTargetPodCleanup, VMIRequest, Response)
  CHL_CMD_NOT_SUPPORTED(FinalizeVirtualMachineMigration, VMIRequest, Response)
  CHL_CMD_NOT_SUPPORTED(HotplugHostDevices, VMIRequest, Response)
  CHL_CMD_NOT_SUPPORTED(GetGuestInfo, EmptyRequest, GuestInfoResponse)
  CHL_CMD_NOT_SUPPORTED(GetUsers, EmptyRequest, GuestUserListResponse)
  CHL_CMD_NOT_SUPPORTED(GetFilesystems, EmptyRequest, GuestFilesystemsResponse)
  CHL_CMD_NOT_SUPPORTED(Exec, ExecRequest, ExecResponse)
  CHL_CMD_NOT_SUPPORTED(GuestPing, GuestPingRequest, GuestPingResponse)
  CHL_CMD_NOT_SUPPORTED(VirtualMachineMemoryDump, MemoryDumpRequest, Response)
  CHL_CMD_NOT_SUPPORTED(GetSEVInfo, EmptyRequest, SEVInfoResponse)
  CHL_CMD_NOT_SUPPORTED(GetLaunchMeasurement, VMIRequest, LaunchMeasurementResponse)
  CHL_CMD_NOT_SUPPORTED(InjectLaunchSecret, InjectLaunchSecretRequest, Response)
  CHL_CMD_NOT_SUPPORTED(GetDomainDirtyRateStats, EmptyRequest, DirtyRateStatsResponse)
  CHL_CMD_NOT_SUPPORTED(GetScreenshot, VMIRequest, ScreenshotResponse)
  CHL_CMD_NOT_SUPPORTED(BackupVirtualMachine, BackupRequest, Response)
  CHL_CMD_NOT_SUPPORTED(RedefineCheckpoint, RedefineCheckpointRequest, RedefineCheckpointResponse)
  CHL_CMD_NOT_SUPPORTED(GetVMStats, VMStatsRequest, VMStatsResponse)

 private:
  CmdHandler& handler_;
  std::string not_supported_;
};

#undef CHL_CMD_VMI
#undef CHL_CMD_NOT_SUPPORTED

}  // namespace

struct CmdServer::Impl {
  CmdService cmd;
  InfoService info;
  std::unique_ptr<grpc::Server> server;
  Impl(CmdHandler& handler, std::string not_supported) : cmd(handler, std::move(not_supported)) {}
};

CmdServer::CmdServer(std::unique_ptr<Impl> impl, std::filesystem::path socket_path)
    : impl_(std::move(impl)), socket_path_(std::move(socket_path)) {}

common::Result<std::unique_ptr<CmdServer>> CmdServer::start(CmdServerOptions options,
                                                            CmdHandler& handler) {
  const auto init = init_socket_path(options.share_dir);
  const auto ready = ready_socket_path(options.share_dir);
  // Checked here so that a path gRPC cannot bind is our clear error, not gRPC's log line.
  if (auto address = common::unix_address(init); !address)  // the longer of the two names
    return tl::unexpected(std::move(address.error()).wrap("command server"));
  std::error_code ec;
  std::filesystem::create_directories(init.parent_path(), ec);
  if (ec) return common::fail(ec, "creating " + init.parent_path().string());
  std::filesystem::remove(ready, ec);  // a previous launcher's socket: not ready yet

  auto impl = std::make_unique<Impl>(handler, std::move(options.not_supported));
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + init.string(), grpc::InsecureServerCredentials());
  builder.RegisterService(&impl->cmd);
  builder.RegisterService(&impl->info);
  impl->server = builder.BuildAndStart();
  if (!impl->server)
    return common::fail(std::errc::address_not_available,
                        "command server: cannot listen on " + init.string());
  if (::rename(init.c_str(), ready.c_str()) != 0)
    return common::fail_errno("command server: renaming " + init.string() + " to " +
                              ready.string());
  CHL_LOG_INFO("cmd: serving kubevirt.cmd.v1 on {}", ready.string());
  return std::unique_ptr<CmdServer>(new CmdServer(std::move(impl), ready));
}

CmdServer::~CmdServer() {
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  impl_->server->Wait();
  std::error_code ec;
  std::filesystem::remove(socket_path_, ec);
}

}  // namespace chl::kubevirt

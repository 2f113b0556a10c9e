// kubevirt_bench: what KubeVirt's launcher protocol costs a launcher in memory and idle
// wake-ups, with our transport and with Debian's gRPC.
//
//   kubevirt_bench [--rpcs N] [--idle-seconds S]
//
// Runs four child processes and reads their /proc/<pid>/status (VmRSS, all threads):
//   baseline     — rss_baseline: a trivial process linking chl_common, no gRPC;
//   grpc linked  — this binary, gRPC loaded and initialised but unused;
//   grpc serving — this binary serving kubevirt.cmd.v1 with grpc++ (the transport ch-launcher
//                  had before) and sending a domain event per Sync with a grpc++ stub;
//   ours serving — kubevirt_serve: CmdServer + NotifyClient as shipped (HTTP/2 via libnghttp2,
//                  protobuf-lite; no gRPC library linked);
// both serving children answer from the same BenchHandler (bench_handler.hpp), after N RPCs
// from a grpc++ client (Sync, GetDomain, GetDomainStats, Ping in turn), their notifications
// going to a grpc++ notify server in this process. Then counts each serving process's context
// switches (every thread) over the same S idle seconds. Prints RESULT lines (bench/run.sh).
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "bench/kubevirt/bench_handler.hpp"
#include "common/log.hpp"
#include "kubevirt/proto/cmd.grpc.pb.h"
#include "kubevirt/proto/notify.grpc.pb.h"

extern char** environ;

namespace chl::bench {
void wait_for_stdin_eof() {
  char buf[64];
  while (::read(STDIN_FILENO, buf, sizeof buf) > 0) {
  }
}
}  // namespace chl::bench

namespace {

using namespace chl::kubevirt;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace v1 = ::kubevirt::cmd::v1;
namespace nv1 = ::kubevirt::notify::v1;
using chl::bench::wait_for_stdin_eof;

// ready_socket_path() without linking chl_kubevirt_rpc into the gRPC child.
fs::path launcher_sock(const fs::path& share) { return share / "sockets" / "launcher-sock"; }

// ---- the gRPC serving child: the same RPCs with grpc++ ----

class GrpcCmd final : public v1::Cmd::Service {
 public:
  explicit GrpcCmd(CmdHandler& h) : h_(h) {}
  grpc::Status SyncVirtualMachine(grpc::ServerContext*, const v1::VMIRequest* req,
                                  v1::Response* out) override {
    out->set_success(h_.sync(req->vmi().vmijson(), {}).has_value());
    return grpc::Status::OK;
  }
  grpc::Status Ping(grpc::ServerContext*, const v1::EmptyRequest*, v1::Response* out) override {
    out->set_success(h_.ping().has_value());
    return grpc::Status::OK;
  }
  grpc::Status GetDomain(grpc::ServerContext*, const v1::EmptyRequest*,
                         v1::DomainResponse* out) override {
    auto d = h_.get_domain();
    out->mutable_response()->set_success(d.has_value());
    if (d) out->set_domain(*d);
    return grpc::Status::OK;
  }
  grpc::Status GetDomainStats(grpc::ServerContext*, const v1::EmptyRequest*,
                              v1::DomainStatsResponse* out) override {
    auto s = h_.get_domain_stats();
    out->mutable_response()->set_success(s.has_value());
    if (s) out->set_domainstats(*s);
    return grpc::Status::OK;
  }

 private:
  CmdHandler& h_;
};

int grpc_serve(const fs::path& share) {
  auto notify = nv1::Notify::NewStub(grpc::CreateChannel(
      "unix:" + (share / "domain-notify-pipe.sock").string(), grpc::InsecureChannelCredentials()));
  chl::bench::BenchHandler handler([&](std::string json) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    nv1::DomainEventRequest req;
    req.set_domainjson(std::move(json));
    req.set_eventtype("MODIFIED");
    nv1::Response r;
    notify->HandleDomainEvent(&ctx, req, &r);
  });
  GrpcCmd cmd(handler);
  fs::create_directories(share / "sockets");
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + launcher_sock(share).string(),
                           grpc::InsecureServerCredentials());
  builder.RegisterService(&cmd);
  auto server = builder.BuildAndStart();
  if (!server) return 1;
  wait_for_stdin_eof();
  server->Shutdown(std::chrono::system_clock::now() + 1s);
  return 0;
}

int idle_linked() {
  // gRPC initialised as a launcher would before it serves: a channel object, no connection.
  auto channel = grpc::CreateChannel("unix:/nonexistent", grpc::InsecureChannelCredentials());
  wait_for_stdin_eof();
  return channel ? 0 : 1;
}

// ---- the driver ----

struct Child {
  pid_t pid = -1;
  int stdin_fd = -1;
};

Child spawn(const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[0], STDIN_FILENO);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  Child c;
  if (posix_spawn(&c.pid, args[0], &fa, nullptr, args.data(), environ) != 0) c.pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[0]);
  c.stdin_fd = fds[1];
  return c;
}

void finish(Child& c) {
  if (c.pid < 0) return;
  ::close(c.stdin_fd);
  int status = 0;
  ::waitpid(c.pid, &status, 0);
  c.pid = -1;
}

// A field of /proc/<pid>/status, in kB or as a count.
long status_field(pid_t pid, const std::string& task, const char* key) {
  std::ifstream in("/proc/" + std::to_string(pid) + task + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(std::strlen(key)));
  return -1;
}

long rss_kib(pid_t pid) { return status_field(pid, "", "VmRSS:"); }

long context_switches(pid_t pid) {
  long total = 0;
  for (const auto& t : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    const std::string task = "/task/" + t.path().filename().string();
    total += status_field(pid, task, "voluntary_ctxt_switches:") +
             status_field(pid, task, "nonvoluntary_ctxt_switches:");
  }
  return total;
}

// The notify server standing in for virt-handler.
class CountingNotify final : public ::kubevirt::notify::v1::Notify::Service {
 public:
  std::atomic<long> events{0};
  grpc::Status HandleDomainEvent(grpc::ServerContext*,
                                 const ::kubevirt::notify::v1::DomainEventRequest*,
                                 ::kubevirt::notify::v1::Response* out) override {
    ++events;
    out->set_success(true);
    return grpc::Status::OK;
  }
};

// N RPCs against the Cmd server on `share`; returns the failures.
int drive_rpcs(const fs::path& share, int rpcs) {
  const fs::path sock = launcher_sock(share);
  for (int i = 0; i < 500 && !fs::exists(sock); ++i) std::this_thread::sleep_for(10ms);
  auto stub = v1::Cmd::NewStub(
      grpc::CreateChannel("unix:" + sock.string(), grpc::InsecureChannelCredentials()));
  v1::VMIRequest sync;
  sync.mutable_vmi()->set_vmijson(R"({"metadata":{"name":"vm1","namespace":"ns1"}})");
  int failures = 0;
  for (int i = 0; i < rpcs; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    v1::Response r;
    v1::DomainResponse d;
    v1::DomainStatsResponse s;
    grpc::Status st;
    switch (i % 4) {
      case 0:
        st = stub->SyncVirtualMachine(&ctx, sync, &r);
        break;
      case 1:
        st = stub->GetDomain(&ctx, {}, &d);
        break;
      case 2:
        st = stub->GetDomainStats(&ctx, {}, &s);
        break;
      default:
        st = stub->Ping(&ctx, {}, &r);
        break;
    }
    failures += st.ok() ? 0 : 1;
  }
  return failures;
}

struct NotifyEndpoint {
  CountingNotify service;
  std::unique_ptr<grpc::Server> server;
  explicit NotifyEndpoint(const fs::path& share) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + (share / "domain-notify-pipe.sock").string(),
                             grpc::InsecureServerCredentials());
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
  }
  ~NotifyEndpoint() { server->Shutdown(std::chrono::system_clock::now() + 1s); }
};

int drive(const std::string& self, int rpcs, int idle_seconds) {
  const fs::path root = fs::temp_directory_path() / ("chl-kvb-" + std::to_string(::getpid()));
  const fs::path ours_share = root / "ours";
  const fs::path grpc_share = root / "grpc";
  fs::create_directories(ours_share);
  fs::create_directories(grpc_share);
  const fs::path dir = fs::path(self).parent_path();
  NotifyEndpoint ours_notify(ours_share);
  NotifyEndpoint grpc_notify(grpc_share);
  Child baseline = spawn({(dir / "rss_baseline").string()});
  Child linked = spawn({self, "idle"});
  Child grpc_serving = spawn({self, "grpc-serve", grpc_share.string()});
  Child ours_serving = spawn({(dir / "kubevirt_serve").string(), ours_share.string()});
  if (baseline.pid < 0 || linked.pid < 0 || grpc_serving.pid < 0 || ours_serving.pid < 0) {
    std::fprintf(stderr, "kubevirt_bench: cannot start the children\n");
    return 1;
  }
  const int ours_failures = drive_rpcs(ours_share, rpcs);
  const int grpc_failures = drive_rpcs(grpc_share, rpcs);
  std::this_thread::sleep_for(500ms);  // notifications drain, allocations settle

  const long base = rss_kib(baseline.pid);
  const long link = rss_kib(linked.pid);
  const long ours_rss = rss_kib(ours_serving.pid);
  const long grpc_rss = rss_kib(grpc_serving.pid);
  const long ours_threads = status_field(ours_serving.pid, "", "Threads:");
  const long grpc_threads = status_field(grpc_serving.pid, "", "Threads:");
  const long ours_cs0 = context_switches(ours_serving.pid);
  const long grpc_cs0 = context_switches(grpc_serving.pid);
  std::this_thread::sleep_for(std::chrono::seconds(idle_seconds));
  const long ours_cs1 = context_switches(ours_serving.pid);
  const long grpc_cs1 = context_switches(grpc_serving.pid);

  std::printf(
      "kubevirt_bench: %d RPCs each; ours: %d failed, %ld domain events received, %ld threads; "
      "gRPC: %d failed, %ld domain events received, %ld threads\n",
      rpcs, ours_failures, ours_notify.service.events.load(), ours_threads, grpc_failures,
      grpc_notify.service.events.load(), grpc_threads);
  std::printf(
      "RESULT\tkubevirt_rss_baseline\tRSS of a trivial process (chl_common, no gRPC)\t%ld"
      "\t\t\tKiB\tinfo\t\n",
      base);
  std::printf(
      "RESULT\tkubevirt_rss_grpc_linked\tRSS added by linking and initialising gRPC, "
      "unused\t%ld\t\t\tKiB\tinfo\t\n",
      link - base);
  // Target: the launcher (7.4 MiB without the protocol) stays within 12 MiB (issue 24).
  std::printf(
      "RESULT\tkubevirt_rss_serving\tRSS added by the cmd server + notify client after %d "
      "RPCs (ours: HTTP/2 + protobuf-lite)\t%ld\tgRPC\t%ld\tKiB\tabs_le\t4710\n",
      rpcs, ours_rss - base, grpc_rss - base);
  std::printf(
      "RESULT\tkubevirt_idle_wakeups\ttransport wake-ups per second, idle (all "
      "threads)\t%.1f\tgRPC\t%.1f\t/s\tabs_le\t0\n",
      static_cast<double>(ours_cs1 - ours_cs0) / idle_seconds,
      static_cast<double>(grpc_cs1 - grpc_cs0) / idle_seconds);

  finish(baseline);
  finish(linked);
  finish(grpc_serving);
  finish(ours_serving);
  std::error_code ec;
  fs::remove_all(root, ec);
  return ours_failures + grpc_failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "grpc-serve" && argc > 2) return grpc_serve(argv[2]);
  if (mode == "idle") return idle_linked();
  int rpcs = 2000;
  int idle_seconds = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--rpcs") == 0)
      rpcs = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--idle-seconds") == 0)
      idle_seconds = std::atoi(argv[i + 1]);
  }
  chl::common::log::logger()->set_level(spdlog::level::warn);
  return drive(fs::canonical("/proc/self/exe").string(), rpcs, idle_seconds);
}

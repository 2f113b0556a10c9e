// kubevirt_bench: what KubeVirt's gRPC protocol costs a launcher in memory and idle wake-ups.
//
//   kubevirt_bench [--rpcs N] [--idle-seconds S]
//
// Runs three child processes and reads their /proc/<pid>/status (VmRSS, all threads):
//   baseline — rss_baseline: a trivial process linking chl_common, no gRPC;
//   linked   — this binary, gRPC loaded and initialised but unused;
//   serving  — this binary serving kubevirt.cmd.v1 on <share>/sockets/launcher-sock with a
//              handler answering from to_domain_json/to_stats_json, and a NotifyClient sending a
//              domain event for every Sync to this process's own notify server, after N RPCs
//              (Sync, GetDomain, GetDomainStats, Ping in turn).
// Then counts the serving process's context switches (every thread) over S idle seconds.
// Prints RESULT lines (bench/run.sh).
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

#include "common/log.hpp"
#include "kubevirt/cmd_server.hpp"
#include "kubevirt/domain_json.hpp"
#include "kubevirt/notify_client.hpp"
#include "kubevirt/proto/cmd.grpc.pb.h"
#include "kubevirt/proto/notify.grpc.pb.h"
#include "kubevirt/stats_json.hpp"

extern char** environ;

namespace {

using namespace chl::kubevirt;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

// ---- the serving child ----

class BenchHandler final : public CmdHandler {
 public:
  explicit BenchHandler(NotifyClient& notify) : notify_(notify) {
    doc_.vmi_name = "vm1";
    doc_.vmi_namespace = "ns1";
    doc_.vmi_uid = "5b0c2a41-9e3d-4f1a-8b7c-6d5e4f3a2b10";
    doc_.uuid = "d7901662-86da-450a-a7f8-552214e3288c";
    doc_.memory_kib = 65536;
    doc_.machine = "pc-q35-10.0";
    doc_.interfaces.push_back({.name = "default",
                               .mac = "02:42:ac:11:00:02",
                               .type = "ethernet",
                               .target_device = "tap0",
                               .model = "virtio",
                               .mtu = 1500});
    doc_.state = chl::events::DomainState::Running;
  }
  chl::common::Status sync(std::string_view, const SyncOptions&) override {
    notify_.send_domain_event(to_domain_json(doc_).dump(), DomainEventType::Modified);
    return {};
  }
  chl::common::Status pause(std::string_view) override { return {}; }
  chl::common::Status unpause(std::string_view) override { return {}; }
  chl::common::Status shutdown(std::string_view) override { return {}; }
  chl::common::Status kill(std::string_view) override { return {}; }
  chl::common::Status delete_domain(std::string_view) override { return {}; }
  chl::common::Status soft_reboot(std::string_view) override { return {}; }
  chl::common::Status reset(std::string_view) override { return {}; }
  chl::common::Status ping() override { return {}; }
  chl::common::Result<std::string> get_domain() override { return to_domain_json(doc_).dump(); }
  chl::common::Result<std::string> get_domain_stats() override {
    DomainStatsDocument s;
    s.name = "ns1_vm1";
    s.cpu.time_ns = 1;
    s.vcpus.resize(2);
    return to_stats_json(s).dump();
  }
  chl::common::Result<std::string> get_qemu_version() override { return std::string("v52.0"); }
  chl::common::Status sync_cpus(std::string_view) override { return {}; }
  chl::common::Status sync_memory(std::string_view) override { return {}; }

 private:
  NotifyClient& notify_;
  DomainDocument doc_;
};

void wait_for_stdin_eof() {
  char buf[64];
  while (::read(STDIN_FILENO, buf, sizeof buf) > 0) {
  }
}

int serve(const fs::path& share) {
  NotifyClientOptions o;
  o.socket_path = (share / "domain-notify-pipe.sock").string();
  NotifyClient notify(o);
  BenchHandler handler(notify);
  auto server = CmdServer::start({.share_dir = share}, handler);
  if (!server) {
    std::fprintf(stderr, "serve: %s\n", server.error().message().c_str());
    return 1;
  }
  wait_for_stdin_eof();
  notify.flush(std::chrono::steady_clock::now() + 1s);
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

int drive(const std::string& self, int rpcs, int idle_seconds) {
  const fs::path share = fs::temp_directory_path() / ("chl-kvb-" + std::to_string(::getpid()));
  fs::create_directories(share);
  const fs::path baseline_bin = fs::path(self).parent_path() / "rss_baseline";
  Child baseline = spawn({baseline_bin.string()});
  Child linked = spawn({self, "idle"});
  Child serving = spawn({self, "serve", share.string()});
  if (baseline.pid < 0 || linked.pid < 0 || serving.pid < 0) {
    std::fprintf(stderr, "kubevirt_bench: cannot start the children\n");
    return 1;
  }

  CountingNotify notify;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + (share / "domain-notify-pipe.sock").string(),
                           grpc::InsecureServerCredentials());
  builder.RegisterService(&notify);
  auto notify_server = builder.BuildAndStart();

  const fs::path sock = ready_socket_path(share);
  for (int i = 0; i < 500 && !fs::exists(sock); ++i) std::this_thread::sleep_for(10ms);
  auto stub = ::kubevirt::cmd::v1::Cmd::NewStub(
      grpc::CreateChannel("unix:" + sock.string(), grpc::InsecureChannelCredentials()));
  ::kubevirt::cmd::v1::VMIRequest sync;
  sync.mutable_vmi()->set_vmijson(R"({"metadata":{"name":"vm1","namespace":"ns1"}})");
  int failures = 0;
  for (int i = 0; i < rpcs; ++i) {
    grpc::ClientContext ctx;
    ::kubevirt::cmd::v1::Response r;
    ::kubevirt::cmd::v1::DomainResponse d;
    ::kubevirt::cmd::v1::DomainStatsResponse s;
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
  std::this_thread::sleep_for(500ms);  // notifications drain, allocations settle

  const long base = rss_kib(baseline.pid);
  const long link = rss_kib(linked.pid);
  const long serve_rss = rss_kib(serving.pid);
  const long threads = status_field(serving.pid, "", "Threads:");
  const long cs0 = context_switches(serving.pid);
  std::this_thread::sleep_for(std::chrono::seconds(idle_seconds));
  const long cs1 = context_switches(serving.pid);

  std::printf(
      "kubevirt_bench: %d RPCs (%d failed), %ld domain events received; serving "
      "process has %ld threads\n",
      rpcs, failures, notify.events.load(), threads);
  std::printf(
      "RESULT\tkubevirt_rss_baseline\tRSS of a trivial process (chl_common, no gRPC)\t%ld"
      "\t\t\tKiB\tinfo\t\n",
      base);
  std::printf(
      "RESULT\tkubevirt_rss_grpc_linked\tRSS added by linking and initialising gRPC, "
      "unused\t%ld\t\t\tKiB\tinfo\t\n",
      link - base);
  std::printf(
      "RESULT\tkubevirt_rss_grpc_serving\tRSS added by the cmd server + notify client "
      "after %d RPCs\t%ld\t\t\tKiB\tinfo\t\n",
      rpcs, serve_rss - base);
  std::printf(
      "RESULT\tkubevirt_idle_wakeups\tgRPC transport wake-ups per second, idle (all "
      "threads)\t%.1f\t\t\t/s\tinfo\t\n",
      static_cast<double>(cs1 - cs0) / idle_seconds);

  finish(baseline);
  finish(linked);
  finish(serving);
  notify_server->Shutdown(std::chrono::system_clock::now() + 1s);
  std::error_code ec;
  fs::remove_all(share, ec);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "serve" && argc > 2) return serve(argv[2]);
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

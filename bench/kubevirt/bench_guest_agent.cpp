// The guest agent in virt-launcher mode on Cloud Hypervisor (the VMM double's hybrid vsock, a real
// qemu-ga on the host as the guest's agent: tests/guest_agent/host_qemu_ga.hpp):
//   - GuestPing and GetGuestInfo through gRPC, p50/p99 of N, beside the floor: guest-ping sent by
//     our agent client straight to the same qemu-ga's Unix socket (no gRPC, no vsock hop);
//   - the launcher's RSS with the agent connected and the poller running, and its context
//     switches over 10 s (the poller's 5 s/10 s rounds), and without an agent (reconnect attempts).
// Usage: bench_guest_agent LAUNCHER VMM GUEST_ELF [N]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#define DOCTEST_CONFIG_IMPLEMENT  // test_notify_server.cpp asserts with doctest
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include <nlohmann/json.hpp>

#include "common/child_process.hpp"
#include "guest_agent/agent_client.hpp"
#include "kubevirt/cmd_server.hpp"
#include "kubevirt/proto/cmd.grpc.pb.h"
#include "tests/guest_agent/agent_test_support.hpp"
#include "tests/guest_agent/host_qemu_ga.hpp"
#include "tests/kubevirt/test_notify_server.hpp"
#include "bench/kubevirt/vl_bench_support.hpp"

extern char** environ;

namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Launch {
  chl::common::ChildProcess child;
  std::unique_ptr<chl::test::TestNotifyServer> notify;
  std::unique_ptr<::kubevirt::cmd::v1::Cmd::Stub> cmd;
};

Launch launch(const fs::path& pod, const std::string& launcher, const std::string& vmm,
              const fs::path& cdisks) {
  Launch l;
  fs::create_directories(pod / "share");
  l.notify =
      std::make_unique<chl::test::TestNotifyServer>(pod / "share" / "domain-notify-pipe.sock");
  l.child = chl::bench::spawn_logged({launcher,
             "virt-launcher",
             "--name",
             "benchvm",
             "--namespace",
             "default",
             "--kubevirt-share-dir",
             (pod / "share").string(),
             "--private-dir",
             (pod / "private").string(),
             "--ephemeral-disk-dir",
             (pod / "eph").string(),
             "--container-disk-dir",
             cdisks.string(),
             "--vmm-binary",
             vmm,
             "--hypervisor",
             "cloud-hypervisor"}, pod / "out");
  const auto sock = chl::kubevirt::ready_socket_path(pod / "share");
  while (!fs::exists(sock)) std::this_thread::sleep_for(1ms);
  l.cmd = ::kubevirt::cmd::v1::Cmd::NewStub(
      grpc::CreateChannel("unix:" + sock.string(), grpc::InsecureChannelCredentials()));
  ::kubevirt::cmd::v1::VMIRequest req;
  req.mutable_vmi()->set_vmijson(chl::bench::vl_vmi_json());
  ::kubevirt::cmd::v1::Response r;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  if (!l.cmd->SyncVirtualMachine(&ctx, req, &r).ok() || !r.success()) {
    std::fprintf(stderr, "Sync failed: %s\n", r.message().c_str());
    std::exit(1);
  }
  return l;
}

bool agent_connected(const chl::test::TestNotifyServer& n) {
  bool up = false;
  for (const auto& e : n.received()) {
    if (e.k8s || !e.json["Spec"]["Devices"]["Channels"].is_array()) continue;
    up = e.json["Spec"]["Devices"]["Channels"][0]["Target"].value("State", "") == "connected";
  }
  return up;
}

}  // namespace

int main(int argc, char** argv) {
  doctest::Context doctest_context;
  doctest_context.setAsDefaultForAssertsOutOfTestCases();
  if (argc < 4) {
    std::fprintf(stderr, "usage: bench_guest_agent LAUNCHER VMM GUEST_ELF [N]\n");
    return 2;
  }
  const std::string launcher = argv[1], vmm = argv[2];
  const int n = argc > 4 ? std::max(10, std::atoi(argv[4])) : 200;
  char tmpl[] = "/tmp/chl-bench-ga-XXXXXX";
  const fs::path w = ::mkdtemp(tmpl);
  fs::create_directories(w / "cdisks" / "kernel-boot");
  fs::copy_file(argv[3], w / "cdisks" / "kernel-boot" / "guest.elf");
  std::string why;
  auto ga = chl::test::HostQemuGa::start(w / "ga", w / "qga.sock", why);
  if (!ga) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return 0;
  }
  const fs::path wrapper = w / "vmm.sh";
  std::ofstream(wrapper) << "#!/bin/sh\nexport VMM_DOUBLE_VSOCK_LISTEN='1024="
                         << (w / "qga.sock").string() << "'\nexec '" << vmm << "' \"$@\"\n";
  fs::permissions(wrapper, fs::perms::owner_all);

  // The floor: our client straight on qemu-ga's socket (the same agent, no gRPC, no vsock hop).
  std::vector<double> direct;
  {
    chl::test::LoopThread loop;
    auto client = loop.on_loop([&] {
      auto c = chl::guest_agent::AgentClient::create(
          loop.io, chl::guest_agent::unix_connector(w / "qga.sock"));
      c->start();
      return c;
    });
    while (!loop.on_loop([&] { return client->connected(); })) std::this_thread::sleep_for(1ms);
    for (int i = 0; i < n; ++i) {
      std::promise<void> done;
      const auto t0 = Clock::now();
      boost::asio::post(loop.io, [&] {
        client->execute("guest-ping", nullptr, 5s,
                        [&](chl::common::Result<nlohmann::json>) { done.set_value(); });
      });
      done.get_future().wait();
      direct.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    loop.on_loop([&] {
      client->stop();
      return 0;
    });
  }

  auto l = launch(w / "pod", launcher, wrapper.string(), w / "cdisks");
  while (!agent_connected(*l.notify)) std::this_thread::sleep_for(5ms);
  std::vector<double> ping, info;
  for (int i = 0; i < n; ++i) {
    ::kubevirt::cmd::v1::GuestPingRequest p;
    p.set_domainname("default_benchvm");
    p.set_timeoutseconds(5);
    ::kubevirt::cmd::v1::GuestPingResponse pr;
    grpc::ClientContext c1;
    auto t0 = Clock::now();
    if (!l.cmd->GuestPing(&c1, p, &pr).ok()) std::fprintf(stderr, "GuestPing failed\n");
    ping.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    ::kubevirt::cmd::v1::EmptyRequest e;
    ::kubevirt::cmd::v1::GuestInfoResponse gi;
    grpc::ClientContext c2;
    t0 = Clock::now();
    if (!l.cmd->GetGuestInfo(&c2, e, &gi).ok()) std::fprintf(stderr, "GetGuestInfo failed\n");
    info.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::this_thread::sleep_for(2s);
  const long rss = chl::bench::rss_kib(l.child.pid());
  long c0 = chl::bench::ctxt_switches(l.child.pid());
  std::this_thread::sleep_for(10s);
  const long polling = chl::bench::ctxt_switches(l.child.pid()) - c0;
  ga->kill();  // no agent: the launcher retries the connection with backoff (10 s at most)
  while (agent_connected(*l.notify)) std::this_thread::sleep_for(5ms);
  std::this_thread::sleep_for(12s);
  c0 = chl::bench::ctxt_switches(l.child.pid());
  std::this_thread::sleep_for(20s);
  const long absent = chl::bench::ctxt_switches(l.child.pid()) - c0;
  ::kubevirt::cmd::v1::VMIRequest req;
  req.mutable_vmi()->set_vmijson(chl::bench::vl_vmi_json());
  ::kubevirt::cmd::v1::Response kr;
  grpc::ClientContext kc;
  (void)l.cmd->KillVirtualMachine(&kc, req, &kr);
  (void)l.child.wait_for(30s);
  std::error_code ec;
  fs::remove_all(w, ec);

  std::printf(
      "GuestPing via gRPC + hybrid vsock, %d calls: p50 %.0f us, p99 %.0f us; floor (our client on "
      "qemu-ga's "
      "socket): p50 %.0f us, p99 %.0f us\n",
      n, chl::bench::percentile(ping, 0.5), chl::bench::percentile(ping, 0.99), chl::bench::percentile(direct, 0.5), chl::bench::percentile(direct, 0.99));
  std::printf("GetGuestInfo via gRPC (from the cache), %d calls: p50 %.0f us, p99 %.0f us\n", n,
              chl::bench::percentile(info, 0.5), chl::bench::percentile(info, 0.99));
  std::printf(
      "launcher RSS, agent connected, poller running: %.1f MiB; context switches/s: %.1f with the "
      "agent "
      "polled, %.2f with no agent (reconnect attempts)\n",
      rss / 1024.0, polling / 10.0, absent / 20.0);
  std::printf(
      "RESULT\tga_ping_p50\tguest agent: GuestPing over gRPC + CH hybrid vsock, "
      "p50\t%.0f\tguest-ping straight on qemu-ga's socket\t%.0f\tus\tdiff_le\t1000\n",
      chl::bench::percentile(ping, 0.5), chl::bench::percentile(direct, 0.5));
  std::printf(
      "RESULT\tga_ping_p99\tguest agent: GuestPing over gRPC + CH hybrid vsock, "
      "p99\t%.0f\tguest-ping straight on qemu-ga's socket\t%.0f\tus\tdiff_le\t3000\n",
      chl::bench::percentile(ping, 0.99), chl::bench::percentile(direct, 0.99));
  std::printf(
      "RESULT\tga_info_p50\tguest agent: GetGuestInfo (cache), p50\t%.0f\t\t\tus\tabs_le\t1000\n",
      chl::bench::percentile(info, 0.5));
  std::printf(
      "RESULT\tga_info_p99\tguest agent: GetGuestInfo (cache), p99\t%.0f\t\t\tus\tabs_le\t3000\n",
      chl::bench::percentile(info, 0.99));
  std::printf(
      "RESULT\tga_rss\tguest agent: launcher RSS, agent connected, poller running\t%.1f\treal "
      "virt-launcher pod processes\t141\tMiB\tabs_le\t12\n",
      rss / 1024.0);
  std::printf(
      "RESULT\tga_idle_polled\tguest agent: context switches per second, agent connected and "
      "polled\t%.1f\t\t\t/s\tabs_le\t5\n",
      polling / 10.0);
  std::printf(
      "RESULT\tga_idle_absent\tguest agent: context switches per second, no agent (reconnect with "
      "backoff)\t%.2f\t\t\t/s\tabs_le\t1\n",
      absent / 20.0);
  return 0;
}

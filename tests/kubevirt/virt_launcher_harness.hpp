#pragma once
// The harness of the virt-launcher-mode tests (test_virt_launcher*.cpp, each built twice: Cloud
// Hypervisor and, with CHL_VL_HYPERVISOR "kvm", the libvirt path): the pod's directories and the
// launcher started with virt-launcher's flags, the VMI as virt-handler sends it, a gRPC call with
// a deadline, the notifications' states, and a pod network namespace. Header-only, for tests.
#ifndef CHL_VL_HYPERVISOR
#define CHL_VL_HYPERVISOR "cloud-hypervisor"
#endif
#include <doctest/doctest.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include "common/child_process.hpp"
#include "common/unix_socket.hpp"
#include "kubevirt/cmd_server.hpp"
#include "kubevirt/proto/cmd.grpc.pb.h"
#include "kubevirt/proto/cmd_info.grpc.pb.h"
#include "tests/kubevirt/test_notify_server.hpp"
#include "tests/network/kubevirt_phase1.hpp"
#include "tests/network/netns.hpp"
#include "tests/support/launcher_harness.hpp"
#include "tests/support/linux_guest.hpp"
#include "tests/support/qemu_harness.hpp"
#include "tests/support/test_support.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;
namespace v1 = ::kubevirt::cmd::v1;
namespace fs = std::filesystem;
using chl::test::TempDir;

constexpr const char* kUid = "7d2c9a10-1111-4222-8333-444455556666";
constexpr bool kQemu = std::string_view(CHL_VL_HYPERVISOR) == "kvm";

// The VMI as virt-handler marshals it: defaulted by virt-api (cpu.model host-model, maxSockets,
// machine q35, features.acpi, firmware.uuid, architecture), with a status.
inline std::string vmi_json(bool with_dra_gpu = false) {
  nlohmann::json j = nlohmann::json::parse(R"({
    "kind": "VirtualMachineInstance", "apiVersion": "kubevirt.io/v1",
    "metadata": {"name": "testvm", "namespace": "default", "uid": "", "resourceVersion": "4711",
                 "finalizers": ["kubevirt.io/foregroundDeleteVirtualMachine"]},
    "spec": {
      "domain": {
        "resources": {},
        "cpu": {"cores": 1, "sockets": 1, "maxSockets": 4, "threads": 1, "model": "host-model"},
        "memory": {"guest": "64Mi"},
        "machine": {"type": "q35"},
        "firmware": {"uuid": "0b8a3c6e-8f0e-4f4e-9d5e-1c2b3a4d5e6f",
                     "kernelBoot": {"kernelArgs": "console=ttyS0 kv-flow",
                                    "container": {"image": "registry.example/pvh:1", "kernelPath": "/boot/guest.elf"}}},
        "features": {"acpi": {"enabled": true}},
        "devices": {"autoattachPodInterface": false}
      },
      "evictionStrategy": "None",
      "terminationGracePeriodSeconds": 10,
      "architecture": "amd64"
    },
    "status": {"nodeName": "node01", "phase": "Scheduled", "runtimeUser": 107,
               "activePods": {"0d7b3c52-1c2d-4e5f-8a9b-000000000001": "node01"},
               "currentCPUTopology": {"cores": 1, "sockets": 1, "threads": 1},
               "memory": {"guestAtBoot": "64Mi", "guestCurrent": "64Mi", "guestRequested": "64Mi"}}
  })");
  j["metadata"]["uid"] = kUid;
  if (with_dra_gpu)  // refused on both hypervisors
    j["spec"]["domain"]["devices"]["gpus"] = nlohmann::json::array({{{"name", "gpu1"}, {"claimName", "c"}, {"requestName", "g"}}});
  return j.dump();
}

struct Pod {
  TempDir dir{"chl-vl"};
  Pod() { fs::create_directories(share()); }
  fs::path share() const { return dir.path() / "share"; }
  fs::path priv() const { return dir.path() / "private"; }
  fs::path cdisks() const { return dir.path() / "container-disks"; }
  fs::path ephemeral() const { return dir.path() / "ephemeral"; }
  fs::path hotplug() const { return dir.path() / "hotplug-disks"; }
  fs::path out() const { return dir.path() / "launcher.out"; }
  chl::common::ChildProcess child;
  std::vector<std::string> prefix;  // e.g. `ip netns exec NS`: the launcher in a pod namespace
  std::string hypervisor = CHL_VL_HYPERVISOR;

  void start() {
    fs::create_directories(cdisks() / "kernel-boot");
    fs::copy_file(chl::test::guest_kernel(), cdisks() / "kernel-boot" / "guest.elf");
    fs::create_directories(share());
    // The command line KubeVirt's template writes, flags we have no use for included.
    std::vector<std::string> argv = {chl::test::launcher_binary(), "virt-launcher",
                                     "--qemu-timeout", "240s",
                                     "--name", "testvm", "--uid", kUid, "--namespace", "default",
                                     "--kubevirt-share-dir", share().string(),
                                     "--ephemeral-disk-dir", ephemeral().string(),
                                     "--container-disk-dir", cdisks().string(),
                                     "--hotplug-disk-dir", hotplug().string(),
                                     "--grace-period-seconds", "10", "--hook-sidecars", "0",
                                     "--ovmf-path", "/usr/share/OVMF", "--keep-after-failure",
                                     "--a-flag-from-a-newer-kubevirt", "value",
                                     "--hypervisor", hypervisor,
                                     "--private-dir", priv().string(), "--log-level", "debug"};
    if (kQemu) {
      argv.push_back("--allow-emulation");  // TCG where KVM is not usable (as KubeVirt's flag says)
    } else {
      argv.push_back("--vmm-binary");
      argv.push_back(chl::test::vmm_binary());
    }
    argv.insert(argv.begin(), prefix.begin(), prefix.end());
    chl::common::SpawnOptions so;
    so.argv = argv;
    for (char** e = environ; *e; ++e) so.env.emplace_back(*e);
    int fd = ::open(out().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    so.stdout_fd = fd;
    so.stderr_fd = fd;
    so.new_session = false;
    auto c = chl::common::ChildProcess::spawn(so);
    ::close(fd);
    REQUIRE(c);
    child = std::move(*c);
  }
  std::string output() const { return chl::test::read_file(out()); }
  // `ch-launcher status --json` of the launcher's state directory (under the ephemeral-disk dir).
  std::string status_text() const {
    return chl::test::run_command({chl::test::launcher_binary(), "status", "--json", "--state-dir",
                                   (ephemeral() / "ch-launcher").string()}).output;
  }
  nlohmann::json status() const { return nlohmann::json::parse(status_text(), nullptr, false); }
};

// What a test booting the PVH guest needs: the guest built, and on the libvirt path a runnable
// libvirt; false (having said why) otherwise.
inline bool guest_runnable() {
  if (kQemu && !chl::test::libvirt_runnable()) return false;  // says why
  if (!fs::exists(chl::test::guest_kernel())) {
    chl::test::skip("the PVH test guest is not built");
    return false;
  }
  return true;
}

template <typename F>
grpc::Status call(F&& f, std::chrono::seconds timeout = 60s) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  return f(ctx);
}

inline std::vector<std::string> states(const std::vector<chl::test::ReceivedNotification>& got) {
  std::vector<std::string> s;
  for (const auto& n : got) {
    if (n.k8s) continue;
    s.push_back(n.event_type + " " + n.json["Status"].value("Status", "") + "/" + n.json["Status"].value("Reason", ""));
  }
  return s;
}

// CHL_KUBEVIRT_DUMP_DIR=DIR: write what virt-handler would have received (each notification,
// GetDomain, GetDomainStats) as files, to put beside ../shared/reference/kubevirt-observed-launcher
// (docs/kubevirt.md, "Beside a real virt-launcher").
inline void dump(const std::string& name, const nlohmann::json& j) {
  const char* dir = std::getenv("CHL_KUBEVIRT_DUMP_DIR");
  if (!dir || !*dir) return;
  fs::create_directories(fs::path(dir) / CHL_VL_HYPERVISOR);
  std::ofstream(fs::path(dir) / CHL_VL_HYPERVISOR / name) << j.dump(2) << "\n";
}

inline bool has_state(const chl::test::TestNotifyServer& server, const std::string& want) {
  for (const auto& s : states(server.received()))
    if (s == want) return true;
  return false;
}


// A pod's network namespace with its eth0 (10.244.0.5/24, up), and nothing of phase 1.
// "" when ready, else why the test must skip.
struct PodNetns {
  chl::test::net::Netns ns{"chlvl" + std::to_string(::getpid())};
  std::string up() {
    if (::geteuid() != 0) return "needs root (a pod network namespace made with ip netns)";
    if (!fs::exists(chl::test::guest_kernel())) return "the PVH test guest is not built";
    if (auto e = ns.create(); !e.empty()) return e;
    for (auto e : {chl::test::net::ip(ns.name(), {"link", "add", "eth0", "type", "veth", "peer", "name", "peer0"}),
                   chl::test::net::ip(ns.name(), {"addr", "add", "10.244.0.5/24", "dev", "eth0"}),
                   chl::test::net::ip(ns.name(), {"link", "set", "eth0", "up"}),
                   chl::test::net::ip(ns.name(), {"link", "set", "lo", "up"})})  // as in every pod
      if (!e.empty()) return e;
    return {};
  }
  // Start the launcher in this namespace (`ip netns exec`); its command stub once it serves.
  std::unique_ptr<v1::Cmd::Stub> start(Pod& pod) {
    const auto ip_tool = chl::test::tool("ip");
    REQUIRE(ip_tool);
    pod.prefix = {*ip_tool, "netns", "exec", ns.name()};
    pod.start();
    const auto sock = chl::kubevirt::ready_socket_path(pod.share());
    REQUIRE_MESSAGE(chl::test::wait_until(10s, [&] { return fs::exists(sock); }), pod.output());
    return v1::Cmd::NewStub(grpc::CreateChannel("unix:" + sock.string(), grpc::InsecureChannelCredentials()));
  }
};

// The VMI with one masquerade interface on the pod network.
inline v1::VMIRequest vmi_with_nic() {
  auto j = nlohmann::json::parse(vmi_json());
  j["spec"]["domain"]["devices"]["interfaces"] =
      nlohmann::json::parse(R"([{"name": "default", "masquerade": {}, "macAddress": "02:00:00:aa:bb:cc"}])");
  j["spec"]["networks"] = nlohmann::json::parse(R"([{"name": "default", "pod": {}}])");
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(j.dump());
  return vmi;
}


}  // namespace

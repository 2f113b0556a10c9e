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
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
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
  std::string vmm_binary;  // --vmm-binary on the Cloud Hypervisor path; "": the test VMM
  std::string vmi_name = "testvm";  // --name (the libvirt domain is default_<it>)
  // KubeVirt's non-root launcher: uid/gid 107, no capability (PodNetns::start_non_root).
  bool non_root = false;
  std::vector<std::string> extra_args;  // more launcher flags (e.g. --access-credentials-batch-ms)
  fs::path runtime_dir() const { return dir.path() / "run"; }  // XDG_RUNTIME_DIR (KubeVirt: /var/run)
  // The pod's own mounts, as a real pod has them (live migration between two pods of one
  // machine): the launcher runs in a mount namespace of its own in which this pod's directory is
  // seen at `mount_as` (the same path in every pod, as /var/run/kubevirt is), and /run/libvirt,
  // /run/ch-launcher, /var/lib/libvirt, /var/log/libvirt and /etc/libvirt/qemu are the pod's own
  // (its libvirt daemons, domain state, logs and persistent definitions). "": no namespace, the
  // paths as they are.
  fs::path mount_as;
  // A path of this pod as its launcher sees it.
  fs::path in_pod(const fs::path& p) const {
    if (mount_as.empty()) return p;
    return mount_as / p.lexically_relative(dir.path());
  }
  // The argv prefix that gives the launcher the pod's mounts (mount_as).
  std::vector<std::string> pod_mounts() const {
    std::string script;
    std::vector<std::string> args;
    auto bind = [&](const fs::path& from, const fs::path& to) {
      fs::create_directories(from);
      const auto n = args.size();
      script += "mount --bind \"${" + std::to_string(n + 1) + "}\" \"${" + std::to_string(n + 2) +
                "}\" && ";
      args.push_back(from.string());
      args.push_back(to.string());
    };
    bind(dir.path(), mount_as);
    bind(dir.path() / "libvirt-run", "/run/libvirt");
    bind(dir.path() / "chl-run", "/run/ch-launcher");
    bind(dir.path() / "libvirt-lib", "/var/lib/libvirt");
    bind(dir.path() / "libvirt-log", "/var/log/libvirt");
    bind(dir.path() / "libvirt-etc-qemu", "/etc/libvirt/qemu");  // persistent definitions
    script += "shift " + std::to_string(args.size()) + " && exec \"$@\"";
    std::vector<std::string> argv = {*chl::test::tool("unshare"),
                                     "--mount",
                                     "--propagation",
                                     "private",
                                     "--",
                                     "/bin/sh",
                                     "-c",
                                     script,
                                     "sh"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  void start() {
    // A launcher in a pod namespace needs a libvirt daemon in that namespace; the daemons an
    // earlier case's launcher started end themselves 5 s after their last launcher is gone
    // (a killed one included: docs/qemu/lifecycle.md), so wait for them rather than find them
    // running.
    if (kQemu && !prefix.empty() && mount_as.empty()) {
      std::ifstream pidfile("/run/ch-launcher/libvirt/libvirtd.pid");
      long pid = 0;
      if (pidfile >> pid && pid > 0)
        (void)chl::test::wait_until(15s, [pid] {  // gone, or a zombie a pid 1 does not reap
          std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
          std::string text((std::istreambuf_iterator<char>(st)), std::istreambuf_iterator<char>());
          const auto close = text.rfind(')');
          return close == std::string::npos || close + 2 >= text.size() || text[close + 2] == 'Z';
        });
    }
    fs::create_directories(cdisks() / "kernel-boot");
    fs::copy_file(chl::test::guest_kernel(), cdisks() / "kernel-boot" / "guest.elf");
    fs::create_directories(share());
    // The command line KubeVirt's template writes, flags we have no use for included.
    std::vector<std::string> argv = {chl::test::launcher_binary(),
                                     "virt-launcher",
                                     "--qemu-timeout",
                                     "240s",
                                     "--name",
                                     vmi_name,
                                     "--uid",
                                     kUid,
                                     "--namespace",
                                     "default",
                                     "--kubevirt-share-dir",
                                     in_pod(share()).string(),
                                     "--ephemeral-disk-dir",
                                     in_pod(ephemeral()).string(),
                                     "--container-disk-dir",
                                     in_pod(cdisks()).string(),
                                     "--hotplug-disk-dir",
                                     in_pod(hotplug()).string(),
                                     "--grace-period-seconds",
                                     "10",
                                     "--hook-sidecars",
                                     "0",
                                     "--ovmf-path",
                                     "/usr/share/OVMF",
                                     "--keep-after-failure",
                                     "--a-flag-from-a-newer-kubevirt",
                                     "value",
                                     "--hypervisor",
                                     hypervisor,
                                     "--private-dir",
                                     in_pod(priv()).string(),
                                     "--log-level",
                                     "debug"};
    if (kQemu) {
      argv.push_back("--allow-emulation");  // TCG where KVM is not usable (as KubeVirt's flag says)
    } else {
      argv.push_back("--vmm-binary");
      argv.push_back(vmm_binary.empty() ? chl::test::vmm_binary() : vmm_binary);
    }
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    argv.insert(argv.begin(), prefix.begin(), prefix.end());
    if (!mount_as.empty()) {
      const auto m = pod_mounts();
      argv.insert(argv.begin(), m.begin(), m.end());
    }
    chl::common::SpawnOptions so;
    so.argv = argv;
    for (char** e = environ; *e; ++e) {
      const std::string_view v(*e);
      if (non_root && (v.rfind("XDG_", 0) == 0 || v.rfind("HOME=", 0) == 0)) continue;
      so.env.emplace_back(*e);
    }
    if (non_root) {
      // As virt-controller's rendercontainer.go sets them for a non-root compute container.
      so.env.push_back("XDG_RUNTIME_DIR=" + runtime_dir().string());
      so.env.push_back("XDG_CONFIG_HOME=" + priv().string());
      so.env.push_back("XDG_CACHE_HOME=" + priv().string());
      so.env.push_back("HOME=" + priv().string());
    }
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
  // start(), wait until the launcher serves (launcher-sock), and its command stub.
  std::unique_ptr<v1::Cmd::Stub> serve() {
    start();
    const auto sock = chl::kubevirt::ready_socket_path(share());
    REQUIRE_MESSAGE(chl::test::wait_until(10s, [&] { return fs::exists(sock); }), output());
    return v1::Cmd::NewStub(grpc::CreateChannel("unix:" + sock.string(), grpc::InsecureChannelCredentials()));
  }
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
// (docs/kubevirt/real-launcher.md, "Beside a real virt-launcher").
inline void dump(const std::string& name, const nlohmann::json& j) {
  const char* dir = std::getenv("CHL_KUBEVIRT_DUMP_DIR");
  if (!dir || !*dir) return;
  fs::create_directories(fs::path(dir) / CHL_VL_HYPERVISOR);
  std::ofstream(fs::path(dir) / CHL_VL_HYPERVISOR / name) << j.dump(2) << "\n";
}

// GetDomain as virt-handler reads it (getDomainFromRecord,
// pkg/virt-handler/cache/cache.go:277-310): decoded into api.Domain and read for `vmi`
// (go_domain.hpp); every contract failure is a failed CHECK. `text`, when given, gets the document
// as sent.
inline chl::test::HandlerRead get_domain(v1::Cmd::Stub& cmd, const chl::test::HandlerVmi& vmi,
                                         std::string* text = nullptr) {
  v1::EmptyRequest empty;
  v1::DomainResponse dom;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  REQUIRE(cmd.GetDomain(&ctx, empty, &dom).ok());
  REQUIRE_MESSAGE(dom.response().success(), dom.response().message());
  if (text) *text = dom.domain();
  auto read = chl::test::decode_and_read(dom.domain(), vmi);
  std::string all;
  for (const auto& f : read.failures) all += "\n  " + f;
  CHECK_MESSAGE(all.empty(), "virt-handler's reading of GetDomain failed:" << all);
  return read;
}

// End a running VM as virt-handler does once its grace period is over: Kill, then DeleteDomain
// once GetDomain shows the domain off (the launcher serves the Shutoff domain until then, and
// exits after it, as KubeVirt's does).
inline void kill_and_delete(v1::Cmd::Stub& cmd, const v1::VMIRequest& vmi) {
  v1::Response r;
  CHECK(call([&](auto& c) { return cmd.KillVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  (void)chl::test::wait_until(60s, [&] {
    v1::EmptyRequest e;
    v1::DomainResponse d;
    if (!call([&](auto& c) { return cmd.GetDomain(&c, e, &d); }, 5s).ok()) return true;  // gone
    const auto j = nlohmann::json::parse(d.domain(), nullptr, false);
    if (!j.is_object()) return true;
    const std::string st = j["Status"].value("Status", "");
    return st == "Shutoff" || st == "Crashed" || st == "NoState";
  });
  (void)call([&](auto& c) { return cmd.DeleteVirtualMachine(&c, vmi, &r); });
}

inline bool has_state(const chl::test::TestNotifyServer& server, const std::string& want) {
  for (const auto& s : states(server.received()))
    if (s == want) return true;
  return false;
}

// The domain was reported Running/Unknown, as ADDED or MODIFIED: a launcher whose first
// delivery had to be retried sends its latest state in one ADDED (notify_client.cpp coalesces).
inline bool reported_running(const chl::test::TestNotifyServer& server) {
  for (const auto& s : states(server.received()))
    if (s.ends_with(" Running/Unknown")) return true;
  return false;
}

// What virt-handler received so far, one state a line, for a failure's message.
inline std::string states_text(const chl::test::TestNotifyServer& server) {
  std::string out = "domain events received:";
  for (const auto& s : states(server.received())) out += "\n  " + s;
  return out;
}


// A pod's network namespace with its eth0 (10.244.0.5/24, up), and nothing of phase 1.
// "" when ready, else why the test must skip.
struct PodNetns {
  // `tag` tells apart the pods of one test (a migration's source and target).
  explicit PodNetns(const std::string& tag = "") : ns{"chlvl" + std::to_string(::getpid()) + tag},
                                                   node{"chlvn" + std::to_string(::getpid()) + tag} {}
  chl::test::net::Netns ns;
  // up(), or a skip saying why: false then.
  bool up_or_skip() {
    const std::string why = up();
    if (!why.empty()) chl::test::skip(why);
    return why.empty();
  }
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
  // The node this pod's eth0 is cabled to (its veth peer moved into a namespace of its own):
  // 10.244.0.1/24 (and fd00:10:244::1/64 with `ipv6`), the pod's default route through it. ""
  // when ready, else why not.
  chl::test::net::Netns node;
  std::string add_node(bool ipv6) {
    if (auto e = node.create(); !e.empty()) return e;
    std::vector<std::string> errors = {
        chl::test::net::ip(ns.name(), {"link", "set", "peer0", "netns", node.name()}),
        chl::test::net::ip(node.name(), {"addr", "add", "10.244.0.1/24", "dev", "peer0"}),
        chl::test::net::ip(node.name(), {"link", "set", "peer0", "up"}),
        chl::test::net::ip(node.name(), {"link", "set", "lo", "up"}),
        chl::test::net::ip(ns.name(), {"route", "add", "default", "via", "10.244.0.1"})};
    if (ipv6)
      for (auto e : {chl::test::net::ip(node.name(), {"addr", "add", "fd00:10:244::1/64", "dev", "peer0", "nodad"}),
                     chl::test::net::ip(ns.name(), {"addr", "add", "fd00:10:244::5/64", "dev", "eth0", "nodad"}),
                     chl::test::net::ip(ns.name(), {"-6", "route", "add", "default", "via", "fd00:10:244::1"})})
        errors.push_back(e);
    for (const auto& e : errors)
      if (!e.empty()) return e;
    return {};
  }
  // Start the launcher in this namespace (`ip netns exec`); its command stub once it serves.
  std::unique_ptr<v1::Cmd::Stub> start(Pod& pod) {
    const auto ip_tool = chl::test::tool("ip");
    REQUIRE(ip_tool);
    pod.prefix = {*ip_tool, "netns", "exec", ns.name()};
    return pod.serve();
  }
  // The same as KubeVirt's non-root launcher: uid/gid 107 with no capability at all (setpriv:
  // an empty bounding set, no_new_privs). The pod as KubeVirt's gives it to that launcher: its
  // directories owned by 107, /dev/net/tun and /dev/kvm of its own owned by 107 (the device
  // plugins' nodes; this machine's are root's 0600, so the pod's nodes are bind-mounted over them
  // in the launcher's mount namespace, which `ip netns exec` made), and a user record for 107 (the launcher image's qemu:107:
  // libvirt's session daemon refuses a uid without one: "Failed to find user record for uid
  // '107'"), bind-mounted over /etc/passwd the same way. "" when started, else why the test
  // must skip.
  std::string start_non_root(Pod& pod, std::unique_ptr<v1::Cmd::Stub>& stub) {
    const auto ip_tool = chl::test::tool("ip");
    const auto setpriv = chl::test::tool("setpriv");
    if (!ip_tool || !setpriv) return "needs ip and setpriv (util-linux) to start the launcher as uid 107";
    if (::access("/dev/net/tun", F_OK) != 0) return "no /dev/net/tun";
    pod.non_root = true;
    fs::create_directories(pod.runtime_dir());
    fs::create_directories(pod.priv());
    const fs::path tun = pod.dir.path() / "tun", passwd = pod.dir.path() / "passwd",
                   kvm = pod.dir.path() / "kvm";
    // The pod's own nodes, as the container runtime gives them to the pod's user (0660, owned by
    // 107 with the rest of the pod's directory below; the same major:minor as the machine's).
    struct stat host {};
    if (::stat("/dev/net/tun", &host) != 0 || ::mknod(tun.c_str(), S_IFCHR | 0660, host.st_rdev) != 0 ||
        ::chmod(tun.c_str(), 0660) != 0)
      return "cannot make a tun node in " + pod.dir.path().string() + ": " + std::strerror(errno);
    // Cloud Hypervisor opens /dev/kvm itself: the pod's node from KubeVirt's kvm device plugin
    // (devices.kubevirt.io/kvm) is the pod user's; this machine's is root's 0600.
    const bool with_kvm = !kQemu && ::stat("/dev/kvm", &host) == 0;
    if (with_kvm && (::mknod(kvm.c_str(), S_IFCHR | 0660, host.st_rdev) != 0 ||
                     ::chmod(kvm.c_str(), 0660) != 0))
      return "cannot make a kvm node in " + pod.dir.path().string() + ": " + std::strerror(errno);
    std::string users = chl::test::read_file("/etc/passwd");
    if (users.find(":x:107:") == std::string::npos) users += "qemu:x:107:107:qemu user:" + pod.priv().string() + ":/sbin/nologin\n";
    chl::test::write_file(passwd.string(), users);
    ::chmod(passwd.c_str(), 0644);
    for (const auto& e : fs::recursive_directory_iterator(pod.dir.path())) (void)::lchown(e.path().c_str(), 107, 107);
    (void)::chown(pod.dir.path().c_str(), 107, 107);
    pod.prefix = {*ip_tool,
                  "netns",
                  "exec",
                  ns.name(),
                  "/bin/sh",
                  "-c",
                  "t=$1 p=$2 k=$3 s=$4; shift 4; mount --bind \"$t\" /dev/net/tun && mount --bind "
                  "\"$p\" /etc/passwd && "
                  "{ [ -z \"$k\" ] || mount --bind \"$k\" /dev/kvm; } && "
                  "exec \"$s\" --reuid 107 --regid 107 --clear-groups --inh-caps -all "
                  "--bounding-set -all --no-new-privs \"$@\"",
                  "chl-pod",
                  tun.string(),
                  passwd.string(),
                  with_kvm ? kvm.string() : std::string(),
                  *setpriv};
    stub = pod.serve();
    return {};
  }
};

// The launcher's credentials from /proc/PID/status: "uid=… gid=… CapPrm=… CapEff=… CapBnd=…
// NoNewPrivs=…".
inline std::string credentials(pid_t pid) {
  std::istringstream status(chl::test::read_file("/proc/" + std::to_string(pid) + "/status"));
  std::string out;
  for (std::string l; std::getline(status, l);) {
    const auto colon = l.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = l.substr(0, colon);
    std::istringstream v(l.substr(colon + 1));
    std::string first;
    v >> first;  // Uid/Gid: real (the effective, saved and fs ids follow)
    if (key == "Uid" || key == "Gid" || key == "CapPrm" || key == "CapEff" || key == "CapBnd" || key == "CapAmb" ||
        key == "NoNewPrivs") {
      std::string rest, x;
      while (v >> x) rest += "," + x;
      out += (out.empty() ? "" : " ") + key + "=" + first + rest;
    }
  }
  return out;
}

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

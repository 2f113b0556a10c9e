// The container image (Dockerfile), built by scripts/image.sh and run the way KubeVirt runs a
// VMI's pod (tests/image/pod.hpp). This test plays virt-handler from the host: it wires phase 1
// of the pod network in the container's network namespace, serves the notify socket and drives
// the launcher through KubeVirt's gRPC protocol over the pod's bind-mounted sockets, reads the
// console on virt-serial0, then stops the pod as the kubelet does (SIGTERM, the grace period).
// Lane image: CHL_IMAGE names the image; skipped, saying why, without it or without root.
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/unix_socket.hpp"
#include "kubevirt/proto/cmd.grpc.pb.h"
#include "kubevirt/proto/cmd_info.grpc.pb.h"
#include "tests/image/pod.hpp"
#include "tests/image/pod_driving.hpp"
#include "tests/kubevirt/test_notify_server.hpp"
#include "tests/network/kubevirt_phase1.hpp"
#include "tests/support/launcher_harness.hpp"
#include "tests/support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
namespace v1 = ::kubevirt::cmd::v1;
namespace fs = std::filesystem;
using chl::test::image::docker;
using chl::test::image::call;
using chl::test::image::fill_container_disks;
using chl::test::image::has_state;
using chl::test::image::Pod;
using chl::test::image::PodOptions;

constexpr const char* kUid = "5f0c2a9e-7b1d-4c3e-9a8f-0123456789ab";

// The VMI as virt-handler sends it (defaulted, with status, no spec.hypervisor): kernel boot
// from the container-disk dir's kernel-boot/, a containerDisk (disk_0.img), one masquerade NIC.
std::string vmi_json() {
  auto j = nlohmann::json::parse(R"({
    "kind": "VirtualMachineInstance", "apiVersion": "kubevirt.io/v1",
    "metadata": {"name": "testvm", "namespace": "default", "uid": "", "resourceVersion": "4711"},
    "spec": {
      "domain": {
        "resources": {},
        "cpu": {"cores": 1, "sockets": 1, "maxSockets": 4, "threads": 1, "model": "host-model"},
        "memory": {"guest": "64Mi"},
        "machine": {"type": "q35"},
        "firmware": {"uuid": "0b8a3c6e-8f0e-4f4e-9d5e-1c2b3a4d5e6f",
                     "kernelBoot": {"kernelArgs": "console=ttyS0 kv-image",
                                    "container": {"image": "registry.example/pvh:1", "kernelPath": "/boot/guest.elf"}}},
        "features": {"acpi": {"enabled": true}},
        "devices": {
          "disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}}],
          "interfaces": [{"name": "default", "masquerade": {}, "macAddress": "02:00:00:aa:bb:cc"}]
        }
      },
      "networks": [{"name": "default", "pod": {}}],
      "volumes": [{"name": "containerdisk", "containerDisk": {"image": "registry.example/disk:1", "imagePullPolicy": "IfNotPresent"}}],
      "terminationGracePeriodSeconds": 10,
      "architecture": "amd64"
    },
    "status": {"nodeName": "node01", "phase": "Scheduled", "runtimeUser": 107,
               "currentCPUTopology": {"cores": 1, "sockets": 1, "threads": 1},
               "memory": {"guestAtBoot": "64Mi", "guestCurrent": "64Mi", "guestRequested": "64Mi"}}
  })");
  j["metadata"]["uid"] = kUid;
  return j.dump();
}

// The image's /usr/bin/cloud-hypervisor: its version line ("cloud-hypervisor v52.0.0") when it is
// a real Cloud Hypervisor (the image lane builds one in: scripts/image.sh), "" when it is the
// placeholder a builder without one gets (image/vmm/README.md).
std::string image_vmm_version(const std::string& image) {
  static std::map<std::string, std::string> known;
  if (auto it = known.find(image); it != known.end()) return it->second;
  auto r = docker({"run", "--rm", "--entrypoint", "/usr/bin/cloud-hypervisor", image, "--version"});
  std::string version;
  if (r.exit_code == 0 && r.output.rfind("cloud-hypervisor v", 0) == 0 && r.output.find("double") == std::string::npos)
    version = r.output.substr(0, r.output.find('\n'));
  return known[image] = version;
}

// The pod for the VMI: the image's own VMM. Only an image without one (the placeholder) gets the
// VMM double (or $CLOUD_HYPERVISOR_BIN) mounted over it, said as a skipped part: no guest runs then.
PodOptions pod_options(const std::string& image) {
  PodOptions po;
  po.vmi_uid = kUid;
  if (image_vmm_version(image).empty()) {
    po.vmm_over = chl::test::vmm_binary();
    chl::test::skip_part("the image carries the placeholder, not Cloud Hypervisor (built without one: image/vmm/README.md); the pod runs " +
                         po.vmm_over + " mounted over it");
  }
  return po;
}

// "path uid:gid mode" of each node: the machine's own, which no test changes.
std::string node_owners(const std::vector<std::string>& paths) {
  std::string out;
  for (const auto& p : paths) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
      out += p + " missing\n";
      continue;
    }
    out += p + " " + std::to_string(st.st_uid) + ":" + std::to_string(st.st_gid) + " " + std::to_string(st.st_mode & 07777) + "\n";
  }
  return out;
}

// The VMM the launcher `pid` started: the descendant running /usr/bin/cloud-hypervisor. -1 if none.
int vmm_of(int pid) {
  std::vector<int> todo{pid};
  while (!todo.empty()) {
    const int p = todo.back();
    todo.pop_back();
    std::error_code ec;
    for (const auto& t : fs::directory_iterator("/proc/" + std::to_string(p) + "/task", ec)) {
      std::istringstream children(chl::test::read_file(t.path() / "children"));
      for (int c; children >> c;) {
        if (chl::test::read_file("/proc/" + std::to_string(c) + "/comm").rfind("cloud-hyperviso", 0) == 0) return c;
        todo.push_back(c);
      }
    }
  }
  return -1;
}

// What the container's pod directories need before the launcher starts: the kernel-boot
// artifacts and a real (qcow2) container disk, as KubeVirt's init containers leave them.
std::string hex_field(const std::string& status, const std::string& key) {
  std::istringstream in(status);
  for (std::string l; std::getline(in, l);)
    if (l.rfind(key + ":", 0) == 0) {
      auto v = l.substr(key.size() + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  return {};
}

// The launcher's stub once its command socket is there.
std::unique_ptr<v1::Cmd::Stub> connect(const Pod& pod) {
  const auto sock = pod.sockets() / "launcher-sock";
  REQUIRE_MESSAGE(chl::test::wait_until(20s, [&] { return fs::exists(sock); }), pod.logs());
  return v1::Cmd::NewStub(grpc::CreateChannel("unix:" + sock.string(), grpc::InsecureChannelCredentials()));
}

// A notify server where the non-root launcher can reach it (virt-handler's socket is the pod's).
std::unique_ptr<chl::test::TestNotifyServer> notify_server(const Pod& pod) {
  const auto path = pod.share() / "domain-notify-pipe.sock";
  auto server = std::make_unique<chl::test::TestNotifyServer>(path);
  REQUIRE(::chown(path.c_str(), 107, 107) == 0);
  return server;
}

// The image under test, when the lane can run it with the PVH guest; else skipped saying why.
std::optional<std::string> image_with_guest() {
  std::string why;
  auto image = chl::test::image::image_under_test(why);
  if (!image) {
    chl::test::skip(why);
    return std::nullopt;
  }
  if (!fs::exists(chl::test::guest_kernel())) {
    chl::test::skip("the PVH test guest is not built");
    return std::nullopt;
  }
  return image;
}

// virt-handler's phase 1 (masquerade) in the pod's network namespace, as its source does it;
// the launcher binds the DHCP server's port with the NET_BIND_SERVICE the pod grants, so the
// namespace keeps its ip_unprivileged_port_start. "" or what failed.
std::string wire_phase1(Pod& pod) {
  const std::string ns = pod.attach_netns();
  if (ns.empty()) return "ip netns attach failed";
  chl::test::net::Phase1 p1{ns};
  p1.lower_unprivileged_ports = false;
  return chl::test::net::kubevirt_phase1_masquerade(p1);
}

// A pod without something the VMI needs (`po`): phase 1 wired when `phase1`, Sync must answer
// success:false, the launcher keep serving (GetDomain), docker stop end it with 0. Sync's message.
std::string refused_sync(const std::string& image, PodOptions po, const std::string& vmi_text, bool phase1) {
  Pod pod(image, po);
  fill_container_disks(pod);
  auto notify = notify_server(pod);
  REQUIRE(pod.start() == "");
  auto cmd = connect(pod);
  if (phase1) {
    const auto wired = wire_phase1(pod);
    REQUIRE_MESSAGE(wired.empty(), wired);
  }
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(vmi_text);
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_FALSE(r.success());
  v1::EmptyRequest empty;
  v1::DomainResponse dom;
  CHECK(call([&](auto& c) { return cmd->GetDomain(&c, empty, &dom); }).ok());
  CHECK(pod.stop() == 0);
  return r.message();
}

}  // namespace

TEST_CASE("the image: the launcher, its modules and KubeVirt's entry points, every library resolved inside it, user 107, its VMM (the real Cloud Hypervisor, or the placeholder)") {
  std::string why;
  auto image = chl::test::image::image_under_test(why);
  if (!image) {
    chl::test::skip(why);
    return;
  }
  auto r = docker({"run", "--rm", "--entrypoint", "/bin/sh", *image, "-c",
                   "id -u; id -g; readlink /usr/bin/virt-launcher /usr/bin/virt-launcher-monitor; "
                   "for f in /usr/bin/ch-launcher /usr/bin/virt-probe /usr/bin/chl-webhook /usr/lib/ch-launcher/*.so; do echo \"== $f\"; ldd \"$f\"; done"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK_MESSAGE(r.output.rfind("107\n107\nch-launcher\nch-launcher\n", 0) == 0, r.output);
  CHECK_MESSAGE(r.output.find("== /usr/lib/ch-launcher/libchl-network.so") != std::string::npos, r.output);
  CHECK_MESSAGE(r.output.find("== /usr/lib/ch-launcher/libchl-kubevirt.so") != std::string::npos, r.output);
  CHECK_MESSAGE(r.output.find("== /usr/bin/virt-probe") != std::string::npos, r.output);
  CHECK_MESSAGE(r.output.find("== /usr/bin/chl-webhook") != std::string::npos, r.output);  // deploy/webhook's binary
  CHECK_MESSAGE(r.output.find("not found") == std::string::npos, r.output);
  // The VMM: the real Cloud Hypervisor the lane put in image/vmm/ (it runs there as 107, linking
  // only what the image has), or, for an image built without one, the placeholder that says so.
  const std::string vmm = image_vmm_version(*image);
  r = docker({"run", "--rm", "--entrypoint", "/usr/bin/cloud-hypervisor", *image, "--version"});
  if (!vmm.empty()) {
    MESSAGE("the image carries " << vmm);
    CHECK(r.exit_code == 0);
  } else {
    MESSAGE("the image carries the placeholder (built without Cloud Hypervisor)");
    CHECK(r.exit_code == 127);
    CHECK_MESSAGE(r.output.find("placeholder") != std::string::npos, r.output);
  }
  // The launcher's answer to a placeholder, checked with the image's own when it has one, else
  // with the builder's placeholder (the project's file) mounted over the real VMM.
  std::vector<std::string> placeholder;
  if (!vmm.empty())
    placeholder = {"-v", (chl::test::source_dir() / "image" / "vmm" / "placeholder-vmm.sh").string() + ":/usr/bin/cloud-hypervisor:ro"};
  // The launcher's file capability (cap_net_bind_service, as KubeVirt's virt-launcher-monitor
  // has): with the pod's NET_BIND_SERVICE in the bounding set it is the launcher's effective set
  // (here without no_new_privs: Docker puts no capability in a non-root process's permitted set,
  // which no_new_privs then keeps the file's from raising; containerd does).
  {
    const std::string name = "chl-cap-" + std::to_string(::getpid());
    std::vector<std::string> run = {"run", "-d", "--name", name, "--user", "107:107", "--cap-drop", "ALL", "--cap-add", "NET_BIND_SERVICE"};
    run.insert(run.end(), placeholder.begin(), placeholder.end());
    run.insert(run.end(), {"--entrypoint", "/usr/bin/virt-launcher-monitor", *image, "--kubevirt-share-dir", "/tmp/share"});
    r = docker(run);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    std::string status;
    chl::test::wait_until(10s, [&] {
      auto pid = docker({"inspect", "-f", "{{.State.Pid}}", name}).output;
      status = chl::test::read_file("/proc/" + pid.substr(0, pid.find('\n')) + "/status");
      return status.find("CapEff") != std::string::npos;
    });
    CHECK_MESSAGE(hex_field(status, "CapEff") == "0000000000000400", status);
    // A placeholder as /usr/bin/cloud-hypervisor: the launcher says at start that there is no VMM.
    const std::string logs = docker({"logs", name}).output;
    CHECK_MESSAGE(logs.find("/usr/bin/cloud-hypervisor is ch-launcher's placeholder, not Cloud Hypervisor: this image has no real VMM") !=
                      std::string::npos,
                  logs);
    (void)docker({"rm", "-f", name});
  }
  // Like KubeVirt's image, the launcher cannot start in a pod that does not grant NET_BIND_SERVICE:
  // the runtime says so (the kernel refuses the exec), exit 1.
  r = docker({"run", "--rm", "--user", "107:107", "--cap-drop", "ALL", *image, "--version"});
  CHECK(r.exit_code != 0);
  CHECK_MESSAGE(r.output.find("operation not permitted") != std::string::npos, r.output);
  // The default command: ch-launcher's help.
  r = docker({"run", "--rm", *image});
  CHECK(r.exit_code == 0);
  CHECK_MESSAGE(r.output.find("virt-launcher") != std::string::npos, r.output);
}

TEST_CASE("the image as KubeVirt's pod: phase 1 by the test, Info, Sync, ADDED then Running, console, pause, stats, then SIGTERM, Shutdown and DeleteDomain give the final event, exit 0, nothing left") {
  auto image = image_with_guest();
  if (!image) return;  // said why
  const PodOptions po = pod_options(*image);
  // The image's own Cloud Hypervisor boots the PVH guest for real; only an image without one runs
  // the double (or CLOUD_HYPERVISOR_BIN) mounted over its placeholder.
  const bool real_vmm = po.vmm_over.empty() || chl::test::using_real_vmm();
  // The machine's own device nodes, which the pod's must leave as they are.
  const auto host_nodes = node_owners({"/dev/kvm", "/dev/net/tun"});
  Pod pod(*image, po);
  fill_container_disks(pod);
  auto notify = notify_server(pod);
  REQUIRE_MESSAGE(pod.start() == "", pod.logs());
  auto cmd = connect(pod);

  // virt-handler's phase 1 in the pod's network namespace, before it syncs the VMI.
  const auto wired = wire_phase1(pod);
  REQUIRE_MESSAGE(wired.empty(), wired);

  auto channel = grpc::CreateChannel("unix:" + (pod.sockets() / "launcher-sock").string(), grpc::InsecureChannelCredentials());
  auto info = ::kubevirt::cmd::info::CmdInfo::NewStub(channel);
  ::kubevirt::cmd::info::CmdInfoRequest ireq;
  ::kubevirt::cmd::info::CmdInfoResponse versions;
  REQUIRE(call([&](auto& c) { return info->Info(&c, ireq, &versions); }).ok());
  REQUIRE(versions.supportedcmdversions_size() >= 1);

  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(vmi_json());
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.logs());
  REQUIRE_MESSAGE(chl::test::wait_until(20s, [&] { return has_state(*notify, "Running"); }), pod.logs());
  {
    auto got = notify->received();
    REQUIRE_FALSE(got.empty());
    CHECK(got.front().event_type == "ADDED");
  }
  const std::string logs = pod.logs();
  CHECK_MESSAGE(logs.find("interface default attached (phase 2): tap tap0") != std::string::npos, logs);
  CHECK_MESSAGE(logs.find("no real VMM") == std::string::npos, logs);

  // The launcher runs as 107 with nothing beyond the pod's NET_BIND_SERVICE (bit 10) in its
  // bounding set, and no_new_privs. (Docker, unlike containerd, gives a non-root container's
  // process no permitted capability, so under no_new_privs the file capability adds none here:
  // the DHCP server binds port 67 because Docker sets ip_unprivileged_port_start to 0 in the
  // container's namespace. The first test case shows the file capability at work.)
  const int pid = pod.host_pid();
  REQUIRE(pid > 0);
  const std::string status = chl::test::read_file("/proc/" + std::to_string(pid) + "/status");
  CHECK(hex_field(status, "Uid").rfind("107\t", 0) == 0);
  CHECK(hex_field(status, "CapBnd") == "0000000000000400");
  CHECK((std::stoull(hex_field(status, "CapEff"), nullptr, 16) & ~0x400ULL) == 0);
  CHECK(hex_field(status, "NoNewPrivs") == "1");
  MESSAGE("launcher RSS in the container, VM running, pod network: " << hex_field(status, "VmRSS"));
  // The VMM: the launcher's child, run as the launcher is (107, no capability, no_new_privs),
  // opening the pod's device nodes, which the runtime made for the pod owned by 107 (as
  // containerd's and CRI-O's device_ownership_from_security_context do).
  {
    const int vmm_pid = vmm_of(pid);
    REQUIRE_MESSAGE(vmm_pid > 0, pod.logs());
    const std::string vs = chl::test::read_file("/proc/" + std::to_string(vmm_pid) + "/status");
    CHECK(hex_field(vs, "Uid").rfind("107\t", 0) == 0);
    CHECK(hex_field(vs, "CapEff") == "0000000000000000");
    CHECK(hex_field(vs, "NoNewPrivs") == "1");
    MESSAGE("VMM (" << (real_vmm ? image_vmm_version(*image) : po.vmm_over) << ") RSS in the container: " << hex_field(vs, "VmRSS"));
    auto nodes = docker({"exec", pod.name(), "stat", "-c", "%n %u:%g", "/dev/kvm", "/dev/net/tun"});
    CHECK_MESSAGE(nodes.output == "/dev/kvm 107:107\n/dev/net/tun 107:107\n", nodes.output);
  }

  v1::EmptyRequest empty;
  v1::DomainResponse dom;
  REQUIRE(call([&](auto& c) { return cmd->GetDomain(&c, empty, &dom); }).ok());
  auto d = nlohmann::json::parse(dom.domain());
  CHECK(d["Status"]["Status"] == "Running");
  v1::DomainStatsResponse stats;
  REQUIRE(call([&](auto& c) { return cmd->GetDomainStats(&c, empty, &stats); }).ok());
  REQUIRE_MESSAGE(stats.response().success(), stats.response().message());
  auto sj = nlohmann::json::parse(stats.domainstats());
  CHECK(sj["Name"] == "default_testvm");
  CHECK(sj["Memory"]["RSSSet"] == true);
  // virt-probe from the image, as the kubelet runs a guestAgentPing probe in the compute container
  // (KubeVirt's template.go:1468): it reaches the launcher's socket; the PVH guest runs no agent,
  // so the ping fails (exit 1) with the launcher's answer, not with a connection error.
  {
    const auto probe = docker({"exec", pod.name(), "virt-probe", "--domainName", "default_testvm",
                               "--timeoutSeconds", "1", "--guestAgentPing"});
    CHECK_MESSAGE(probe.exit_code == 1, probe.output);
    CHECK_MESSAGE(probe.output.find("Failed to ping the guest") != std::string::npos, probe.output);
  }

  REQUIRE(call([&](auto& c) { return cmd->PauseVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  CHECK(chl::test::wait_until(10s, [&] { return has_state(*notify, "Paused"); }));
  REQUIRE(call([&](auto& c) { return cmd->UnpauseVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());

  // virtctl console's way in: <private>/<uid>/virt-serial0, the guest's boot output.
  const auto console = pod.priv() / kUid / "virt-serial0";
  REQUIRE(chl::test::wait_until(10s, [&] { return fs::exists(console); }));
  {
    const std::string got = chl::test::read_socket_until(console, "kv-image", 10s);
    CHECK_MESSAGE(got.find("kv-image") != std::string::npos, got);
  }

  // The container disk was converted into the pod's ephemeral-disk volume, nowhere else.
  bool converted = false;
  for (const auto& f : fs::recursive_directory_iterator(pod.ephemeral()))
    if (f.path().filename().string().find("containerdisk") != std::string::npos && f.is_regular_file()) converted = true;
  CHECK_MESSAGE(converted, "no converted container disk under " << pod.ephemeral());

  // The kubelet stops the pod: SIGTERM. The launcher marks the domain for graceful shutdown
  // (MarkedForGracefulShutdown), virt-handler shuts it down (CH's ACPI power button: the PVH
  // guest finds CH's GED and powers off; virt-handler would kill it after the grace period, which
  // this guest must not need) and deletes it once off; virt-handler hears the final event
  // (MODIFIED with deletionTimestamp, never DELETED), the container exits 0.
  const std::string changes = pod.diff();
  (void)docker({"kill", "--signal", "TERM", pod.name()});
  REQUIRE_MESSAGE(chl::test::wait_until(10s, [&] {
    for (const auto& n : notify->received())
      if (!n.k8s && n.json.dump().find(R"("MarkedForGracefulShutdown":true)") != std::string::npos) return true;
    return false;
  }), pod.logs());
  REQUIRE(call([&](auto& c) { return cmd->ShutdownVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  // The guest powers off by itself: Shutoff with reason Shutdown. Without that (a guest that does
  // not see the button) the domain ends Destroyed when the pod's grace period runs out, or here by
  // virt-handler's Kill; either fails the check below, which names the cause.
  if (!chl::test::wait_until(30s, [&] { return has_state(*notify, "Shutoff"); })) {
    REQUIRE(call([&](auto& c) { return cmd->KillVirtualMachine(&c, vmi, &r); }).ok());
    REQUIRE(chl::test::wait_until(20s, [&] { return has_state(*notify, "Shutoff"); }));
  }
  {
    std::string reason;
    for (const auto& n : notify->received())
      if (!n.k8s && n.json["Status"].value("Status", "") == "Shutoff") reason = n.json["Status"].value("Reason", "");
    CHECK_MESSAGE(reason == "Shutdown", "the domain ended " << reason << ", not by the guest's poweroff: the PVH guest must see "
                                            << std::string(real_vmm ? "the real CH's ACPI power button (its GED, found through hvm_start_info.rsdp_paddr at offset 32)"
                                                                     : "the double's power button (its note)")
                                            << "\n" << pod.logs());
  }
  REQUIRE(call([&](auto& c) { return cmd->DeleteVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  const int code = pod.wait();
  CHECK_MESSAGE(code == 0, pod.logs());
  auto got = notify->received();
  std::optional<chl::test::ReceivedNotification> last;
  for (const auto& n : got) {
    CHECK(n.event_type != "DELETED");
    if (!n.k8s) last = n;
  }
  REQUIRE(last);
  CHECK(last->event_type == "MODIFIED");
  CHECK(last->json["ObjectMeta"].contains("deletionTimestamp"));
  // Nothing written outside the pod's volumes (the root is read-only; docker diff lists the
  // mount points themselves at most), nothing left running or mounted on the host.
  std::istringstream lines(changes);
  for (std::string l; std::getline(lines, l);) {
    const bool vmm_mount = !po.vmm_over.empty() && (l.find("/usr/bin/cloud-hypervisor") != std::string::npos ||
                                                    l == "C /usr" || l == "C /usr/bin");
    const bool mount_point = l.find("/run/kubevirt") != std::string::npos || l.find("/run/libvirt") != std::string::npos ||
                             l.find("/dev") != std::string::npos || l == "C /run" || l == "C /var" || vmm_mount;
    CHECK_MESSAGE(mount_point, "written outside the pod's volumes: " << l);
  }
  CHECK(docker({"ps", "-q", "--filter", "name=" + pod.name()}).output.empty());
  pod.remove();
  const std::string mounts = chl::test::read_file("/proc/self/mountinfo");
  CHECK_MESSAGE(mounts.find(pod.root().string()) == std::string::npos, mounts);
  CHECK_FALSE(fs::exists(pod.sockets() / "launcher-sock"));
  CHECK(node_owners({"/dev/kvm", "/dev/net/tun"}) == host_nodes);
}

TEST_CASE("the image in a pod missing what KubeVirt gives it: a clear message and exit code, never a crash") {
  auto image = image_with_guest();
  if (!image) return;  // said why
  SUBCASE("no share dir volume: the command socket cannot be made on the read-only root, exit 1 naming it") {
    PodOptions po = pod_options(*image);
    po.share_dir = false;
    Pod pod(*image, po);
    REQUIRE(pod.start() == "");
    const int code = pod.wait();
    const std::string logs = pod.logs();
    CHECK_MESSAGE(code == 1, logs);
    CHECK_MESSAGE(logs.find("/var/run/kubevirt/sockets") != std::string::npos, logs);
    CHECK_MESSAGE(logs.find("Read-only file system") != std::string::npos, logs);
  }
  SUBCASE("no /dev/net/tun: Sync with a pod interface answers success:false naming it, the launcher keeps serving") {
    PodOptions po = pod_options(*image);
    po.tun = false;
    const std::string why = refused_sync(*image, po, vmi_json(), true);
    CHECK_MESSAGE(why.find("/dev/net/tun") != std::string::npos, why);
  }
  SUBCASE("no /dev/kvm: Sync answers success:false naming it, the launcher keeps serving, docker stop exits 0") {
    PodOptions po = pod_options(*image);
    po.kvm = false;
    auto j = nlohmann::json::parse(vmi_json());
    j["spec"]["domain"]["devices"].erase("interfaces");
    j["spec"]["domain"]["devices"]["autoattachPodInterface"] = false;
    j["spec"].erase("networks");
    const std::string why = refused_sync(*image, po, j.dump(), false);
    CHECK_MESSAGE(why.find("/dev/kvm") != std::string::npos, why);
  }
}

// ch-launcher in virt-launcher mode, driven as an unchanged virt-handler drives a launcher pod:
// the built binary started with virt-launcher's flags (unknown ones included), our gRPC client
// on <share>/sockets/launcher-sock and our notify server behind domain-notify-pipe.sock, the
// VMI as virt-handler sends it (defaulted, with status), KubeVirt's pod paths (the kernel-boot
// artifacts under <container-disk-dir>/kernel-boot/). Built twice: test_virt_launcher drives
// Cloud Hypervisor (the VMM double, or a real cloud-hypervisor with CLOUD_HYPERVISOR_BIN; lane
// vmm), test_virt_launcher_qemu the libvirt path with --hypervisor kvm (real libvirtd and QEMU,
// the PVH guest; lane qemu).
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
std::string vmi_json(bool with_dra_gpu = false) {
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
};

template <typename F>
grpc::Status call(F&& f, std::chrono::seconds timeout = 60s) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  return f(ctx);
}

std::vector<std::string> states(const std::vector<chl::test::ReceivedNotification>& got) {
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
void dump(const std::string& name, const nlohmann::json& j) {
  const char* dir = std::getenv("CHL_KUBEVIRT_DUMP_DIR");
  if (!dir || !*dir) return;
  fs::create_directories(fs::path(dir) / CHL_VL_HYPERVISOR);
  std::ofstream(fs::path(dir) / CHL_VL_HYPERVISOR / name) << j.dump(2) << "\n";
}

bool has_state(const chl::test::TestNotifyServer& server, const std::string& want) {
  for (const auto& s : states(server.received()))
    if (s == want) return true;
  return false;
}

}  // namespace

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): Info, Sync, ADDED then Running, GetDomain/Stats, pause, console, shutdown, final NoState, exit 0") {
  if (!fs::exists(chl::test::guest_kernel())) {
    chl::test::skip("the PVH test guest is not built");
    return;
  }
  if (kQemu && !chl::test::libvirt_runnable()) return;  // says why
  Pod pod;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  pod.start();
  const auto sock = chl::kubevirt::ready_socket_path(pod.share());
  REQUIRE_MESSAGE(chl::test::wait_until(10s, [&] { return fs::exists(sock); }), pod.output());
  CHECK_FALSE(fs::exists(chl::kubevirt::init_socket_path(pod.share())));  // renamed: ready
  CHECK(pod.output().find("--a-flag-from-a-newer-kubevirt accepted and ignored") != std::string::npos);

  auto channel = grpc::CreateChannel("unix:" + sock.string(), grpc::InsecureChannelCredentials());
  auto info = ::kubevirt::cmd::info::CmdInfo::NewStub(channel);
  auto cmd = v1::Cmd::NewStub(channel);

  ::kubevirt::cmd::info::CmdInfoRequest ireq;
  ::kubevirt::cmd::info::CmdInfoResponse versions;
  REQUIRE(call([&](auto& c) { return info->Info(&c, ireq, &versions); }).ok());
  REQUIRE(versions.supportedcmdversions_size() >= 1);
  CHECK(versions.supportedcmdversions(0) == 1);

  // Before any Sync: no domain.
  v1::EmptyRequest empty;
  v1::DomainResponse dom;
  REQUIRE(call([&](auto& c) { return cmd->GetDomain(&c, empty, &dom); }).ok());
  CHECK(dom.domain().empty());

  // A VMI the hypervisor cannot serve: refused, naming the field; the launcher keeps serving.
  v1::VMIRequest bad;
  bad.mutable_vmi()->set_vmijson(vmi_json(true));
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, bad, &r); }).ok());
  CHECK_FALSE(r.success());
  CHECK_MESSAGE(r.message().find("spec.domain.devices.gpus[0].claimName") != std::string::npos, r.message());

  // An interface virt-handler left for a binding plugin's managed tap: refused, naming it.
  {
    v1::VMIRequest managed;
    managed.mutable_vmi()->set_vmijson(vmi_json());
    (*managed.mutable_options()->mutable_interfacedomainattachment())["default"] = "managedTap";
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, managed, &r); }).ok());
    CHECK_FALSE(r.success());
    CHECK_MESSAGE(r.message().find("options.interfaceDomainAttachment[default]: 'managedTap' is not supported") != std::string::npos,
                  r.message());
  }

  // The VMI for another pod: refused.
  v1::VMIRequest other;
  auto oj = nlohmann::json::parse(vmi_json());
  oj["metadata"]["uid"] = "someone-else";
  other.mutable_vmi()->set_vmijson(oj.dump());
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, other, &r); }).ok());
  CHECK_FALSE(r.success());

  // A container disk the pod does not have (no <container-disk-dir>/disk_0.img): the launch
  // fails before anything runs, Sync says why, and the launcher waits for the next Sync.
  {
    v1::VMIRequest nodisk;
    auto nj = nlohmann::json::parse(vmi_json());
    nj["spec"]["volumes"] = nlohmann::json::array({{{"name", "root"}, {"containerDisk", {{"image", "example/root:1"}}}}});
    nj["spec"]["domain"]["devices"]["disks"] = nlohmann::json::array({{{"name", "root"}, {"disk", {{"bus", "virtio"}}}}});
    nodisk.mutable_vmi()->set_vmijson(nj.dump());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, nodisk, &r); }).ok());
    CHECK_FALSE(r.success());
    CHECK_MESSAGE(r.message().find("disk_0.img") != std::string::npos, r.message());
  }

  // The real one: Sync answers once the domain runs.
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(vmi_json());
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  const auto sync_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  MESSAGE("Sync -> success in " << sync_ms.count() << " ms");
  REQUIRE_MESSAGE(chl::test::wait_until(kQemu ? 60s : 10s, [&] { return has_state(notify, "MODIFIED Running/Unknown"); }),
                  pod.output());
  auto seq = states(notify.received());
  REQUIRE_FALSE(seq.empty());
  CHECK(seq.front() == "ADDED Shutoff/Unknown");  // defined first, as virt-launcher does
  // A second Sync of the same VMI changes nothing and succeeds.
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  CHECK(r.success());
  // One the running VM cannot take: refused naming the field, nothing changed.
  {
    v1::VMIRequest bigger;
    auto bj = nlohmann::json::parse(vmi_json());
    bj["spec"]["domain"]["memory"]["guest"] = "128Mi";
    bigger.mutable_vmi()->set_vmijson(bj.dump());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, bigger, &r); }).ok());
    CHECK_FALSE(r.success());
    CHECK_MESSAGE(r.message().find("spec.domain.memory.guest") != std::string::npos, r.message());
  }

  // CPU hotplug as virt-handler does it: a Sync with more sockets (within maxSockets 4) is
  // accepted, then SyncVirtualMachineCPUs resizes the VM (Cloud Hypervisor's vm.resize; the
  // libvirt path says it does not); past maxSockets, or a changed core count, is refused naming it.
  {
    v1::VMIRequest more;
    auto mj = nlohmann::json::parse(vmi_json());
    mj["spec"]["domain"]["cpu"]["sockets"] = 2;
    more.mutable_vmi()->set_vmijson(mj.dump());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, more, &r); }).ok());
    CHECK_MESSAGE(r.success(), r.message());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachineCPUs(&c, more, &r); }).ok());
    CHECK_MESSAGE(r.success(), r.message());  // CH's vm.resize, libvirt's virDomainSetVcpusFlags
    {
      v1::EmptyRequest e;
      v1::DomainStatsResponse s2;
      REQUIRE(call([&](auto& c) { return cmd->GetDomainStats(&c, e, &s2); }).ok());
      CHECK(nlohmann::json::parse(s2.domainstats())["Vcpu"].size() == 2);
      v1::DomainResponse d2;
      REQUIRE(call([&](auto& c) { return cmd->GetDomain(&c, e, &d2); }).ok());
      CHECK(nlohmann::json::parse(d2.domain())["Spec"]["VCPU"]["CPUs"] == 2);
    }
    mj["spec"]["domain"]["cpu"]["sockets"] = 5;
    more.mutable_vmi()->set_vmijson(mj.dump());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachineCPUs(&c, more, &r); }).ok());
    CHECK_FALSE(r.success());
    CHECK_MESSAGE(r.message().find("spec.domain.cpu.sockets: 5 is more than the 4 (maxSockets)") != std::string::npos, r.message());
    mj["spec"]["domain"]["cpu"]["sockets"] = 2;
    mj["spec"]["domain"]["cpu"]["cores"] = 2;
    more.mutable_vmi()->set_vmijson(mj.dump());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachineCPUs(&c, more, &r); }).ok());
    CHECK_FALSE(r.success());
    CHECK_MESSAGE(r.message().find("spec.domain.cpu.cores: 2 (was 1): only sockets can change") != std::string::npos, r.message());
    // No maxGuest in this VMI: no memory headroom, so more memory is refused naming it.
    mj["spec"]["domain"]["cpu"]["cores"] = 1;
    mj["spec"]["domain"]["memory"]["guest"] = "128Mi";
    more.mutable_vmi()->set_vmijson(mj.dump());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachineMemory(&c, more, &r); }).ok());
    CHECK_FALSE(r.success());
    CHECK_MESSAGE(r.message().find("(maxGuest) the VM was started with") != std::string::npos, r.message());
  }

  // Volume hotplug as virt-handler does it: a hotplug volume (status.volumeStatus[].hotplugVolume)
  // mounted into the pod (<hotplug-disk-dir>/<volume>.img, phase HotplugVolumeMounted) is
  // attached by the next Sync, and detached by a Sync without it; one not mounted is refused
  // naming it. The libvirt path says it does not hotplug.
  {
    fs::create_directories(pod.hotplug());
    { std::ofstream(pod.hotplug() / "hp1.img").put('\0'); }
    fs::resize_file(pod.hotplug() / "hp1.img", 1 << 20);
    auto hj = nlohmann::json::parse(vmi_json());
    const auto status_json = [&] {
      return chl::test::run_command({chl::test::launcher_binary(), "status", "--json", "--state-dir",
                                     (pod.ephemeral() / "ch-launcher").string()}).output;
    };
    hj["spec"]["volumes"] = nlohmann::json::parse(R"([{"name": "hp1", "persistentVolumeClaim": {"claimName": "hp1-pvc", "hotpluggable": true}}])");
    hj["spec"]["domain"]["devices"]["disks"] = nlohmann::json::parse(R"([{"name": "hp1", "disk": {"bus": "scsi"}}])");
    hj["status"]["volumeStatus"] = nlohmann::json::parse(
        R"([{"name": "hp1", "target": "", "phase": "HotplugVolumeMounted", "hotplugVolume": {"attachPodName": "hp-volume-abcde", "attachPodUID": "u1"}}])");
    v1::VMIRequest plug;
    plug.mutable_vmi()->set_vmijson(hj.dump());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, plug, &r); }).ok());
    if (kQemu) {
      CHECK_FALSE(r.success());
      CHECK_MESSAGE(r.message().find("not supported by qemu-kvm") != std::string::npos, r.message());
    } else {
      CHECK_MESSAGE(r.success(), r.message() << "\n" << pod.output());
      CHECK_MESSAGE(status_json().find((pod.hotplug() / "hp1.img").string()) != std::string::npos, status_json());
      v1::EmptyRequest e;
      v1::DomainResponse d2;
      REQUIRE(call([&](auto& c) { return cmd->GetDomain(&c, e, &d2); }).ok());
      CHECK_MESSAGE(d2.domain().find(R"("Alias":{"Name":"hp1","UserDefined":true})") != std::string::npos, d2.domain());
      // Another, not mounted: refused naming it; hp1 stays.
      auto nj = hj;
      nj["spec"]["volumes"].push_back({{"name", "hp2"}, {"persistentVolumeClaim", {{"claimName", "hp2-pvc"}, {"hotpluggable", true}}}});
      nj["spec"]["domain"]["devices"]["disks"].push_back({{"name", "hp2"}, {"disk", {{"bus", "scsi"}}}});
      nj["status"]["volumeStatus"].push_back(
          {{"name", "hp2"}, {"phase", "HotplugVolumeMounted"}, {"hotplugVolume", {{"attachPodName", "hp-volume-abcde"}}}});
      v1::VMIRequest missing;
      missing.mutable_vmi()->set_vmijson(nj.dump());
      REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, missing, &r); }).ok());
      CHECK_FALSE(r.success());
      CHECK_MESSAGE(r.message().find("hotplug volume hp2: not mounted into the pod") != std::string::npos, r.message());
      CHECK(status_json().find("hp1.img") != std::string::npos);
      // Unplugged: the VMI without it.
      REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
      CHECK_MESSAGE(r.success(), r.message());
      // A real CH drops the disk from its config once the guest ejects it (ACPI); the PVH test
      // guest has no ACPI hotplug, the double drops it at once.
      if (chl::test::using_real_vmm())
        chl::test::skip_part("a real Cloud Hypervisor keeps an unplugged disk until the guest ejects it; the PVH guest does not");
      else
        CHECK_MESSAGE(status_json().find("hp1.img") == std::string::npos, status_json());
    }
  }

  // The launcher confined itself once the VMM ran, gRPC transport and all (its own command socket
  // moved into the state directory under the ephemeral-disk dir).
  {
    auto st = chl::test::run_command({chl::test::launcher_binary(), "status", "--json", "--state-dir",
                                      (pod.ephemeral() / "ch-launcher").string()});
    CHECK_MESSAGE(st.output.find("\"seccomp\":\"enforce\"") != std::string::npos, st.output);
  }
  REQUIRE(call([&](auto& c) { return cmd->GetDomain(&c, empty, &dom); }).ok());
  auto d = nlohmann::json::parse(dom.domain());
  CHECK(d["Status"]["Status"] == "Running");
  CHECK(d["ObjectMeta"]["name"] == "testvm");
  CHECK(d["Spec"]["Name"] == "default_testvm");

  v1::DomainStatsResponse stats;
  REQUIRE(call([&](auto& c) { return cmd->GetDomainStats(&c, empty, &stats); }).ok());
  REQUIRE_MESSAGE(stats.response().success(), stats.response().message());
  auto sj = nlohmann::json::parse(stats.domainstats());
  dump("GetDomain.json", d);
  dump("GetDomainStats.json", sj);
  CHECK(sj["Name"] == "default_testvm");
  CHECK(sj["Vcpu"].size() == 2);  // after the CPU hotplug above
  CHECK(sj["Cpu"]["TimeSet"] == true);  // the VMM process's CPU time, from /proc
  CHECK(sj["Memory"]["RSSSet"] == true);

  v1::QemuVersionResponse ver;
  REQUIRE(call([&](auto& c) { return cmd->GetQemuVersion(&c, empty, &ver); }).ok());
  CHECK_MESSAGE(ver.response().success(), ver.response().message());
  CHECK_FALSE(ver.version().empty());

  REQUIRE(call([&](auto& c) { return cmd->PauseVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  CHECK(chl::test::wait_until(10s, [&] { return has_state(notify, "MODIFIED Paused/User"); }));
  REQUIRE(call([&](auto& c) { return cmd->UnpauseVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());

  // virtctl console arrives on <private-dir>/<uid>/virt-serial0: the guest's boot output.
  const auto console = pod.priv() / kUid / "virt-serial0";
  REQUIRE(chl::test::wait_until(10s, [&] { return fs::exists(console); }));
  {
    const std::string got = chl::test::read_socket_until(console, "kv-flow", 10s);
    CHECK_MESSAGE(got.find("kv-flow") != std::string::npos, got);
  }

  // Unsupported RPCs answer at once.
  v1::Response mig;
  v1::MigrationRequest mreq;
  REQUIRE(call([&](auto& c) { return cmd->MigrateVirtualMachine(&c, mreq, &mig); }).ok());
  CHECK_FALSE(mig.success());

  // Shutdown: the ACPI power button; the guest powers off; the launcher ends.
  REQUIRE(call([&](auto& c) { return cmd->ShutdownVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  auto st = pod.child.wait_for(kQemu ? 120s : 60s);
  REQUIRE(st);
  REQUIRE(*st);
  const bool clean = (*st)->exited && (*st)->code == 0;
  const bool cooperative = kQemu || !chl::test::using_real_vmm();
  if (cooperative) CHECK_MESSAGE(clean, pod.output());
  // The final notification: MODIFIED NoState/NonExistent with deletionTimestamp; never DELETED.
  auto got = notify.received();
  for (std::size_t i = 0; i < got.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "%02zu-%s.json", i, got[i].k8s ? "k8s-event" : got[i].event_type.c_str());
    dump(name, got[i].json);
  }
  REQUIRE_FALSE(got.empty());
  std::optional<chl::test::ReceivedNotification> last;
  for (const auto& n : got) {
    CHECK(n.event_type != "DELETED");
    if (!n.k8s) last = n;
  }
  REQUIRE(last);
  CHECK(last->event_type == "MODIFIED");
  CHECK(last->json["Status"]["Status"] == "NoState");
  CHECK(last->json["Status"]["Reason"] == "NonExistent");
  CHECK(last->json["ObjectMeta"].contains("deletionTimestamp"));
  CHECK_FALSE(fs::exists(sock));  // the server is gone with the launcher
}

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): SIGTERM before any Sync ends the launcher at once, exit 0, nothing left") {
  if (kQemu && !chl::test::libvirt_runnable()) return;  // says why
  if (!fs::exists(chl::test::guest_kernel())) {
    chl::test::skip("the PVH test guest is not built");
    return;
  }
  Pod pod;
  pod.start();
  const auto sock = chl::kubevirt::ready_socket_path(pod.share());
  REQUIRE_MESSAGE(chl::test::wait_until(10s, [&] { return fs::exists(sock); }), pod.output());
  REQUIRE(::kill(pod.child.pid(), SIGTERM) == 0);
  auto st = pod.child.wait_for(10s);
  REQUIRE(st);
  REQUIRE(*st);
  CHECK_MESSAGE(((*st)->exited && (*st)->code == 0), pod.output());
  CHECK_FALSE(fs::exists(sock));
}

namespace {

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
                   chl::test::net::ip(ns.name(), {"link", "set", "eth0", "up"})})
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
v1::VMIRequest vmi_with_nic() {
  auto j = nlohmann::json::parse(vmi_json());
  j["spec"]["domain"]["devices"]["interfaces"] =
      nlohmann::json::parse(R"([{"name": "default", "masquerade": {}, "macAddress": "02:00:00:aa:bb:cc"}])");
  j["spec"]["networks"] = nlohmann::json::parse(R"([{"name": "default", "pod": {}}])");
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(j.dump());
  return vmi;
}

}  // namespace

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): a pod network without virt-handler's phase 1 — Sync answers success:false naming it, the wiring module is never loaded, the launcher keeps serving") {
  PodNetns pn;
  if (auto why = pn.up(); !why.empty()) {
    chl::test::skip(why);
    return;
  }
  const std::string ns = pn.ns.name();
  const std::string links_before = chl::test::run_command({"ip", "-n", ns, "-o", "link", "show"}).output;
  Pod pod;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  auto cmd = pn.start(pod);
  auto vmi = vmi_with_nic();
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_FALSE(r.success());
  CHECK_MESSAGE(r.message().find("interface default: bridge k6t-eth0 is missing (phase 1 creates it") != std::string::npos,
                r.message() << "\n" << pod.output());
  // Still serving; phase 2 never loaded the wiring libraries and changed no link.
  v1::EmptyRequest empty;
  v1::DomainResponse dom;
  CHECK(call([&](auto& c) { return cmd->GetDomain(&c, empty, &dom); }).ok());
  const std::string maps = chl::test::read_file("/proc/" + std::to_string(pod.child.pid()) + "/maps");
  CHECK_MESSAGE(maps.find("libchl-network") == std::string::npos, maps);
  CHECK_MESSAGE(maps.find("libnl-route") == std::string::npos, maps);
  CHECK_MESSAGE(maps.find("libnftables") == std::string::npos, maps);
  CHECK(chl::test::run_command({"ip", "-n", ns, "-o", "link", "show"}).output == links_before);
  (void)pod.child.signal(SIGTERM);
  auto st = pod.child.wait_for(30s);
  REQUIRE(st);
  CHECK(*st);
}

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): after virt-handler's phase 1 the launcher does phase 2 only — Sync succeeds with a masquerade NIC, the namespace is as phase 1 left it after shutdown") {
  PodNetns pn;
  if (auto why = pn.up(); !why.empty()) {
    chl::test::skip(why);
    return;
  }
  const std::string ns = pn.ns.name();
  chl::test::net::Phase1 p1{ns};
  const auto e = chl::test::net::kubevirt_phase1_masquerade(p1);
  REQUIRE_MESSAGE(e.empty(), e);
  const auto before = chl::test::net::netns_snapshot(ns);
  Pod pod;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  auto cmd = pn.start(pod);
  auto vmi = vmi_with_nic();
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  REQUIRE_MESSAGE(chl::test::wait_until(10s, [&] { return has_state(notify, "MODIFIED Running/Unknown"); }), pod.output());
  CHECK_MESSAGE(pod.output().find("interface default attached (phase 2): tap tap0 mac 02:00:00:aa:bb:cc") != std::string::npos,
                pod.output());
  const std::string proc = "/proc/" + std::to_string(pod.child.pid());
  const std::string maps = chl::test::read_file(proc + "/maps");
  CHECK_MESSAGE(maps.find("libchl-network") == std::string::npos, maps);
  CHECK_MESSAGE(maps.find("libnl-route") == std::string::npos, maps);
  CHECK_MESSAGE(maps.find("libnftables") == std::string::npos, maps);
  std::istringstream status(chl::test::read_file(proc + "/status"));
  for (std::string l; std::getline(status, l);)
    if (l.rfind("VmRSS:", 0) == 0) MESSAGE("launcher RSS in virt-launcher mode, pod network, VM running: " << l);

  REQUIRE(call([&](auto& c) { return cmd->ShutdownVirtualMachine(&c, vmi, &r); }).ok());
  auto st = pod.child.wait_for(60s);
  REQUIRE(st);
  REQUIRE(*st);
  // On the libvirt path, libvirt sets the tap's root qdisc to noqueue when QEMU gets it (it
  // does so under KubeVirt's own virt-launcher too): that one change is libvirt's, not ours.
  const auto without_qdisc = [](const std::string& snap) {
    return kQemu ? std::regex_replace(snap, std::regex(R"(qdisc \S+)"), "qdisc") : snap;
  };
  CHECK(without_qdisc(chl::test::net::netns_snapshot(ns)) == without_qdisc(before));
}

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): --hypervisor is KubeVirt's kernel hypervisor, CHL_VMM names the VMM on it") {
  if (kQemu) return;  // one hypervisor's run says it
  chl::test::TempDir dir("chl-vl-hv");
  const std::string share = (dir.path() / "share").string();
  // Without CHL_VMM (as outside the image), hyperv-direct has no VMM: exit 2 naming it.
  auto r = chl::test::run_command({"env", "-u", "CHL_VMM", chl::test::launcher_binary(), "virt-launcher",
                                   "--hypervisor", "hyperv-direct", "--kubevirt-share-dir", share});
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.output.find("--hypervisor hyperv-direct needs Cloud Hypervisor (CHL_VMM=cloud-hypervisor)") != std::string::npos,
                r.output);
  r = chl::test::run_command({"env", "CHL_VMM=firecracker", chl::test::launcher_binary(), "virt-launcher",
                              "--hypervisor", "kvm", "--kubevirt-share-dir", share});
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.output.find("CHL_VMM takes cloud-hypervisor or qemu-kvm, got firecracker") != std::string::npos, r.output);
  // With CHL_VMM=cloud-hypervisor (the image), KubeVirt's default `kvm` is Cloud Hypervisor: the
  // launcher says so at start, and a SIGTERM before any Sync ends it with 0.
  Pod pod;
  pod.hypervisor = "kvm";
  const char* before = std::getenv("CHL_VMM");
  ::setenv("CHL_VMM", "cloud-hypervisor", 1);
  pod.start();
  if (before) ::setenv("CHL_VMM", before, 1);
  else ::unsetenv("CHL_VMM");
  const auto sock = chl::kubevirt::ready_socket_path(pod.share());
  REQUIRE_MESSAGE(chl::test::wait_until(10s, [&] { return fs::exists(sock); }), pod.output());
  REQUIRE(::kill(pod.child.pid(), SIGTERM) == 0);
  auto st = pod.child.wait_for(10s);
  REQUIRE(st);
  REQUIRE(*st);
  CHECK(((*st)->exited && (*st)->code == 0));
  CHECK_MESSAGE(pod.output().find("--hypervisor kvm: Cloud Hypervisor on /dev/kvm (CHL_VMM=cloud-hypervisor)") != std::string::npos, pod.output());
}

namespace {

// The Linux test guest through the KubeVirt protocol on the libvirt path, after virt-handler's
// phase 1 for `binding` ("masquerade" or "bridge"; `ipv6`: a dual-stack pod and the guest's
// chl.ipv6): its console once it is ready ("" when skipped).
std::string real_guest_console(const std::string& binding, bool ipv6 = false) {
  if (!chl::test::libvirt_runnable()) return "";  // says why
  std::string why;
  auto guest = chl::test::find_linux_guest(&why);
  if (!guest) {
    chl::test::skip(why);
    return "";
  }
  PodNetns pn;
  if (auto w = pn.up(); !w.empty()) {
    chl::test::skip(w);
    return "";
  }
  Pod pod;
  chl::test::net::Phase1 p1{pn.ns.name()};
  if (binding == "bridge") {
    // The pod's interface as CNI made it (its MAC is the guest's: the VMI sets it here).
    const chl::test::net::PodIface iface{"02:00:00:aa:bb:cc", "10.244.0.5/24", "10.244.0.1"};
    REQUIRE(chl::test::net::ip(pn.ns.name(), {"link", "set", "eth0", "address", iface.mac}) == "");
    fs::create_directories(pod.priv());
    const auto e = chl::test::net::kubevirt_phase1_bridge(p1, iface, pod.priv().string());
    REQUIRE_MESSAGE(e.empty(), e);
  } else {
    if (ipv6) {
      REQUIRE(chl::test::net::ip(pn.ns.name(), {"addr", "add", "fd00:10:244::5/64", "dev", "eth0", "nodad"}) == "");
      p1.ipv6 = true;
    }
    const auto e = chl::test::net::kubevirt_phase1_masquerade(p1);
    REQUIRE_MESSAGE(e.empty(), e);
  }
  // The kernel-boot "container": the Linux guest's kernel and its networking initramfs.
  const auto kb = pod.cdisks() / "kernel-boot";
  fs::create_directories(kb);
  fs::copy_file(guest->kernel, kb / "vmlinuz");
  auto initrd = chl::test::run_command({"bash", (chl::test::source_dir() / "tests/guests/linux/net-initrd.sh").string(),
                                        guest->kernel.parent_path().string(), (kb / "initrd.cpio.gz").string()});
  if (initrd.exit_code == 3) {
    chl::test::skip(initrd.output);
    return "";
  }
  REQUIRE_MESSAGE(initrd.exit_code == 0, initrd.output);
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  auto cmd = pn.start(pod);
  auto j = nlohmann::json::parse(vmi_json());
  j["spec"]["domain"]["memory"]["guest"] = "256Mi";
  j["status"]["memory"] = {{"guestAtBoot", "256Mi"}, {"guestCurrent", "256Mi"}, {"guestRequested", "256Mi"}};
  j["spec"]["domain"]["firmware"]["kernelBoot"] = {
      {"kernelArgs", ipv6 ? "console=ttyS0 quiet panic=-1 chl.ipv6" : "console=ttyS0 quiet panic=-1"},
      {"container", {{"image", "registry.example/linux:1"}, {"kernelPath", "/vmlinuz"}, {"initrdPath", "/initrd.cpio.gz"}}}};
  j["spec"]["domain"]["devices"]["interfaces"] =
      nlohmann::json::parse(R"([{"name": "default", "macAddress": "02:00:00:aa:bb:cc"}])");
  j["spec"]["domain"]["devices"]["interfaces"][0][binding] = nlohmann::json::object();
  j["spec"]["networks"] = nlohmann::json::parse(R"([{"name": "default", "pod": {}}])");
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(j.dump());
  (*vmi.mutable_options()->mutable_interfacedomainattachment())["default"] = "tap";  // as virt-handler sends it
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }, 120s).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  // virtctl console's way in: the guest's lease, printed by its /init.
  const auto console = pod.priv() / kUid / "virt-serial0";
  REQUIRE(chl::test::wait_until(30s, [&] { return fs::exists(console); }));
  const std::string got = chl::test::read_socket_until(console, "chl-net: ready", 180s);
  REQUIRE(call([&](auto& c) { return cmd->KillVirtualMachine(&c, vmi, &r); }).ok());
  auto st = pod.child.wait_for(60s);
  REQUIRE(st);
  REQUIRE(*st);
  return got;
}

}  // namespace

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): a real guest gets its masquerade lease through phase 2 — the Linux test guest's udhcpc, the gateway answers") {
  if (!kQemu) return;  // a real guest needs a real VMM: the libvirt path (QEMU, TCG here)
  const std::string got = real_guest_console("masquerade");
  if (got.empty()) return;  // skipped, saying why
  CHECK_MESSAGE(got.find("chl-net: lease ip=10.0.2.2 subnet=255.255.255.0 router=10.0.2.1 mtu=1500") != std::string::npos, got);
  CHECK_MESSAGE(got.find("chl-net: gateway ok") != std::string::npos, got);
}

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): a real guest on a dual-stack pod reaches its IPv6 masquerade gateway through phase 2") {
  if (!kQemu) return;
  const std::string got = real_guest_console("masquerade", true);
  if (got.empty()) return;
  CHECK_MESSAGE(got.find("chl-net: lease ip=10.0.2.2") != std::string::npos, got);
  // KubeVirt's static fd10:0:2::2/120 in the guest (busybox has no DHCPv6 client), fd10:0:2::1
  // on phase 1's bridge answers.
  CHECK_MESSAGE(got.find("chl-net: ipv6 gateway ok") != std::string::npos, got);
}

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): a real guest gets the pod's address over bridge binding through phase 2 — from virt-handler's DHCP cache") {
  if (!kQemu) return;
  const std::string got = real_guest_console("bridge");
  if (got.empty()) return;
  CHECK_MESSAGE(got.find("chl-net: lease ip=10.244.0.5 subnet=255.255.255.0 router=10.244.0.1 mtu=1500") != std::string::npos, got);
}

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): memory hotplug within maxGuest — Sync accepts the new size, SyncVirtualMachineMemory resizes, a step CH cannot add, beyond maxGuest or less is refused") {
  if (kQemu) return;  // the libvirt path answers "not supported" (the CPU case in the flow test)
  if (!fs::exists(chl::test::guest_kernel())) {
    chl::test::skip("the PVH test guest is not built");
    return;
  }
  Pod pod;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  pod.start();
  const auto sock = chl::kubevirt::ready_socket_path(pod.share());
  REQUIRE_MESSAGE(chl::test::wait_until(10s, [&] { return fs::exists(sock); }), pod.output());
  auto cmd = v1::Cmd::NewStub(grpc::CreateChannel("unix:" + sock.string(), grpc::InsecureChannelCredentials()));
  auto j = nlohmann::json::parse(vmi_json());
  j["spec"]["domain"]["memory"] = {{"guest", "128Mi"}, {"maxGuest", "512Mi"}};
  j["status"]["memory"] = {{"guestAtBoot", "128Mi"}, {"guestCurrent", "128Mi"}, {"guestRequested", "128Mi"}};
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(j.dump());
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  j["spec"]["domain"]["memory"]["guest"] = "256Mi";
  vmi.mutable_vmi()->set_vmijson(j.dump());
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachineMemory(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  v1::EmptyRequest empty;
  v1::DomainResponse dom;
  REQUIRE(call([&](auto& c) { return cmd->GetDomain(&c, empty, &dom); }).ok());
  CHECK(nlohmann::json::parse(dom.domain())["Spec"]["Memory"]["Value"] == 256 * 1024);
  // Cloud Hypervisor adds memory in 128 MiB steps: 64 MiB more is refused saying so.
  j["spec"]["domain"]["memory"]["guest"] = "320Mi";
  vmi.mutable_vmi()->set_vmijson(j.dump());
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachineMemory(&c, vmi, &r); }).ok());
  CHECK_FALSE(r.success());
  CHECK_MESSAGE(r.message().find("adds memory in steps of 128 MiB: 64 MiB more (256 to 320 MiB) is not one") != std::string::npos,
                r.message());
  for (const char* size : {"1Gi", "64Mi"}) {
    j["spec"]["domain"]["memory"]["guest"] = size;
    vmi.mutable_vmi()->set_vmijson(j.dump());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachineMemory(&c, vmi, &r); }).ok());
    CHECK_FALSE(r.success());
    CHECK_MESSAGE(r.message().find("spec.domain.memory.guest") != std::string::npos, r.message());
  }
  (void)pod.child.signal(SIGTERM);
  auto st = pod.child.wait_for(30s);
  REQUIRE(st);
  CHECK(*st);
}

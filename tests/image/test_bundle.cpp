// The launcher bundle (scripts/bundle.sh; the image's /usr/lib/ch-launcher/bundle/) run as a mixed
// cluster's webhook patches a VMI's pod (helpers' pod contract, docs/deploy.md "The launcher
// bundle"): our image as an init container (uid 107, drop ALL, no_new_privs) copies the bundle into
// a pod volume; a FOREIGN root filesystem stands in for KubeVirt's launcher image — busybox-static
// alone and an /etc/passwd with uid 107, no glibc at all — and its compute container runs
// /opt/ch-launcher/bin/virt-launcher-monitor with template.go's arguments, CHL_VMM=cloud-hypervisor,
// as uid 107 with NET_BIND_SERVICE only, no_new_privs, a read-only root, the pod's own device nodes
// and net.ipv4.ip_unprivileged_port_start=67. The test plays virt-handler (as test_image.cpp does).
// Lane image: CHL_IMAGE names the image; skipped, saying why, without it or without root.
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kubevirt/proto/cmd.grpc.pb.h"
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

constexpr const char* kUid = "7c1e5b2a-3d4f-4a6b-8c9d-0e1f2a3b4c5d";
constexpr const char* kBundleInImage = "/usr/lib/ch-launcher/bundle";
constexpr const char* kMount = "/opt/ch-launcher";  // the pod contract's mount path

// The VMI as virt-handler sends it: kernel boot, a container disk, one masquerade NIC.
std::string vmi_json() {
  auto j = nlohmann::json::parse(R"({
    "kind": "VirtualMachineInstance", "apiVersion": "kubevirt.io/v1",
    "metadata": {"name": "testvm", "namespace": "default", "uid": "", "resourceVersion": "4711"},
    "spec": {
      "domain": {
        "resources": {},
        "cpu": {"cores": 1, "sockets": 1, "threads": 1},
        "memory": {"guest": "64Mi"},
        "machine": {"type": "q35"},
        "firmware": {"uuid": "0b8a3c6e-8f0e-4f4e-9d5e-1c2b3a4d5e6f",
                     "kernelBoot": {"kernelArgs": "console=ttyS0 kv-bundle",
                                    "container": {"image": "registry.example/pvh:1", "kernelPath": "/boot/guest.elf"}}},
        "devices": {
          "disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}}],
          "interfaces": [{"name": "default", "masquerade": {}, "macAddress": "02:00:00:aa:bb:cd"}]
        }
      },
      "networks": [{"name": "default", "pod": {}}],
      "volumes": [{"name": "containerdisk", "containerDisk": {"image": "registry.example/disk:1"}}],
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

// A root filesystem that is not ours: busybox-static alone (no dynamic loader, no libc), the
// user 107 KubeVirt runs its launcher as, imported as an image. Its tag, or "" and `why`.
std::string foreign_image(std::string& why) {
  const std::string tag = "bundle-foreign:busybox";
  if (docker({"image", "inspect", tag}).exit_code == 0) return tag;
  const fs::path busybox = "/bin/busybox";
  if (!fs::exists(busybox) || chl::test::run_command({"sh", "-c", "ldd /bin/busybox 2>&1 | grep -q 'not a dynamic'"}).exit_code != 0) {
    why = "no static busybox here (apt-get install busybox-static)";
    return {};
  }
  chl::test::TempDir root("bundle-foreign");
  for (const char* d : {"bin", "etc", "tmp", "var/run", "proc", "sys", "dev"}) fs::create_directories(root.path() / d);
  fs::copy_file(busybox, root.path() / "bin" / "busybox");
  for (const char* app : {"sh", "ls", "cat", "id", "readlink", "find", "du", "wc", "head"})
    fs::create_symlink("busybox", root.path() / "bin" / app);
  chl::test::write_file(root.path() / "etc" / "passwd", "root:x:0:0:root:/root:/bin/sh\nqemu:x:107:107:qemu:/:/bin/sh\n");
  chl::test::write_file(root.path() / "etc" / "group", "root:x:0:\nqemu:x:107:\n");
  auto r = chl::test::run_command({"sh", "-c", "tar -C '" + root.path().string() + "' -c . | docker import -c 'CMD [\"/bin/sh\"]' - " + tag});
  if (r.exit_code != 0) {
    why = "docker import of the busybox root filesystem failed: " + r.output;
    return {};
  }
  return tag;
}

struct Bundle {
  chl::test::TempDir volume{"bundle-vol"};
  std::string vmm_note;  // which VMM the bundle runs
};

bool placeholder(const fs::path& p) {
  return chl::test::read_file(p).substr(0, 512).find("ch-launcher-placeholder-vmm") != std::string::npos;
}

// The init container of the pod contract: our image as uid 107, drop ALL, no_new_privs, read-only
// root, `cp -R /usr/lib/ch-launcher/bundle/. /opt/ch-launcher/` into the pod volume. When the image
// was built without a VMM (its bundle holds the placeholder), the test puts one in the volume as a
// builder's image/vmm/ would have: the real Cloud Hypervisor when there is one, else the VMM
// double, with the bundle's interpreter and RUNPATH.
void copy_bundle(const std::string& image, Bundle& b) {
  REQUIRE(::chown(b.volume.path().c_str(), 107, 107) == 0);
  REQUIRE(::chmod(b.volume.path().c_str(), 0755) == 0);
  chl::test::CommandResult r;
  if (image.empty()) {
    // No image with the bundle: the one scripts/bundle.sh made from this build (CHL_BUNDLE_DIR),
    // copied as the init container would (owned by 107).
    r = chl::test::run_command({"sh", "-c", "cp -R '" + std::string(std::getenv("CHL_BUNDLE_DIR")) + "/.' '" +
                                                b.volume.path().string() + "/' && chown -R 107:107 '" +
                                                b.volume.path().string() + "'"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  } else r = docker({"run", "--rm", "--name", "bundle-init-" + std::to_string(::getpid()), "--user", "107:107", "--cap-drop",
                   "ALL", "--security-opt", "no-new-privileges", "--read-only", "-v",
                   b.volume.path().string() + ":" + kMount, "--entrypoint", "/bin/cp", image, "-R",
                   std::string(kBundleInImage) + "/.", std::string(kMount) + "/"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const fs::path vmm = b.volume.path() / "bin" / "cloud-hypervisor";
  REQUIRE(fs::exists(vmm));
  if (!placeholder(vmm)) {
    b.vmm_note = "the bundle's own Cloud Hypervisor";
    return;
  }
  std::string from = chl::test::vmm_binary();
  const fs::path shared = chl::test::source_dir() / ".." / "shared" / "bin" / "cloud-hypervisor";
  if (!chl::test::using_real_vmm() && fs::exists(shared)) from = shared.string();
  fs::remove(vmm);
  fs::copy_file(from, vmm);
  r = chl::test::run_command({"patchelf", "--set-interpreter", std::string(kMount) + "/lib/ld-linux-x86-64.so.2",
                              "--set-rpath", "$ORIGIN/../lib", vmm.string()});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  b.vmm_note = from + " put into the bundle (the image has the placeholder)";
}

// The lane's images, or nullopt having said why. `ours` is "" when only CHL_BUNDLE_DIR (a bundle
// scripts/bundle.sh made from this build) is given: the init container's part is then skipped.
struct Images {
  std::string ours, foreign;
};
std::optional<Images> images(bool need_ours = false) {
  std::string why;
  auto image = chl::test::image::image_under_test(why);
  const char* bundle_dir = std::getenv("CHL_BUNDLE_DIR");
  const bool have_dir = bundle_dir && *bundle_dir && fs::exists(fs::path(bundle_dir) / "bin" / "ch-launcher");
  if (image && docker({"run", "--rm", "--entrypoint", "/bin/ls", *image, std::string(kBundleInImage) + "/bin/ch-launcher"}).exit_code != 0) {
    why = *image + " has no " + kBundleInImage + " (built before the Dockerfile's bundle stage: scripts/image.sh)";
    image.reset();
  }
  if (!image && (need_ours || !have_dir || ::geteuid() != 0 || !chl::test::tool("docker"))) {
    chl::test::skip(why + (have_dir ? "" : "; no CHL_BUNDLE_DIR either"));
    return std::nullopt;
  }
  if (!image) chl::test::skip_part(why + ": the bundle comes from CHL_BUNDLE_DIR, not from the image's init container");
  auto foreign = foreign_image(why);
  if (foreign.empty()) {
    chl::test::skip(why);
    return std::nullopt;
  }
  if (!chl::test::tool("patchelf")) {
    chl::test::skip("no patchelf (scripts/setup.sh)");
    return std::nullopt;
  }
  return Images{image.value_or(""), foreign};
}

// The host pids of `pid`'s children (the VMM under the launcher).
std::vector<int> children(int pid) {
  std::vector<int> out;
  for (const auto& t : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    std::istringstream in(chl::test::read_file(t.path() / "children"));
    for (int c; in >> c;) out.push_back(c);
  }
  return out;
}

// Every file-backed library mapped by `pid`, as the process sees its paths.
std::vector<std::string> mapped_libraries(int pid) {
  std::vector<std::string> out;
  std::istringstream in(chl::test::read_file("/proc/" + std::to_string(pid) + "/maps"));
  for (std::string l; std::getline(in, l);) {
    auto slash = l.find('/');
    if (slash == std::string::npos) continue;
    std::string p = l.substr(slash);
    if (p.find(".so") != std::string::npos && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  return out;
}

struct Flow {
  long start_to_running_ms = 0;
};

// virt-handler's part, as test_image.cpp plays it: phase 1, Sync, Running, then the kubelet's
// SIGTERM, Shutdown, DeleteDomain, exit 0. `bundle`: the compute container runs the bundle.
Flow drive(Pod& pod, bool bundle) {
  Flow f;
  fill_container_disks(pod);
  const auto notify_path = pod.share() / "domain-notify-pipe.sock";
  chl::test::TestNotifyServer notify(notify_path);
  REQUIRE(::chown(notify_path.c_str(), 107, 107) == 0);
  const auto started = std::chrono::steady_clock::now();
  REQUIRE_MESSAGE(pod.start() == "", pod.logs());
  const auto sock = pod.sockets() / "launcher-sock";
  REQUIRE_MESSAGE(chl::test::wait_until(30s, [&] { return fs::exists(sock); }), pod.logs());
  auto cmd = v1::Cmd::NewStub(grpc::CreateChannel("unix:" + sock.string(), grpc::InsecureChannelCredentials()));
  const std::string ns = pod.attach_netns();
  REQUIRE(!ns.empty());
  chl::test::net::Phase1 p1{ns};
  p1.lower_unprivileged_ports = false;  // the pod's sysctl (67) is the runtime's to set
  const auto wired = chl::test::net::kubevirt_phase1_masquerade(p1);
  REQUIRE_MESSAGE(wired.empty(), wired);

  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(vmi_json());
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.logs());
  REQUIRE_MESSAGE(chl::test::wait_until(30s, [&] { return has_state(notify, "Running"); }), pod.logs());
  f.start_to_running_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
  const std::string logs = pod.logs();
  CHECK_MESSAGE(logs.find("interface default attached (phase 2): tap tap0") != std::string::npos, logs);
  CHECK_MESSAGE(logs.find("no real VMM") == std::string::npos, logs);

  // The guest's console log where KubeVirt's guest-console-log sidecar tails it.
  const auto console_log = pod.priv() / kUid / "virt-serial0-log";
  CHECK_MESSAGE(chl::test::wait_until(20s, [&] {
    return fs::exists(console_log) && chl::test::read_file(console_log).find("kv-bundle") != std::string::npos;
  }), (fs::exists(console_log) ? chl::test::read_file(console_log) : console_log.string() + " missing") << "\n" << logs);
  if (fs::exists(console_log)) {
    struct stat st {};
    REQUIRE(::stat(console_log.c_str(), &st) == 0);
    CHECK(st.st_uid == 107);  // readable by the sidecar, which runs as 107 too
  }

  const int pid = pod.host_pid();
  REQUIRE(pid > 0);
  if (bundle) {
    // Every library the launcher and its VMM mapped is the bundle's: nothing of the foreign root.
    std::vector<int> pids = {pid};
    for (int c : children(pid)) pids.push_back(c);
    CHECK_MESSAGE(pids.size() >= 2, "no VMM under the launcher");
    for (int p : pids) {
      const auto libs = mapped_libraries(p);
      CHECK_FALSE(libs.empty());
      for (const auto& l : libs) CHECK_MESSAGE(l.rfind(std::string(kMount) + "/", 0) == 0, "pid " << p << " maps " << l);
      const std::string exe = fs::read_symlink("/proc/" + std::to_string(p) + "/exe").string();
      CHECK_MESSAGE(exe.rfind(std::string(kMount) + "/bin/", 0) == 0, exe);
    }
    // virt-probe from the bundle in the compute container, as the webhook rewrites a
    // guestAgentPing probe: our launcher's answer (the PVH guest runs no agent), exit 1.
    const auto probe = docker({"exec", pod.name(), std::string(kMount) + "/bin/virt-probe", "--domainName",
                               "default_testvm", "--timeoutSeconds", "1", "--guestAgentPing"});
    CHECK_MESSAGE(probe.exit_code == 1, probe.output);
    CHECK_MESSAGE(probe.output.find("Failed to ping the guest") != std::string::npos, probe.output);
    const std::string status = chl::test::read_file("/proc/" + std::to_string(pid) + "/status");
    CHECK_MESSAGE(status.find("NoNewPrivs:\t1") != std::string::npos, status);
    CHECK_MESSAGE(status.find("CapBnd:\t0000000000000400") != std::string::npos, status);
  }

  (void)docker({"kill", "--signal", "TERM", pod.name()});
  REQUIRE_MESSAGE(chl::test::wait_until(10s, [&] {
    for (const auto& n : notify.received())
      if (!n.k8s && n.json.dump().find(R"("MarkedForGracefulShutdown":true)") != std::string::npos) return true;
    return false;
  }), pod.logs());
  REQUIRE(call([&](auto& c) { return cmd->ShutdownVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  if (!chl::test::wait_until(20s, [&] { return has_state(notify, "Shutoff"); })) {
    REQUIRE(call([&](auto& c) { return cmd->KillVirtualMachine(&c, vmi, &r); }).ok());
    REQUIRE(chl::test::wait_until(20s, [&] { return has_state(notify, "Shutoff"); }));
  }
  REQUIRE(call([&](auto& c) { return cmd->DeleteVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  CHECK_MESSAGE(pod.wait() == 0, pod.logs());
  return f;
}

}  // namespace

TEST_CASE("the bundle: copied by the init container as uid 107, then in a busybox-only root filesystem every ELF runs on the bundle's loader and libraries") {
  auto im = images();
  if (!im) return;  // said why
  Bundle b;
  copy_bundle(im->ours, b);
  const fs::path v = b.volume.path();
  for (const char* f : {"bin/ch-launcher", "bin/virt-probe", "bin/cloud-hypervisor", "lib/ld-linux-x86-64.so.2",
                        "lib/libc.so.6", "lib/libstdc++.so.6", "lib/ch-launcher/libchl-network.so",
                        "lib/ch-launcher/libchl-kubevirt.so"})
    CHECK_MESSAGE(fs::exists(v / f), f);
  CHECK(fs::read_symlink(v / "bin" / "virt-launcher-monitor") == "ch-launcher");
  CHECK(fs::read_symlink(v / "bin" / "virt-launcher") == "ch-launcher");
  struct stat st {};
  REQUIRE(::stat((v / "bin" / "ch-launcher").c_str(), &st) == 0);
  CHECK(st.st_uid == 107);  // the init container's copy (uid 107)
  CHECK((st.st_mode & 07000) == 0);  // no set-id bit, no file capability: the pod's sysctl binds port 67
  std::size_t files = 0;
  std::uintmax_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(v))
    if (e.is_regular_file() && !e.is_symlink()) {
      ++files;
      bytes += e.file_size();
    }
  MESSAGE("bundle size: " << files << " files, " << bytes / 1024 << " KiB; VMM: " << b.vmm_note);

  // In the foreign root: the loader lists every library of every ELF from the bundle, and the
  // programs run (uid 107, read-only root, the bundle read-only).
  const std::string script =
      "set -e; id -u; ls /lib /usr/lib 2>&1 | head -n 3; "
      "for f in /opt/ch-launcher/bin/ch-launcher /opt/ch-launcher/bin/virt-probe /opt/ch-launcher/bin/cloud-hypervisor "
      "/opt/ch-launcher/lib/ch-launcher/*.so; do echo \"== $f\"; /opt/ch-launcher/lib/ld-linux-x86-64.so.2 --list \"$f\"; done; "
      "/opt/ch-launcher/bin/ch-launcher --version; /opt/ch-launcher/bin/cloud-hypervisor --version";
  auto r = docker({"run", "--rm", "--name", "bundle-list-" + std::to_string(::getpid()), "--user", "107:107", "--cap-drop",
                   "ALL", "--cap-add", "NET_BIND_SERVICE", "--security-opt", "no-new-privileges", "--read-only", "-v",
                   v.string() + ":" + kMount + ":ro", "--entrypoint", "/bin/sh", im->foreign, "-c", script});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK_MESSAGE(r.output.rfind("107\n", 0) == 0, r.output);
  CHECK_MESSAGE(r.output.find("No such file or directory") != std::string::npos, r.output);  // no /lib, no /usr/lib
  CHECK_MESSAGE(r.output.find("not found") == std::string::npos, r.output);
  std::istringstream lines(r.output);
  int resolved = 0;
  for (std::string l; std::getline(lines, l);) {
    const auto arrow = l.find("=> ");
    if (arrow == std::string::npos) continue;
    ++resolved;
    std::string to = l.substr(arrow + 3);
    to = to.substr(0, to.find(" ("));
    CHECK_MESSAGE(fs::path(to).lexically_normal().string().rfind(std::string(kMount) + "/lib/", 0) == 0, l);
  }
  CHECK(resolved > 10);

  // The launcher run from the bundle takes firmware from the bundle's share/cloud-hypervisor
  // (the image's, or here the PVH test guest standing in for hypervisor-fw when it has none).
  if (fs::exists(chl::test::guest_kernel())) {
    const fs::path fw = v / "share" / "cloud-hypervisor" / "hypervisor-fw";
    if (!fs::exists(fw)) {
      fs::create_directories(fw.parent_path());
      fs::copy_file(chl::test::guest_kernel(), fw);
      if (fs::file_size(fw) < 64 * 1024) fs::resize_file(fw, 64 * 1024);  // a plausible firmware size
    }
    chl::test::TempDir in("bundle-fwvmi");
    chl::test::write_file(in.path() / "vmi.yaml",
                          "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {name: fw}\n"
                          "spec: {domain: {devices: {}, memory: {guest: 64Mi}}}\n");
    REQUIRE(::chmod(in.path().c_str(), 0755) == 0);
    auto f = docker({"run", "--rm", "--user", "107:107", "--cap-drop", "ALL", "--cap-add", "NET_BIND_SERVICE",
                     "--security-opt", "no-new-privileges", "--read-only", "-v", v.string() + ":" + kMount + ":ro",
                     "-v", in.path().string() + ":/in:ro", "--entrypoint", std::string(kMount) + "/bin/ch-launcher",
                     im->foreign, "firmware", "--vmi", "/in/vmi.yaml"});
    CHECK_MESSAGE(f.exit_code == 0, f.output);
    CHECK_MESSAGE(f.output.find("firmware: /opt/ch-launcher/share/cloud-hypervisor/hypervisor-fw") != std::string::npos,
                  f.output);
  }
  CHECK_MESSAGE(r.output.find("ch-launcher") != std::string::npos, r.output);
  CHECK_MESSAGE(r.output.find("cloud-hypervisor v") != std::string::npos, r.output);  // CH's, or the double's alike
}

TEST_CASE("the bundle in a foreign root filesystem as the webhook's patched pod: Sync to Running on the bundle's VMM, the console log for guest-console-log, virt-probe, then SIGTERM, Shutdown, DeleteDomain, exit 0") {
  auto im = images();
  if (!im) return;  // said why
  if (!fs::exists(chl::test::guest_kernel())) {
    chl::test::skip("the PVH test guest is not built");
    return;
  }
  Bundle b;
  copy_bundle(im->ours, b);
  PodOptions po;
  po.vmi_uid = kUid;
  po.entrypoint = std::string(kMount) + "/bin/virt-launcher-monitor";
  po.name_prefix = "bundle-pod-";
  po.extra_run_args = {"-v", b.volume.path().string() + ":" + kMount + ":ro", "--env", "CHL_VMM=cloud-hypervisor",
                       "--sysctl", "net.ipv4.ip_unprivileged_port_start=67"};
  Pod pod(im->foreign, po);
  const Flow f = drive(pod, true);
  MESSAGE("start to Running, bundle in the foreign root: " << f.start_to_running_ms << " ms (" << b.vmm_note << ")");
}

TEST_CASE("the same VM from our own image, for the figure beside the bundle's") {
  auto im = images(true);
  if (!im) return;  // said why
  if (!fs::exists(chl::test::guest_kernel())) {
    chl::test::skip("the PVH test guest is not built");
    return;
  }
  // The same VMM as the bundle's run: the image's own when it has one, else the one copy_bundle picks.
  Bundle b;
  copy_bundle(im->ours, b);
  PodOptions po;
  po.vmi_uid = kUid;
  po.name_prefix = "bundle-ours-";
  if (docker({"run", "--rm", "--entrypoint", "/bin/grep", im->ours, "-q", "ch-launcher-placeholder-vmm",
              "/usr/bin/cloud-hypervisor"}).exit_code == 0)
    po.extra_run_args = {"-v", (b.volume.path() / "bin" / "cloud-hypervisor").string() + ":/usr/bin/cloud-hypervisor:ro"};
  Pod pod(im->ours, po);
  const Flow f = drive(pod, false);
  MESSAGE("start to Running, our own image: " << f.start_to_running_ms << " ms (" << b.vmm_note << ")");
}

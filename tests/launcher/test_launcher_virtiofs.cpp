// virtio-fs on Cloud Hypervisor, end to end through `ch-launcher run` (lane vmm: the VMM double,
// or a real cloud-hypervisor with CLOUD_HYPERVISOR_BIN, unchanged). As in KubeVirt's pod, the
// virtiofsd is not the launcher's: the test starts Debian's real virtiofsd as KubeVirt's
// virtiofs-<name> container would (tests/support/virtiofsd.hpp), in a directory standing for the
// virtiofs-containers emptyDir (--virtiofs-dir). The VMM connects to it when the VM is created
// and holds the connection while the VM exists (the double performs CH's vhost-user handshake:
// tests/vmm_double/vhost_user.hpp); virtiofsd serves one frontend and exits when it hangs up.
#include <sys/socket.h>
#include <sys/un.h>

#include <thread>

#include "tests/support/launcher_harness.hpp"
#include "tests/support/virtiofsd.hpp"

using chl::test::LauncherRun;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The harness's kernel-boot VMI with filesystems on PVC-shaped volumes named `names`.
void write_vmi_with_filesystems(LauncherRun& r, const std::vector<std::string>& names,
                                const std::string& cmdline = "console=ttyS0") {
  r.write_vmi(cmdline);
  std::ofstream f(r.vmi_file(), std::ios::app);
  f << "      filesystems:\n";
  for (const auto& n : names) f << "      - name: " << n << "\n        virtiofs: {}\n";
  f << "  volumes:\n";
  for (const auto& n : names)
    f << "  - name: " << n << "\n    persistentVolumeClaim:\n      claimName: " << n << "\n";
}

bool virtiofsd_or_skip(std::string& binary) {
  std::string why;
  auto b = chl::test::find_virtiofsd(&why);
  if (!b) {
    chl::test::skip(why);
    return false;
  }
  binary = *b;
  return true;
}

}  // namespace

TEST_CASE(
    "virtiofs on cloud-hypervisor: fs devices on the virtiofs containers' sockets, shared memory, "
    "held until the VM goes") {
  if (!chl::test::needs_cooperative_guest()) return;  // ends with a graceful stop
  std::string bin;
  if (!virtiofsd_or_skip(bin)) return;
  LauncherRun r;
  const fs::path socks = r.dir.path() / "virtiofs-containers";
  fs::create_directories(socks);
  fs::create_directories(r.dir.path() / "data");
  fs::create_directories(r.dir.path() / "config");
  auto data = chl::test::start_virtiofsd(bin, socks / "data.sock", r.dir.path() / "data",
                                         r.dir.path() / "vfs-data.log");
  auto config = chl::test::start_virtiofsd(bin, socks / "config.sock", r.dir.path() / "config",
                                           r.dir.path() / "vfs-config.log");
  write_vmi_with_filesystems(r, {"data", "config"});
  r.start({"--virtiofs-dir", socks.string(), "--virtiofs-wait", "10"});
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());

  // The VMM's own view of the VM (status: vm.info's config): one fs device per filesystem, the
  // tag its name, the socket KubeVirt's, and the guest memory shared.
  json d = r.domain();
  const json& cfg = d["info"]["config"];
  REQUIRE_MESSAGE(cfg["fs"].is_array(), d.dump(2));
  REQUIRE(cfg["fs"].size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    const std::string name = i == 0 ? "data" : "config";
    CHECK(cfg["fs"][i]["tag"] == name);
    CHECK(cfg["fs"][i]["id"] == name);
    CHECK(cfg["fs"][i]["socket"] == (socks / (name + ".sock")).string());
    CHECK(cfg["fs"][i]["num_queues"] == 1);
    CHECK(cfg["fs"][i]["queue_size"] == 1024);
  }
  CHECK(cfg["memory"]["shared"] == true);
  // The VMM holds each connection: both daemons still serve.
  CHECK_MESSAGE(data.running(), chl::test::read_file(data.log));
  CHECK_MESSAGE(config.running(), chl::test::read_file(config.log));

  auto stop = r.cli({"stop", "--grace-period", "10"});
  CHECK_MESSAGE(stop.exit_code == 0, stop.output);
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK_MESSAGE(exit->code == 0, r.output());
  // The VM is gone, its vhost-user connections with it: each virtiofsd sees its frontend hang up
  // and exits, as beside a real Cloud Hypervisor.
  CHECK(chl::test::wait_until(
      std::chrono::seconds(10), [&] { return !data.running() && !config.running(); },
      std::chrono::milliseconds(20)));
}

TEST_CASE(
    "virtiofs: the virtiofs container may start after the launcher: it waits for the socket, then "
    "boots") {
  if (!chl::test::needs_cooperative_guest()) return;  // ends with a graceful stop
  std::string bin;
  if (!virtiofsd_or_skip(bin)) return;
  LauncherRun r;
  const fs::path socks = r.dir.path() / "virtiofs-containers";
  fs::create_directories(socks);
  fs::create_directories(r.dir.path() / "data");
  write_vmi_with_filesystems(r, {"data"});
  r.start({"--virtiofs-dir", socks.string(), "--virtiofs-wait", "20"});
  // Not Running while nothing serves the socket.
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  CHECK(r.domain().value("state", "") != "Running");
  CHECK_FALSE(r.launcher_exited());
  auto data = chl::test::start_virtiofsd(bin, socks / "data.sock", r.dir.path() / "data",
                                         r.dir.path() / "vfs.log");
  REQUIRE_MESSAGE(r.wait_state("Running", std::chrono::seconds(30)), r.output());
  CHECK(data.running());
  CHECK(r.cli({"stop", "--grace-period", "10"}).exit_code == 0);
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK(exit->code == 0);
}

TEST_CASE(
    "virtiofs: a socket that never appears fails the start after the bounded wait, naming the "
    "filesystem and the socket") {
  LauncherRun r;
  const fs::path socks = r.dir.path() / "virtiofs-containers";
  fs::create_directories(socks);
  write_vmi_with_filesystems(r, {"data"});
  const auto t0 = std::chrono::steady_clock::now();
  r.start({"--virtiofs-dir", socks.string(), "--virtiofs-wait", "0.5"});
  auto exit = r.wait_exit(std::chrono::seconds(30));
  REQUIRE(exit);
  CHECK(exit->code == 1);
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(500));
  const std::string out = r.output();
  CHECK_MESSAGE(out.find("filesystem 'data': virtiofs socket " + (socks / "data.sock").string() +
                         " did not appear within 0.5 s") != std::string::npos,
                out);
  // Refused before any VMM ran: no API socket, no VMM pid left.
  CHECK_FALSE(fs::exists(r.state_dir() / "ch-api.sock"));
  CHECK_FALSE(fs::exists(r.state_dir() / "vmm.pid"));
}

TEST_CASE(
    "virtiofs: a backend that hangs up in the handshake fails the boot with Cloud Hypervisor's "
    "error") {
  LauncherRun r;
  const fs::path socks = r.dir.path() / "virtiofs-containers";
  fs::create_directories(socks);
  // A dying virtiofsd: accepts the VMM, reads its first two requests (SET_OWNER, GET_FEATURES:
  // 12-byte headers), and exits without answering.
  auto addr = chl::common::unix_address(socks / "data.sock");
  REQUIRE(addr);
  chl::common::UniqueFd lfd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(::bind(lfd.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr) == 0);
  REQUIRE(::listen(lfd.get(), 1) == 0);
  std::thread backend([&] {
    pollfd p{lfd.get(), POLLIN, 0};
    if (::poll(&p, 1, 20000) <= 0) return;
    chl::common::UniqueFd c(::accept4(lfd.get(), nullptr, nullptr, SOCK_CLOEXEC));
    char buf[24];
    std::size_t got = 0;
    while (c && got < sizeof buf) {
      const ssize_t n = ::read(c.get(), buf + got, sizeof buf - got);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
  });
  write_vmi_with_filesystems(r, {"data"});
  r.start({"--virtiofs-dir", socks.string(), "--virtiofs-wait", "5"});
  auto exit = r.wait_exit(std::chrono::seconds(60));
  backend.join();
  REQUIRE(exit);
  CHECK(exit->code == 1);
  const std::string out = r.output();
  // CH v52's chain: DeviceManagerError::CreateVirtioFs, vhost_user::Error::VhostUserGetFeatures,
  // the vhost crate's PartialMessage (a reply cut short by the hang-up).
  CHECK_MESSAGE(out.find("Cannot create virtio-fs device") != std::string::npos, out);
  CHECK_MESSAGE(out.find("Get features failed") != std::string::npos, out);
  CHECK_MESSAGE(out.find("vhost-user: partial message") != std::string::npos, out);
}

TEST_CASE(
    "virtiofs: a socket nobody listens on (virtiofsd exited) fails the start after the wait, "
    "saying so") {
  LauncherRun r;
  const fs::path socks = r.dir.path() / "virtiofs-containers";
  fs::create_directories(socks);
  chl::test::leave_stale_socket(socks / "data.sock");  // what a SIGKILLed virtiofsd leaves
  write_vmi_with_filesystems(r, {"data"});
  r.start({"--virtiofs-dir", socks.string(), "--virtiofs-wait", "0.5"});
  auto exit = r.wait_exit(std::chrono::seconds(30));
  REQUIRE(exit);
  CHECK(exit->code == 1);
  const std::string out = r.output();
  CHECK_MESSAGE(out.find("filesystem 'data': virtiofs socket " + (socks / "data.sock").string() +
                         " is there but nothing listened on it within 0.5 s") != std::string::npos,
                out);
  CHECK_FALSE(fs::exists(r.state_dir() / "ch-api.sock"));
}

// Cloud Hypervisor's live migration through the shape KubeVirt gives it: two "pods" (their own
// directories), the receiving VMM listening on the target pod's
// migrationproxy/<vmiUID>-49152-source.sock, the sending VMM writing to the source pod's socket
// of the same name, and a stand-in of virt-handler's migration proxy between them (unix -> TCP
// on 127.0.0.1 -> unix; tests/kubevirt/migration_proxy.hpp). Runs against the VMM double or a
// real cloud-hypervisor (CLOUD_HYPERVISOR_BIN, with CHL_TEST_GUEST_KERNEL). No network
// namespaces: both pods share the host's (the proxy hop is TCP on loopback).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>

#include "common/child_process.hpp"
#include "tests/kubevirt/migration_proxy.hpp"
#include "tests/support/real_vmm_limits.hpp"
#include "tests/support/test_support.hpp"
#include "vmm_api/client.hpp"

using namespace chl::vmm_api;
using chl::common::ChildProcess;
using chl::common::SpawnOptions;
using chl::common::UniqueFd;
using chl::test::TempDir;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

constexpr const char* kUid = "0e5a2b5c-9f1d-4c1e-a5b0-6d1f3c2a7e11";

// A pod-like directory with a VMM in it (the double or CLOUD_HYPERVISOR_BIN).
class PodVmm {
 public:
  explicit PodVmm(const std::string& tag) : dir_(tag) {
    fs::create_directories(dir_ / "migrationproxy");
    SpawnOptions o;
    o.argv = {chl::test::vmm_binary(), "--api-socket", "path=" + (dir_ / "api.sock").string(),
              "--event-monitor", "path=" + (dir_ / "events").string()};
    o.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "VMM_DOUBLE_HEARTBEAT_MS=50"};
    log_.reset(::open((dir_ / "vmm.log").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    o.stdout_fd = log_.get();
    o.stderr_fd = log_.get();
    auto child = ChildProcess::spawn(o);
    REQUIRE_MESSAGE(child, (child ? "" : child.error().message()));
    proc_ = std::move(*child);
    ClientOptions co;
    co.migration_timeout = 120s;
    api_ = std::make_unique<Client>((dir_ / "api.sock").string(), co);
    REQUIRE_MESSAGE(chl::test::wait_until(10s, [&] { return api_->vmm_ping().has_value(); }),
                    "VMM did not come up: " << log());
  }
  Client& api() { return *api_; }
  ChildProcess& proc() { return proc_; }
  [[nodiscard]] fs::path migration_socket() const {
    return dir_ / "migrationproxy" / (std::string(kUid) + "-49152-source.sock");
  }
  [[nodiscard]] std::string log() const { return chl::test::read_file(dir_ / "vmm.log"); }
  [[nodiscard]] std::string events() const { return chl::test::read_file(dir_ / "events"); }
  [[nodiscard]] const TempDir& dir() const { return dir_; }

 private:
  TempDir dir_;
  UniqueFd log_;
  ChildProcess proc_;
  std::unique_ptr<Client> api_;
};

std::optional<std::string> kernel_for(const TempDir& dir) {
  if (chl::test::using_real_vmm()) {
    const char* k = std::getenv("CHL_TEST_GUEST_KERNEL");
    if (!k || !*k) return std::nullopt;
    return std::string(k);
  }
  chl::test::write_file(dir / "kernel", "not a kernel: the double only reads it\n");
  return (dir / "kernel").string();
}

VmConfig guest(const std::string& kernel) {
  VmConfig c;
  c.payload.kernel = kernel;
  c.payload.cmdline = "console=ttyS0 migrating-guest";
  c.cpus = CpusConfig{};
  c.cpus->boot_vcpus = 1;
  c.cpus->max_vcpus = 1;
  c.memory = MemoryConfig{};
  c.memory->size = 64ull << 20;
  c.serial = SerialConfig{};
  c.serial->mode = ConsoleMode::Pty;
  c.console = ConsoleConfig{};
  c.console->mode = ConsoleMode::Off;
  return c;
}

// Source and target pods, a running VM in the source, the target receiving, the proxy between.
struct Setup {
  PodVmm src{"mig-src-pod"};
  PodVmm dst{"mig-dst-pod"};
  std::unique_ptr<chl::test::MigrationProxy> proxy;
  chl::common::Status received = chl::common::Status();
  std::thread receiver;
  bool ready = false;

  // `before_boot` runs between vm.create and vm.boot on the source (a cold-added NIC).
  explicit Setup(const std::function<void(Client&)>& before_boot = {}) {
    auto kernel = kernel_for(src.dir());
    if (!kernel) return;
    REQUIRE(src.api().vm_create(guest(*kernel)));
    if (before_boot) before_boot(src.api());
    REQUIRE(src.api().vm_boot());
    ReceiveMigrationData rx;
    rx.receiver_url = "unix:" + dst.migration_socket().string();
    receiver = std::thread([this, rx] { received = dst.api().vm_receive_migration(rx); });
    REQUIRE(chl::test::wait_until(5s, [&] { return fs::exists(dst.migration_socket()); }));
    auto p = chl::test::MigrationProxy::start(src.migration_socket(), dst.migration_socket());
    REQUIRE_MESSAGE(p, (p ? "" : p.error().message()));
    proxy = std::move(*p);
    ready = true;
  }
  ~Setup() {
    if (receiver.joinable()) {
      (void)dst.proc().kill_and_reap();
      receiver.join();
    }
  }
  chl::common::Status send() {
    SendMigrationData tx;
    tx.destination_url = "unix:" + src.migration_socket().string();
    tx.connections = 1;
    return src.api().vm_send_migration(tx);
  }
};

}  // namespace

TEST_CASE("CH migration through the migration-proxy stand-in: the target runs, the source exits") {
  Setup s;
  if (!s.ready) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  auto sent = s.send();
  s.receiver.join();
  if (!sent && chl::test::real_vmm_cannot_save_vcpu_state() &&
      sent.error().message().find("GetNestedState") != std::string::npos) {
    // The machine's limit, proven by the probe and by this very call: CH resumes the VM in the
    // source after the failed send, and its API answers again.
    auto info = s.src.api().vm_info();
    REQUIRE(info);
    CHECK(info->state == VmState::Running);
    chl::test::skip_part("the migration's completion: " + *chl::test::real_vmm_cannot_save_vcpu_state() +
                         "; this test's vm.send-migration answered the same: " + sent.error().message());
    return;
  }
  REQUIRE_MESSAGE(sent, (sent ? "" : sent.error().message()) << s.src.log());
  REQUIRE_MESSAGE(s.received, (s.received ? "" : s.received.error().message()));
  // All of guest RAM went through the proxy.
  CHECK(s.proxy->forwarded() >= 64ull << 20);
  auto info = s.dst.api().vm_info();
  REQUIRE(info);
  CHECK(info->state == VmState::Running);
  CHECK(info->config.payload.cmdline == "console=ttyS0 migrating-guest");
  auto st = s.src.proc().wait_for(10s);
  REQUIRE(st);
  REQUIRE(*st);
  CHECK((*st)->success());
}

TEST_CASE("CH migration: the target killed mid-stream fails the source, which runs on") {
  Setup s;
  if (!s.ready) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  s.proxy->stall_after(1 << 20);
  chl::common::Status sent;
  std::thread sender([&] { sent = s.send(); });
  REQUIRE(chl::test::wait_until(10s, [&] { return s.proxy->forwarded() >= (1u << 20); }));
  // The target pod dies (its VMM with it) while memory is in flight.
  (void)s.dst.proc().kill_and_reap();
  s.receiver.join();
  s.proxy->release();
  sender.join();
  REQUIRE_FALSE(sent);
  CHECK_MESSAGE(sent.error().message().find("Error starting migration sender") != std::string::npos,
                sent.error().message());
  // CH resumes the VM after a failed send; its API answers again.
  auto info = s.src.api().vm_info();
  REQUIRE(info);
  CHECK(info->state == VmState::Running);
  // CH writes its events from a thread of their own, fed by a channel (event_monitor/src/lib.rs
  // event_log, vmm/src/lib.rs start_event_monitor_thread): the event may follow the API's answer.
  CHECK(chl::test::wait_until(10s, [&] { return s.src.events().find("migration-failed") != std::string::npos; }));
  CHECK(s.src.events().find("migration-finished") == std::string::npos);
}

// CH v52 gives the receiver no fds: NetConfig.fds deserialize to -1 (vm_config.rs
// deserialize_netconfig_fds) and Net::from_tap_fds fails on dup(-1). A NIC handed over as fds
// cannot migrate; the launcher gives CH its taps by name for that (docs/kubevirt/migration.md).
TEST_CASE(
    "CH migration: a NIC handed over as tap fds fails the target (fds arrive as -1), the source "
    "runs on") {
  if (::geteuid() != 0) {
    chl::test::skip("needs root to make a tap");
    return;
  }
  // A tap that lives as long as this fd (not persistent): the source VMM gets it with SCM_RIGHTS.
  UniqueFd tap(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
  if (!tap) {
    chl::test::skip(std::string("no /dev/net/tun: ") + std::strerror(errno));
    return;
  }
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "chlmf%d", static_cast<int>(::getpid() % 100000));
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  REQUIRE_MESSAGE(::ioctl(tap.get(), TUNSETIFF, &ifr) == 0, std::strerror(errno));
  Setup s([&](Client& api) {
    NetConfig n;
    n.id = "net-fd";
    n.mac = "02:00:00:aa:bb:cd";
    const int fd = tap.get();
    auto added = api.vm_add_net(n, std::span<const int>(&fd, 1));
    REQUIRE_MESSAGE(added, (added ? "" : added.error().message()));
  });
  if (!s.ready) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  auto sent = s.send();
  s.receiver.join();
  REQUIRE_FALSE(sent);
  if (chl::test::real_vmm_cannot_save_vcpu_state() &&
      sent.error().message().find("GetNestedState") != std::string::npos) {
    // The source fails taking its vCPUs' state, before it sends the State the target would make
    // the NIC from: the source runs on; the target's own failure cannot be reached here.
    auto info = s.src.api().vm_info();
    REQUIRE(info);
    CHECK(info->state == VmState::Running);
    chl::test::skip_part("the target failing on the NIC's fds (it comes after the vCPU state): " +
                         *chl::test::real_vmm_cannot_save_vcpu_state());
    return;
  }
  // The receive "succeeds" (CH v52 answers 204 after an aborted receive) with no VM made.
  CHECK_FALSE(s.dst.api().vm_info());
  if (!chl::test::using_real_vmm())
    CHECK_MESSAGE(s.dst.log().find("Error calling dup() on tap fd") != std::string::npos,
                  s.dst.log());
  auto info = s.src.api().vm_info();
  REQUIRE(info);
  CHECK(info->state == VmState::Running);
}

// vmm_api::Client against a VMM process: the project's double by default, a real
// cloud-hypervisor when CLOUD_HYPERVISOR_BIN is set (then tests that boot need a guest kernel
// in CHL_TEST_GUEST_KERNEL, or they skip saying so). Expectations are Cloud Hypervisor v52's
// observed answers (/work/shared/reference/cloud-hypervisor-v52-observed.md).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "common/child_process.hpp"
#include "common/unique_fd.hpp"
#include "common/unix_socket.hpp"
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

enum class ApiSocket { path, fd };

// A VMM process with its API socket, a client on it, and its log for diagnostics.
class Vmm {
 public:
  explicit Vmm(ApiSocket mode, const std::string& tag = "chl-vmm") : dir_(tag) {
    api_path_ = (dir_ / "api.sock").string();
    SpawnOptions opts;
    opts.argv = {chl::test::vmm_binary(), "--api-socket"};
    opts.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"};
    log_fd_.reset(::open((dir_ / "vmm.log").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    opts.stdout_fd = log_fd_.get();
    opts.stderr_fd = log_fd_.get();
    UniqueFd listener;
    if (mode == ApiSocket::fd) {
      // The launcher's way: bind and listen ourselves, hand the fd over, connect by path.
      auto bound = chl::common::listen_unix(api_path_);
      REQUIRE_MESSAGE(bound, (bound ? "" : bound.error().message()));
      listener = std::move(*bound);
      opts.pass_fds = {{listener.get(), 3}};
      opts.argv.push_back("fd=3");
    } else {
      opts.argv.push_back("path=" + api_path_);
    }
    auto child = ChildProcess::spawn(opts);
    REQUIRE_MESSAGE(child, (child ? "" : child.error().message()));
    proc_ = std::move(*child);
    ClientOptions co;
    co.timeout = 5s;
    co.long_timeout = 30s;
    co.migration_timeout = 30s;
    client_ = std::make_unique<Client>(api_path_, co);
    if (mode == ApiSocket::path) {
      // CH creates the socket itself: wait until it answers.
      const bool up = chl::test::wait_until(
          10s, [&] { return fs::exists(api_path_) && client_->vmm_ping().has_value(); });
      REQUIRE_MESSAGE(up, "VMM did not come up; log:\n" << log());
    }
  }

  Client& api() { return *client_; }
  ChildProcess& proc() { return proc_; }
  const std::string& api_path() const { return api_path_; }
  const TempDir& dir() const { return dir_; }
  std::string log() const { return chl::test::read_file(dir_ / "vmm.log"); }

 private:
  TempDir dir_;
  std::string api_path_;
  UniqueFd log_fd_;
  ChildProcess proc_;
  std::unique_ptr<Client> client_;
};

// The guest kernel: the double takes any readable file; a real VMM needs
// CHL_TEST_GUEST_KERNEL. nullopt (after printing why) when a booting test cannot run.
std::optional<std::string> guest_kernel(const TempDir& dir) {
  if (chl::test::using_real_vmm()) {
    const char* k = std::getenv("CHL_TEST_GUEST_KERNEL");
    if (!k || !*k) {
      chl::test::skip("real VMM (" + chl::test::vmm_binary() +
                      ") and no guest kernel: set CHL_TEST_GUEST_KERNEL to boot");
      return std::nullopt;
    }
    return std::string(k);
  }
  // The project's PVH guest when built: the double reads its ELF note (how it reaches CH's
  // power button); else any readable file (a guest that never sees the power button).
  if (std::filesystem::exists(chl::test::project_pvh_guest()))
    return chl::test::project_pvh_guest().string();
  const auto k = dir / "guest.elf";
  chl::test::write_file(k, "not really a kernel: the double only reads it");
  return k.string();
}

VmConfig boot_config(const std::string& kernel) {
  VmConfig c;
  c.payload.kernel = kernel;
  c.payload.cmdline = "chl-test ignore-acpi";  // the double's guest ignores the power button
  c.cpus = CpusConfig{};
  c.cpus->boot_vcpus = 1;
  c.cpus->max_vcpus = 2;
  c.memory = MemoryConfig{};
  c.memory->size = 64ull << 20;
  c.serial = SerialConfig{};
  c.serial->mode = ConsoleMode::Pty;
  c.console = ConsoleConfig{};
  c.console->mode = ConsoleMode::Off;
  return c;
}

std::string make_disk(const TempDir& dir, const std::string& name) {
  const auto p = dir / name;
  UniqueFd fd(::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  REQUIRE(fd);
  REQUIRE(::ftruncate(fd.get(), 1 << 20) == 0);
  return p.string();
}

// A tap device living as long as the fd (needs /dev/net/tun and CAP_NET_ADMIN).
std::optional<UniqueFd> make_tap(std::string& name_out) {
  UniqueFd fd(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
  if (!fd) {
    return std::nullopt;
  }
  ifreq ifr{};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  const std::string name = "chlt" + std::to_string(::getpid() % 100000);
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (::ioctl(fd.get(), TUNSETIFF, &ifr) != 0) {
    return std::nullopt;
  }
  name_out = ifr.ifr_name;
  return fd;
}

// The status and the last (root-cause) message of a failed call.
#define CHECK_CH_ERROR(result, status, last_message)                             \
  do {                                                                           \
    REQUIRE_FALSE(result);                                                       \
    INFO("error: " << (result).error().message());                               \
    CHECK(http_status((result).error()) == (status));                            \
    const auto msgs_ = ch_messages((result).error());                            \
    REQUIRE_FALSE(msgs_.empty());                                                \
    CHECK(msgs_.front() == "Error from API");                                    \
    CHECK(ch_message((result).error()).find(last_message) != std::string::npos); \
  } while (0)

}  // namespace

TEST_CASE("VMM without a VM: state-machine violations surface CH's status and messages") {
  Vmm vmm(ApiSocket::fd);
  INFO("vmm log:\n" << vmm.log());
  auto& api = vmm.api();

  auto ping = api.vmm_ping();
  REQUIRE_MESSAGE(ping, (ping ? "" : ping.error().message()));
  CHECK_FALSE(ping->version.empty());
  CHECK(ping->pid == vmm.proc().pid());

  auto info = api.vm_info();
  CHECK_CH_ERROR(info, 500, "VM is not created");
  CHECK(ch_messages(info.error()) == std::vector<std::string>{"Error from API",
                                                              "The VM info is not available",
                                                              "VM is not created"});
  auto boot = api.vm_boot();
  CHECK_CH_ERROR(boot, 500, "VM config is missing");
  CHECK(boot.error().message() ==
        "PUT vm.boot: HTTP 500: Error from API: The VM could not boot: VM config is missing");
  auto pause = api.vm_pause();
  CHECK_CH_ERROR(pause, 500, "VM is not running");
  auto resume = api.vm_resume();
  CHECK_CH_ERROR(resume, 500, "VM is not running");
  auto counters = api.vm_counters();
  CHECK_CH_ERROR(counters, 500, "VM is not running");

  // An empty payload is accepted by vm.create; the refusal comes at boot.
  VmConfig empty;
  REQUIRE(api.vm_create(empty));
  auto again = api.vm_create(empty);
  CHECK_CH_ERROR(again, 500, "VM is already created");
  auto unbootable = api.vm_boot();
  CHECK_CH_ERROR(unbootable, 500, "No bootitem provided: neither firmware nor kernel");
  REQUIRE(api.vm_delete());

  // A body CH cannot deserialize: 400 with serde's message (raw call: the typed API cannot
  // produce such a body).
  auto bad = api.request("PUT", "vm.create", std::string_view(R"("notjson")"), 5s);
  REQUIRE(bad);
  CHECK(bad->status == 400);
  const auto msgs = parse_ch_error_body(bad->body);
  REQUIRE_FALSE(msgs.empty());
  CHECK(msgs.front() == "Failed to deserialize JSON");

  // Restoring from a missing snapshot: CH's refusal.
  RestoreConfig rc;
  rc.source_url = "file://" + (vmm.dir() / "no-such-snapshot").string();
  auto restore = api.vm_restore(rc);
  CHECK_CH_ERROR(restore, 500, "");
  CHECK(ch_messages(restore.error()).at(1) == "The VM could not be restored");

  // The VMM is still fine after all those refusals.
  CHECK(api.vmm_ping());

  // Migrating from/to nowhere with no VM: the double refuses both with 500. Real CH v52 dies
  // here instead: vm_send_migration unwraps the missing VM config (vmm/src/lib.rs:2579,
  // "thread 'vmm' panicked"; the process then exits with "Failed to join on VMM thread"), so
  // the call after it finds no VMM. Against a real CH a VMM that died on one of these two calls
  // is accepted (docs/vmm-double.md); the launcher never makes either call.
  const auto died = [&](const std::string& call) {
    if (!chl::test::using_real_vmm() || api.vmm_ping()) return false;
    auto st = vmm.proc().wait_for(10s);
    CHECK_MESSAGE((st && *st), "the VMM stopped answering after " << call << " but did not exit");
    MESSAGE("real VMM died on " << call << " with no VM (known Cloud Hypervisor v52 panic)");
    return true;
  };
  SendMigrationData tx;
  tx.destination_url = "unix:" + (vmm.dir() / "nowhere.sock").string();
  auto send = api.vm_send_migration(tx);
  REQUIRE_FALSE(send);
  if (died("vm.send-migration")) return;
  CHECK(http_status(send.error()) == 500);
  ReceiveMigrationData rx;
  rx.receiver_url = "unix:" + (vmm.dir() / "no-such-dir" / "mig.sock").string();
  auto receive = api.vm_receive_migration(rx);
  REQUIRE_FALSE(receive);
  if (died("vm.receive-migration")) return;
  CHECK(http_status(receive.error()) == 500);
  CHECK(api.vmm_ping());
}

TEST_CASE("cold adds to a created VM answer 204 and show up in vm.info") {
  Vmm vmm(ApiSocket::fd);
  INFO("vmm log:\n" << vmm.log());
  auto& api = vmm.api();
  DiskConfig disk;
  disk.path = make_disk(vmm.dir(), "cold.raw");
  disk.id = "colddisk";

  // CH validates the whole config with the device added before any add (VmConfig::validate):
  // a VM created without a payload refuses even a cold add (observed on real CH v52).
  REQUIRE(api.vm_create(VmConfig{}));
  auto unbootable = api.vm_add_disk(disk);
  CHECK_CH_ERROR(unbootable, 500, "No bootitem provided: neither firmware nor kernel");
  const auto chain = ch_messages(unbootable.error());  // split at ": ", as the error text is
  REQUIRE(chain.size() >= 4);
  CHECK(chain[1] == "The disk could not be added to the VM");
  CHECK(chain[2] == "Failed to validate config");
  CHECK(chain[3] == "Payload configuration is not bootable");
  REQUIRE(api.vm_delete());

  // With a kernel in the payload (never booted here: the file need not be a real kernel).
  const auto kernel = vmm.dir() / "kernel-never-booted";
  chl::test::write_file(kernel, "not booted");
  REQUIRE(api.vm_create(boot_config(kernel.string())));
  auto d = api.vm_add_disk(disk);
  REQUIRE_MESSAGE(d, (d ? "" : d.error().message()));
  CHECK_FALSE(d->has_value());

  FsConfig share;
  share.tag = "share";
  share.socket = (vmm.dir() / "virtiofsd.sock").string();
  share.id = "coldfs";
  // virtio-fs is vhost-user: CH's validation wants shared guest memory first.
  auto unshared = api.vm_add_fs(share);
  CHECK_CH_ERROR(unshared, 500, "Using vhost-user requires using shared memory or huge pages");
  REQUIRE(api.vm_delete());
  auto shared_cfg = boot_config(kernel.string());
  shared_cfg.memory->shared = true;
  REQUIRE(api.vm_create(shared_cfg));
  REQUIRE(api.vm_add_disk(disk));
  auto f = api.vm_add_fs(share);
  REQUIRE_MESSAGE(f, (f ? "" : f.error().message()));
  CHECK_FALSE(f->has_value());

  auto info = api.vm_info();
  REQUIRE_MESSAGE(info, (info ? "" : info.error().message()));
  CHECK(info->state == VmState::Created);
  REQUIRE(info->config.disks);
  REQUIRE(info->config.disks->size() == 1);
  CHECK((*info->config.disks)[0].id == "colddisk");
  CHECK((*info->config.disks)[0].path == disk.path);
  REQUIRE(info->config.fs);
  CHECK((*info->config.fs)[0].tag == "share");

  // A duplicate id is refused with CH's validation message.
  auto dup = api.vm_add_disk(disk);
  CHECK_CH_ERROR(dup, 500, "colddisk is not unique");
  REQUIRE(api.vm_delete());
}

// A 64Mi memory zone bound to `node` (no hugepages), in guest NUMA node 0 with vCPU 0.
VmConfig zoned_config(const std::string& kernel, std::uint32_t node) {
  VmConfig c = boot_config(kernel);
  c.memory->size = 0;
  MemoryZoneConfig z;
  z.id = "mem0";
  z.size = 64ull << 20;
  z.host_numa_node = static_cast<std::int32_t>(node);
  c.memory->zones = std::vector<MemoryZoneConfig>{z};
  NumaConfig n;
  n.guest_numa_id = 0;
  n.cpus = std::vector<std::uint32_t>{0, 1};
  n.memory_zones = std::vector<std::string>{"mem0"};
  c.numa = std::vector<NumaConfig>{n};
  return c;
}

TEST_CASE("memory zones and NUMA nodes: CH's own errors, and a zone bound to host node 0 boots") {
  Vmm vmm(ApiSocket::fd);
  INFO("vmm log:\n" << vmm.log());
  auto& api = vmm.api();
  auto kernel = guest_kernel(vmm.dir());
  if (!kernel) return;
  // A host node that does not exist: mbind(MPOL_BIND) is EINVAL (memory_manager.rs
  // create_ram_region_raw -> ApplyNumaPolicy), at boot.
  REQUIRE(api.vm_create(zoned_config(*kernel, 63)));
  auto bad_node = api.vm_boot();
  CHECK_CH_ERROR(bad_node, 500, "Invalid argument (os error 22)");
  if (!bad_node) {
    const auto chain = ch_messages(bad_node.error());
    CHECK(std::find(chain.begin(), chain.end(), "Failed applying NUMA memory policy") != chain.end());
  }
  REQUIRE(api.vm_delete());
  // Zones beside a memory size: InvalidMemoryParameters, at boot.
  auto sized = zoned_config(*kernel, 0);
  sized.memory->size = 64ull << 20;
  REQUIRE(api.vm_create(sized));
  CHECK_CH_ERROR(api.vm_boot(), 500, "Memory configuration is not valid");
  REQUIRE(api.vm_delete());
  // One zone in two guest nodes: VmConfig::validate's MemoryZoneReused, at boot (vm.create
  // validates nothing: a VM without a payload is created too, above).
  auto twice = zoned_config(*kernel, 0);
  NumaConfig n1;
  n1.guest_numa_id = 1;
  n1.memory_zones = std::vector<std::string>{"mem0"};
  twice.numa->push_back(n1);
  REQUIRE(api.vm_create(twice));
  CHECK_CH_ERROR(api.vm_boot(), 500, "Memory zone: mem0 belongs to multiple NUMA nodes: 0 and 1");
  REQUIRE(api.vm_delete());
  // A distance to a guest node that does not exist: InvalidNumaConfig, at boot (vm.rs
  // create_numa_nodes).
  auto far = zoned_config(*kernel, 0);
  NumaDistance d;
  d.destination = 7;
  d.distance = 20;
  (*far.numa)[0].distances = std::vector<NumaDistance>{d};
  REQUIRE(api.vm_create(far));
  CHECK_CH_ERROR(api.vm_boot(), 500, "Invalid NUMA configuration");
  REQUIRE(api.vm_delete());
  // Node 0 holds this machine's memory: the VM boots, vm.info keeps the zone and the node.
  REQUIRE(api.vm_create(zoned_config(*kernel, 0)));
  auto boot = api.vm_boot();
  REQUIRE_MESSAGE(boot, (boot ? "" : boot.error().message()));
  auto info = api.vm_info();
  REQUIRE(info);
  REQUIRE(info->config.memory);
  REQUIRE(info->config.memory->zones);
  CHECK((*info->config.memory->zones)[0].host_numa_node == 0);
  REQUIRE(info->config.numa);
  CHECK((*info->config.numa)[0].memory_zones == std::vector<std::string>{"mem0"});
  CHECK(api.vm_delete());
}

TEST_CASE("every VM endpoint, API socket bound by the test and passed as fd=N") {
  Vmm vmm(ApiSocket::fd);
  INFO("vmm log:\n" << vmm.log());
  auto kernel = guest_kernel(vmm.dir());
  if (!kernel) {
    return;
  }
  auto& api = vmm.api();

  const auto cfg = boot_config(*kernel);
  REQUIRE(api.vm_create(cfg));
  auto created = api.vm_info();
  REQUIRE_MESSAGE(created, (created ? "" : created.error().message()));
  CHECK(created->state == VmState::Created);
  CHECK(created->config.payload.kernel == *kernel);
  CHECK(created->config.cpus->max_vcpus == 2);
  REQUIRE(created->config.serial);
  CHECK(created->config.serial->mode == ConsoleMode::Pty);
  REQUIRE(created->config.serial->file);  // the PTY exists from vm.create on
  CHECK(created->config.serial->file->rfind("/dev/pts/", 0) == 0);
  auto early_pause = api.vm_pause();
  CHECK_CH_ERROR(early_pause, 500, "VM is not running");

  REQUIRE(api.vm_boot());
  auto running = api.vm_info();
  REQUIRE(running);
  CHECK(running->state == VmState::Running);
  CHECK(running->memory_actual_size == 64ull << 20);
  auto reboot_boot = api.vm_boot();
  CHECK_CH_ERROR(reboot_boot, 500, "invalid VM state transition: Running to Running");
  auto resume_running = api.vm_resume();
  CHECK_CH_ERROR(resume_running, 500, "");

  // Hot-plug: a disk (200 + PciDeviceInfo), one that cannot be opened, removal.
  DiskConfig disk;
  disk.path = make_disk(vmm.dir(), "hot.raw");
  auto added = api.vm_add_disk(disk);
  REQUIRE_MESSAGE(added, (added ? "" : added.error().message()));
  REQUIRE(added->has_value());
  const std::string disk_id = (*added)->id;
  CHECK_FALSE(disk_id.empty());
  CHECK((*added)->bdf.rfind("0000:00:", 0) == 0);
  DiskConfig missing;
  missing.path = (vmm.dir() / "nope.img").string();
  auto not_added = api.vm_add_disk(missing);
  CHECK_CH_ERROR(not_added, 500, "No such file or directory");

  auto counters = api.vm_counters();
  REQUIRE_MESSAGE(counters, (counters ? "" : counters.error().message()));
  CHECK(counters->count(disk_id) == 1);

  // vm.remove-device only asks the guest to eject the device (vmm/src/vm.rs Vm::remove_device):
  // CH drops it from the config at once but keeps its device-tree node until the guest ejects it
  // (DeviceManager::eject_device). The project's PVH guest ejects (tests/guests/pvh_guest.S):
  // the node goes, removing it again is refused and the id is free. A guest that never ejects
  // (the double's stand-in kernel) leaves the id known: removing it again succeeds again (real
  // CH v52 answered 204 twice) and reusing it is refused. Another guest (CHL_TEST_GUEST_KERNEL)
  // may do either.
  REQUIRE(api.vm_remove_device(VmRemoveDevice{disk_id, Json::object()}));
  auto removed = api.vm_info();
  REQUIRE(removed);
  CHECK_FALSE((removed->config.disks && !removed->config.disks->empty()));
  const auto in_tree = [&api, &disk_id] {
    auto i = api.vm_info();
    return !i || (i->device_tree && i->device_tree->contains(disk_id));
  };
  if (chl::test::is_project_pvh_guest(*kernel)) {
    CHECK(chl::test::wait_until(30s, [&] { return !in_tree(); }));
    auto again = api.vm_remove_device(VmRemoveDevice{disk_id, Json::object()});
    CHECK_CH_ERROR(again, 500, "Failed to find device corresponding to the given identifier");
    DiskConfig reuse;
    reuse.path = make_disk(vmm.dir(), "reuse.raw");
    reuse.id = disk_id;
    auto reused = api.vm_add_disk(reuse);
    CHECK_MESSAGE(reused, (reused ? "" : reused.error().message()));
  } else if (chl::test::using_real_vmm()) {
    auto again = api.vm_remove_device(VmRemoveDevice{disk_id, Json::object()});
    if (!again) CHECK_CH_ERROR(again, 500, "Failed to find device corresponding to the given identifier");
  } else {
    CHECK(in_tree());
    auto again = api.vm_remove_device(VmRemoveDevice{disk_id, Json::object()});
    CHECK_MESSAGE(again, (again ? "" : again.error().message()));
    DiskConfig reuse;
    reuse.path = make_disk(vmm.dir(), "reuse.raw");
    reuse.id = disk_id;
    auto reused = api.vm_add_disk(reuse);
    CHECK_CH_ERROR(reused, 500, "Invalid identifier as it is not unique: " + disk_id);
  }
  // An id the VM never had: CH's refusal.
  auto unknown = api.vm_remove_device(VmRemoveDevice{"no-such-device", Json::object()});
  CHECK_CH_ERROR(unknown, 500, "Failed to find device corresponding to the given identifier");

  // vm.add-net with a real tap passed by SCM_RIGHTS.
  std::string tap_name;
  if (auto tap = make_tap(tap_name)) {
    NetConfig net;
    net.id = "net9";
    net.mac = "52:54:00:12:34:56";
    const int fds[] = {tap->get()};
    auto n = api.vm_add_net(net, fds);
    REQUIRE_MESSAGE(n, (n ? "" : n.error().message()));
    REQUIRE(n->has_value());
    CHECK((*n)->id == "net9");
    auto with_net = api.vm_info();
    REQUIRE(with_net);
    REQUIRE(with_net->config.net);
    CHECK((*with_net->config.net)[0].mac == "52:54:00:12:34:56");
    REQUIRE(api.vm_remove_device(VmRemoveDevice{"net9", Json::object()}));
  } else {
    chl::test::skip_part("vm.add-net: cannot create a tap (/dev/net/tun, CAP_NET_ADMIN)");
  }
  // Not a tap: CH refuses the fd.
  {
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    UniqueFd r(p[0]), w(p[1]);
    const int fds[] = {r.get()};
    auto n = api.vm_add_net(NetConfig{}, fds);
    REQUIRE_FALSE(n);
    CHECK(http_status(n.error()) == 500);
  }

  // virtio-fs and VFIO hot-adds need real backends; check CH's refusal without them.
  // (Real CH retries connecting to a missing vhost-user backend for a long time: double only.)
  if (!chl::test::using_real_vmm()) {
    FsConfig share;
    share.tag = "share";
    share.socket = (vmm.dir() / "no-virtiofsd.sock").string();
    auto no_fs = api.vm_add_fs(share);
    REQUIRE_FALSE(no_fs);
    CHECK(http_status(no_fs.error()) == 500);
  }
  DeviceConfig vfio;
  vfio.path = "/sys/bus/pci/devices/0000:ff:1f.7";
  auto no_dev = api.vm_add_device(vfio);
  REQUIRE_FALSE(no_dev);
  CHECK(http_status(no_dev.error()) == 500);

  // vsock hot-add (CH binds the socket), pmem from a file, NMI.
  VsockConfig vsock;
  vsock.cid = 33;
  vsock.socket = (vmm.dir() / "vsock.sock").string();
  vsock.id = "vsock0";
  auto v = api.vm_add_vsock(vsock);
  REQUIRE_MESSAGE(v, (v ? "" : v.error().message()));
  REQUIRE(v->has_value());
  CHECK((*v)->id == "vsock0");
  auto second_vsock = api.vm_add_vsock(vsock);
  REQUIRE_FALSE(second_vsock);
  CHECK(http_status(second_vsock.error()) == 500);
  // pmem: CH maps the file at a 2 MiB-aligned guest address and refuses a size that is not a
  // multiple of 2 MiB (vmm/src/device_manager.rs make_virtio_pmem_device, PmemSizeNotAligned);
  // the test's 1 MiB disk image is refused, a 2 MiB file is taken.
  PmemConfig pmem;
  pmem.file = make_disk(vmm.dir(), "pmem-1m.img");
  pmem.id = "pmem0";
  auto odd_pmem = api.vm_add_pmem(pmem);
  CHECK_CH_ERROR(odd_pmem, 500, "Trying to use a size that is not multiple of 2MiB");
  pmem.file = (vmm.dir() / "pmem.img").string();
  {
    UniqueFd f(::open(pmem.file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    REQUIRE(f);
    REQUIRE(::ftruncate(f.get(), 2 << 20) == 0);
  }
  auto pm = api.vm_add_pmem(pmem);
  REQUIRE_MESSAGE(pm, (pm ? "" : pm.error().message()));
  REQUIRE(pm->has_value());
  CHECK((*pm)->id == "pmem0");
  REQUIRE(api.vm_nmi());

  VmResize resize;
  resize.desired_vcpus = 2;
  REQUIRE(api.vm_resize(resize));
  VmResize too_many;
  too_many.desired_vcpus = 8;
  auto refused = api.vm_resize(too_many);
  REQUIRE_FALSE(refused);
  CHECK(http_status(refused.error()) == 500);
  // Memory: CH's ACPI hotplug adds whole 128 MiB regions, and only within hotplug_size (none
  // here): both refused with CH's own messages.
  const std::uint64_t boot_ram = api.vm_info()->config.memory->size;
  VmResize odd;
  odd.desired_ram = boot_ram + (64ULL << 20);
  auto odd_refused = api.vm_resize(odd);
  CHECK_CH_ERROR(odd_refused, 500, "The requested hotplug memory addition is not a valid size");
  VmResize no_room;
  no_room.desired_ram = boot_ram + (128ULL << 20);
  auto no_room_refused = api.vm_resize(no_room);
  CHECK_CH_ERROR(no_room_refused, 500, "Not enough space in the hotplug RAM region");

  REQUIRE(api.vm_pause());
  auto paused = api.vm_info();
  REQUIRE(paused);
  CHECK(paused->state == VmState::Paused);
  auto pause_again = api.vm_pause();
  CHECK_CH_ERROR(pause_again, 500, "InvalidStateTransition(Paused, Paused)");

  // Snapshot while paused. Real CH on nested KVM fails here (GetNestedState): accept a CH
  // refusal from a real VMM, require the files from the double.
  const auto snap = vmm.dir() / "snap";
  fs::create_directories(snap);
  auto snapshot = api.vm_snapshot(VmSnapshotConfig{"file://" + snap.string(), Json::object()});
  if (chl::test::real_vmm_cannot_save_vcpu_state() && !snapshot) {
    CHECK(http_status(snapshot.error()) == 500);
    CHECK_MESSAGE(snapshot.error().message().find("GetNestedState") != std::string::npos,
                  snapshot.error().message());
    chl::test::skip_part("the snapshot's files: " + *chl::test::real_vmm_cannot_save_vcpu_state());
  } else {
    REQUIRE_MESSAGE(snapshot, (snapshot ? "" : snapshot.error().message()));
    CHECK(fs::exists(snap / "config.json"));
  }

  REQUIRE(api.vm_resume());
  auto resumed = api.vm_info();
  REQUIRE(resumed);
  CHECK(resumed->state == VmState::Running);
  auto snap_running = api.vm_snapshot(VmSnapshotConfig{"file://" + snap.string(), Json::object()});
  CHECK_CH_ERROR(snap_running, 500, "Trying to snapshot while VM is running");

  SendMigrationData tx;
  tx.destination_url = "unix:" + (vmm.dir() / "nobody.sock").string();
  auto send = api.vm_send_migration(tx);
  REQUIRE_FALSE(send);
  CHECK(http_status(send.error()) == 500);

  REQUIRE(api.vm_power_button());  // the guest ignores it (ignore-acpi)
  REQUIRE(api.vm_reboot());
  auto rebooted = api.vm_info();
  REQUIRE(rebooted);
  CHECK(rebooted->state == VmState::Running);

  REQUIRE(api.vm_shutdown());
  auto after_shutdown = api.vm_info();
  REQUIRE(after_shutdown);  // still defined; CH reports it Created again (its Vm is dropped)
  CHECK(after_shutdown->state != VmState::Running);
  REQUIRE(api.vm_boot());  // booting again works
  REQUIRE(api.vm_shutdown());
  REQUIRE(api.vm_delete());
  auto deleted = api.vm_info();
  CHECK_CH_ERROR(deleted, 500, "VM is not created");

  REQUIRE(api.vmm_shutdown());
  auto status = vmm.proc().wait_for(10s);
  REQUIRE(status);
  REQUIRE(status->has_value());
  CHECK((*status)->success());
}

TEST_CASE("API socket created by the VMM (path=): lifecycle, vmm.shutdown removes it") {
  Vmm vmm(ApiSocket::path);
  INFO("vmm log:\n" << vmm.log());
  auto kernel = guest_kernel(vmm.dir());
  if (!kernel) {
    return;
  }
  auto& api = vmm.api();
  REQUIRE(api.vm_create(boot_config(*kernel)));
  REQUIRE(api.vm_boot());
  auto info = api.vm_info();
  REQUIRE(info);
  CHECK(info->state == VmState::Running);
  // What we sent comes back (CH fills in its defaults around it).
  CHECK(info->config.memory->size == 64ull << 20);
  CHECK(info->config.payload.cmdline == "chl-test ignore-acpi");
  REQUIRE(api.vmm_shutdown());
  auto status = vmm.proc().wait_for(10s);
  REQUIRE(status);
  REQUIRE(status->has_value());
  CHECK((*status)->success());
  CHECK_FALSE(fs::exists(vmm.api_path()));
  // And now the socket is gone: the next call says so.
  auto after = api.vmm_ping();
  REQUIRE_FALSE(after);
  CHECK(is(after.error(), ApiErrc::socket_missing));
}

TEST_CASE("snapshot then restore into a fresh VMM: the VM comes back paused") {
  TempDir keep("chl-snap");
  const auto snap = keep / "snap";
  fs::create_directories(snap);
  auto kernel = guest_kernel(keep);  // outlives the source VMM: restore reopens it
  if (!kernel) return;
  {
    Vmm source(ApiSocket::fd);
    INFO("vmm log:\n" << source.log());
    REQUIRE(source.api().vm_create(boot_config(*kernel)));
    REQUIRE(source.api().vm_boot());
    REQUIRE(source.api().vm_pause());
    auto taken =
        source.api().vm_snapshot(VmSnapshotConfig{"file://" + snap.string(), Json::object()});
    if (!taken && chl::test::real_vmm_cannot_save_vcpu_state() &&
        taken.error().message().find("GetNestedState") != std::string::npos) {
      chl::test::skip_part("the snapshot and its restore: " +
                           *chl::test::real_vmm_cannot_save_vcpu_state());
      return;
    }
    REQUIRE_MESSAGE(taken, (taken ? "" : taken.error().message()));
  }
  Vmm target(ApiSocket::fd);
  INFO("vmm log:\n" << target.log());
  RestoreConfig rc;
  rc.source_url = "file://" + snap.string();
  auto restored = target.api().vm_restore(rc);
  REQUIRE_MESSAGE(restored, (restored ? "" : restored.error().message()));
  auto info = target.api().vm_info();
  REQUIRE(info);
  CHECK(info->state == VmState::Paused);
  CHECK(info->config.payload.cmdline == "chl-test ignore-acpi");
  REQUIRE(target.api().vm_resume());
  CHECK(target.api().vm_info()->state == VmState::Running);
}

TEST_CASE("power button: the guest powers off and the VMM exits 0, removing its socket") {
  Vmm vmm(ApiSocket::path);
  INFO("vmm log:\n" << vmm.log());
  auto kernel = guest_kernel(vmm.dir());
  if (!kernel) {
    return;
  }
  if (!chl::test::needs_cooperative_guest(*kernel)) return;
  auto cfg = boot_config(*kernel);
  cfg.payload.cmdline = "chl-test";  // honour ACPI
  REQUIRE(vmm.api().vm_create(cfg));
  REQUIRE(vmm.api().vm_boot());
  REQUIRE(vmm.api().vm_power_button());
  auto status = vmm.proc().wait_for(10s);
  REQUIRE(status);
  REQUIRE(status->has_value());
  CHECK((*status)->success());
  CHECK_FALSE(fs::exists(vmm.api_path()));
  auto after = vmm.api().vm_info();
  REQUIRE_FALSE(after);
  CHECK(is(after.error(), ApiErrc::socket_missing));
}

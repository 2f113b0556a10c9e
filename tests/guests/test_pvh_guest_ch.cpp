// The minimal PVH guest under Cloud Hypervisor (CLOUD_HYPERVISOR_BIN, else the VMM double), with
// no launcher between: its ACPI PCI hot-unplug. CH's vm.remove-device takes the device out of the
// config and notifies the guest (GED PCI_DEVICES_CHANGED, the slot in the segment's PCID); the
// guest ejects it through B0EJ as an ACPI OS does with CH's AML (vmm/src/pci_segment.rs PCNT,
// _EJ0 -> PCEJ), and only then does CH drop the device-tree node, free the slot and the id, and
// emit vm/device-removed (vmm/src/device_manager.rs eject_device). docs/guests.md.
#include <doctest/doctest.h>
#include <fcntl.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "common/child_process.hpp"
#include "common/unique_fd.hpp"
#include "tests/support/test_support.hpp"
#include "vmm_api/client.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using chl::test::read_file;
using chl::test::wait_until;

namespace {

// The VMM (real or double) started alone with its API socket in `dir`; killed and reaped at the
// end.
struct LoneVmm {
  chl::common::ChildProcess child;
  chl::common::UniqueFd log;
  chl::vmm_api::Client api;
  explicit LoneVmm(const fs::path& dir) : api((dir / "api.sock").string()) {
    chl::common::SpawnOptions o;
    o.argv = {chl::test::vmm_binary(), "--api-socket", "path=" + (dir / "api.sock").string(),
              "--event-monitor", "path=" + (dir / "events").string()};
    o.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"};
    log.reset(::open((dir / "vmm.log").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    o.stdout_fd = log.get();
    o.stderr_fd = log.get();
    auto c = chl::common::ChildProcess::spawn(o);
    REQUIRE_MESSAGE(c, (c ? "" : c.error().message()));
    child = std::move(*c);
  }
};

std::string slot_of(const std::string& bdf) {
  return std::to_string(std::stoul(bdf.substr(8, 2), nullptr, 16));
}

// The PVH guest booted on the VMM alone with `cmdline`, a root disk, COM1 into <dir>/serial.
struct BootedGuest {
  chl::test::TempDir dir{"chl-eject"};
  LoneVmm vmm{dir.path()};
  std::string serial() const {
    return fs::exists(dir.path() / "serial") ? read_file(dir.path() / "serial") : std::string();
  }
  // False (and the test skipped) when the guest is not built.
  bool boot(const std::string& cmdline) {
    const fs::path guest = chl::test::project_pvh_guest();
    if (!fs::exists(guest)) {
      chl::test::skip("the PVH test guest is not built (target pvh_guest)");
      return false;
    }
    auto& api = vmm.api;
    REQUIRE_MESSAGE(wait_until(20s, [&] { return api.vmm_ping().has_value(); }),
                    read_file(dir.path() / "vmm.log"));
    chl::test::write_file(dir.path() / "root.img", std::string(1 << 20, '\0'));
    chl::test::write_file(dir.path() / "hot.img", std::string(1 << 20, '\0'));
    chl::vmm_api::VmConfig c;
    c.payload.kernel = guest.string();
    c.payload.cmdline = cmdline;
    c.memory = chl::vmm_api::MemoryConfig{};
    c.memory->size = 64ull << 20;
    c.serial = chl::vmm_api::SerialConfig{};
    c.serial->mode = chl::vmm_api::ConsoleMode::File;
    c.serial->file = (dir.path() / "serial").string();
    c.console = chl::vmm_api::ConsoleConfig{};
    c.console->mode = chl::vmm_api::ConsoleMode::Off;
    chl::vmm_api::DiskConfig root;
    root.path = (dir.path() / "root.img").string();
    c.disks = std::vector<chl::vmm_api::DiskConfig>{root};
    REQUIRE(api.vm_create(c));
    REQUIRE(api.vm_boot());
    REQUIRE_MESSAGE(wait_until(60s, [&] { return serial().find("ready") != std::string::npos; }),
                    serial());
    return true;
  }
  bool in_tree(const std::string& id) {
    auto i = vmm.api.vm_info();
    return !i || (i->device_tree && i->device_tree->contains(id));
  }
  // Hot-add <dir>/hot.img as "hot"; its bdf.
  std::string add_hot() {
    chl::vmm_api::DiskConfig hot;
    hot.path = (dir.path() / "hot.img").string();
    hot.id = "hot";
    auto added = vmm.api.vm_add_disk(hot);
    REQUIRE_MESSAGE(added, (added ? "" : added.error().message()));
    REQUIRE(added->has_value());
    return (*added)->bdf;
  }
};

}  // namespace

TEST_CASE(
    "PVH guest under Cloud Hypervisor: a removed disk is ejected (B0EJ) - CH forgets it and says "
    "device-removed") {
  BootedGuest g;
  if (!g.boot("hello")) return;
  auto& api = g.vmm.api;
  const auto& dir = g.dir;
  const auto serial = [&] { return g.serial(); };
  INFO("VMM log:\n" << read_file(dir.path() / "vmm.log"));
  chl::vmm_api::DiskConfig hot;
  hot.path = (dir.path() / "hot.img").string();
  hot.id = "hot";
  auto added = api.vm_add_disk(hot);
  REQUIRE_MESSAGE(added, (added ? "" : added.error().message()));
  REQUIRE(added->has_value());
  const std::string bdf = (*added)->bdf;
  const auto in_tree = [&] {
    auto i = api.vm_info();
    return !i || (i->device_tree && i->device_tree->contains("hot"));
  };
  CHECK(in_tree());

  REQUIRE(api.vm_remove_device(chl::vmm_api::VmRemoveDevice{"hot", nlohmann::json::object()}));
  CHECK_MESSAGE(wait_until(30s, [&] { return !in_tree(); }), serial());
  CHECK_MESSAGE(wait_until(10s,
                           [&] {
                             return serial().find("guest: ACPI PCI hotplug: ejected slot " +
                                                  slot_of(bdf) + "\r\n") != std::string::npos;
                           }),
                serial());
  CHECK_MESSAGE(wait_until(10s,
                           [&] {
                             const std::string ev = read_file(dir.path() / "events");
                             return ev.find("\"device-removed\"") != std::string::npos &&
                                    ev.find("\"" + bdf + "\"") != std::string::npos;
                           }),
                read_file(dir.path() / "events"));
  // CH forgot it: removing it again is refused; the id and the slot are free again.
  auto again = api.vm_remove_device(chl::vmm_api::VmRemoveDevice{"hot", nlohmann::json::object()});
  REQUIRE_FALSE(again);
  CHECK_MESSAGE(
      again.error().message().find("Failed to find device corresponding to the given identifier") !=
          std::string::npos,
      again.error().message());
  auto readded = api.vm_add_disk(hot);
  REQUIRE_MESSAGE(readded, (readded ? "" : readded.error().message()));
  REQUIRE(readded->has_value());
  CHECK((*readded)->bdf == bdf);

  // The guest still answers the power button: CH exits 0.
  REQUIRE(api.vm_power_button());
  auto st = g.vmm.child.wait_for(60s);
  REQUIRE(st);
  REQUIRE_MESSAGE(*st, serial());
  CHECK(((*st)->exited && (*st)->code == 0));
}

// With the word no-eject the guest reads the removal request and leaves the device to CH: the
// node and the id stay, no device-removed, and removing it again answers 204 again (what CH v52
// does for any guest that does not eject).
TEST_CASE(
    "PVH guest under Cloud Hypervisor: with no-eject a removed disk stays in CH's device tree") {
  BootedGuest g;
  if (!g.boot("hello no-eject")) return;
  auto& api = g.vmm.api;
  INFO("VMM log:\n" << read_file(g.dir.path() / "vmm.log"));
  const std::string bdf = g.add_hot();
  REQUIRE(api.vm_remove_device(chl::vmm_api::VmRemoveDevice{"hot", nlohmann::json::object()}));
  CHECK_MESSAGE(
      wait_until(30s,
                 [&] {
                   return g.serial().find("guest: ACPI PCI hotplug: not ejecting (no-eject) slot " +
                                          slot_of(bdf) + "\r\n") != std::string::npos;
                 }),
      g.serial());
  CHECK(g.in_tree("hot"));
  auto info = api.vm_info();
  REQUIRE(info);
  CHECK_FALSE((info->config.disks && info->config.disks->size() > 1));  // out of the config at once
  CHECK(read_file(g.dir.path() / "events").find("device-removed") == std::string::npos);
  auto again = api.vm_remove_device(chl::vmm_api::VmRemoveDevice{"hot", nlohmann::json::object()});
  CHECK_MESSAGE(again, (again ? "" : again.error().message()));
  CHECK(g.in_tree("hot"));
}

// Removed while the VM is paused: no vCPU runs, so nothing is ejected until vm.resume.
TEST_CASE("PVH guest under Cloud Hypervisor: a disk removed while paused is ejected once resumed") {
  BootedGuest g;
  if (!g.boot("hello")) return;
  auto& api = g.vmm.api;
  INFO("VMM log:\n" << read_file(g.dir.path() / "vmm.log"));
  const std::string bdf = g.add_hot();
  REQUIRE(api.vm_pause());
  REQUIRE(api.vm_remove_device(chl::vmm_api::VmRemoveDevice{"hot", nlohmann::json::object()}));
  CHECK(g.in_tree("hot"));
  CHECK(g.serial().find("ejected slot") == std::string::npos);
  REQUIRE(api.vm_resume());
  CHECK_MESSAGE(wait_until(30s, [&] { return !g.in_tree("hot"); }), g.serial());
  CHECK_MESSAGE(wait_until(10s,
                           [&] {
                             return g.serial().find("guest: ACPI PCI hotplug: ejected slot " +
                                                    slot_of(bdf) + "\r\n") != std::string::npos;
                           }),
                g.serial());
}

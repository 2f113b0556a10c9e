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

}  // namespace

TEST_CASE(
    "PVH guest under Cloud Hypervisor: a removed disk is ejected (B0EJ), CH forgets it and says "
    "device-removed") {
  const fs::path guest = chl::test::project_pvh_guest();
  if (!fs::exists(guest)) {
    chl::test::skip("the PVH test guest is not built (target pvh_guest)");
    return;
  }
  chl::test::TempDir dir("chl-eject");
  LoneVmm vmm(dir.path());
  auto& api = vmm.api;
  INFO("VMM log:\n" << read_file(dir.path() / "vmm.log"));
  REQUIRE(wait_until(20s, [&] { return api.vmm_ping().has_value(); }));
  chl::test::write_file(dir.path() / "root.img", std::string(1 << 20, '\0'));
  chl::test::write_file(dir.path() / "hot.img", std::string(1 << 20, '\0'));
  chl::vmm_api::VmConfig c;
  c.payload.kernel = guest.string();
  c.payload.cmdline = "hello";
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
  const auto serial = [&] {
    return fs::exists(dir.path() / "serial") ? read_file(dir.path() / "serial") : std::string();
  };
  REQUIRE_MESSAGE(wait_until(60s, [&] { return serial().find("ready") != std::string::npos; }),
                  serial());
  // It found CH's PCI hotplug registers in the DSDT (and the PCI segments in the MCFG).
  CHECK_MESSAGE(serial().find("guest: ACPI PCI hotplug: Cloud Hypervisor PCST registers at 0x") !=
                    std::string::npos,
                serial());
  CHECK_MESSAGE(serial().find(", PCI segments: 1\r\n") != std::string::npos, serial());

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
  auto st = vmm.child.wait_for(60s);
  REQUIRE(st);
  REQUIRE_MESSAGE(*st, serial());
  CHECK(((*st)->exited && (*st)->code == 0));
}

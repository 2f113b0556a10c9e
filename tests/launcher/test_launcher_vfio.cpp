// Host devices through KubeVirt's device-plugin variables, end to end: `ch-launcher run` with a
// hostDevices entry and PCI_RESOURCE_<resource> in its environment, against the VMM double or a
// real cloud-hypervisor (CLOUD_HYPERVISOR_BIN). Our machines have no VFIO (/dev/vfio): the test
// checks that nothing is claimed passed through — the memory-lock refusal, and Cloud Hypervisor's
// own error chain reaching the launcher's failure.
#include <stdlib.h>
#include <sys/resource.h>

#include <fstream>
#include <regex>

#include "tests/support/launcher_harness.hpp"

using chl::test::LauncherRun;

namespace {

void write_vfio_vmi(LauncherRun& r) {
  r.write_vmi("console=ttyS0");
  std::string text = chl::test::read_file(r.vmi_file());
  text = std::regex_replace(text, std::regex("    devices:\n"),
                            "    devices:\n      hostDevices:\n      - {name: dev1, deviceName: vendor.com/dev}\n");
  chl::test::write_file(r.vmi_file(), text);
}

// The device plugin's variable, for the launcher this test starts (it inherits our environment).
struct DevicePluginEnv {
  DevicePluginEnv() { ::setenv("PCI_RESOURCE_VENDOR_COM_DEV", "0000:00:00.0", 1); }
  ~DevicePluginEnv() { ::unsetenv("PCI_RESOURCE_VENDOR_COM_DEV"); }
};

}  // namespace

TEST_CASE("run: a host device with a memory-lock limit below guest memory is refused before anything starts") {
  const auto prlimit = chl::test::tool("prlimit");
  if (!prlimit) {
    chl::test::skip("prlimit (util-linux) is not installed");
    return;
  }
  DevicePluginEnv env;
  LauncherRun r;
  write_vfio_vmi(r);
  r.wrapper = {*prlimit, "--memlock=1048576:1048576", "--"};  // 1 MiB, below the 64 MiB guest
  r.start();
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK(exit->code == 2);
  CHECK_MESSAGE(r.output().find("spec.domain.devices.hostDevices: VFIO locks all guest memory (64 MiB)") !=
                    std::string::npos,
                r.output());
  CHECK_FALSE(std::filesystem::exists(r.state_dir() / "vmm.log"));  // no VMM was started
}

TEST_CASE("run: without VFIO on the machine, Cloud Hypervisor's own error chain is the launcher's failure") {
  if (std::filesystem::exists("/dev/vfio/vfio")) {
    chl::test::skip("this machine has /dev/vfio/vfio: what CH does with 0000:00:00.0 depends on its IOMMU groups");
    return;
  }
  DevicePluginEnv env;
  LauncherRun r;
  write_vfio_vmi(r);
  // A 4 MiB guest fits the default 8 MiB memory-lock limit (raising it needs CAP_SYS_RESOURCE,
  // which our test machines do not give even root): the plan passes, Cloud Hypervisor answers.
  std::string text = chl::test::read_file(r.vmi_file());
  text = std::regex_replace(text, std::regex("guest: 64Mi"), "guest: 4Mi");
  chl::test::write_file(r.vmi_file(), text);
  rlimit ml{};
  REQUIRE(::getrlimit(RLIMIT_MEMLOCK, &ml) == 0);
  if (ml.rlim_cur != RLIM_INFINITY && ml.rlim_cur < (std::uint64_t{4} << 20)) {
    chl::test::skip("the memory-lock limit (" + std::to_string(ml.rlim_cur) + " bytes) is below even a 4 MiB guest");
    return;
  }
  r.start();
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK(exit->code == 1);
  // CH v52 at vm.boot (as read from the real binary on a machine without VFIO):
  // ["Error from API","The VM could not boot","Error from device manager",
  //  "Cannot create a VFIO device","failed to open /dev/vfio/vfio container: …", …]
  const std::string out = r.output();
  CHECK_MESSAGE(out.find("booting the VM") != std::string::npos, out);
  CHECK(out.find("Cannot create a VFIO device") != std::string::npos);
  CHECK(out.find("failed to open /dev/vfio/vfio container: No such file or directory (os error 2)") !=
        std::string::npos);
}

// Suite double (label double: the vmm lane runs it, the real-ch lane leaves it out): the machine
// with VFIO is the double's VMM_DOUBLE_VFIO_ROOT knob; no machine of ours has VFIO.
TEST_CASE("run: with VFIO (the double's VMM_DOUBLE_VFIO_ROOT) the device plugin's address is attached by sysfs path and alias" *
          doctest::test_suite("double")) {
  if (chl::test::using_real_vmm()) {
    chl::test::skip("VMM_DOUBLE_VFIO_ROOT (a machine with VFIO) is a knob of the VMM double; no machine of ours has VFIO");
    return;
  }
  DevicePluginEnv env;
  LauncherRun r;
  write_vfio_vmi(r);
  std::string text = chl::test::read_file(r.vmi_file());
  text = std::regex_replace(text, std::regex("guest: 64Mi"), "guest: 4Mi");  // fits the default memlock
  chl::test::write_file(r.vmi_file(), text);
  rlimit ml{};
  REQUIRE(::getrlimit(RLIMIT_MEMLOCK, &ml) == 0);
  if (ml.rlim_cur != RLIM_INFINITY && ml.rlim_cur < (std::uint64_t{4} << 20)) {
    chl::test::skip("the memory-lock limit (" + std::to_string(ml.rlim_cur) + " bytes) is below even a 4 MiB guest");
    return;
  }
  // A machine with VFIO: the container, the function's IOMMU group link, the group's file.
  chl::test::TempDir root("hostdev-vfioroot");
  const std::string dev = root.path().string() + "/sys/bus/pci/devices/0000:00:00.0";
  std::filesystem::create_directories(dev);
  std::filesystem::create_directories(root / "dev/vfio");
  std::filesystem::create_symlink("../../../../kernel/iommu_groups/12", dev + "/iommu_group");
  chl::test::write_file(root / "dev/vfio/vfio", "");
  chl::test::write_file(root / "dev/vfio/12", "");
  r.start({}, r.vmm_with_env({{"VMM_DOUBLE_VFIO_ROOT", root.path().string()}}));
  REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
  const auto d = r.domain();
  const auto& info = d["info"];
  REQUIRE(info["config"]["devices"].is_array());
  CHECK(info["config"]["devices"][0]["path"] == "/sys/bus/pci/devices/0000:00:00.0/");
  CHECK(info["config"]["devices"][0]["id"] == "hostdevice-dev1");
  CHECK(info["device_tree"].contains("hostdevice-dev1"));
}

namespace {

// An SR-IOV interface on a Multus network (its only interface: nothing is wired in the pod), its
// VF in KubeVirt's network-info file (launcher/sriov_devices.hpp); a 4 MiB guest fits the default
// memory-lock limit. False (after a SKIPPED line) when even that limit is lower.
bool write_sriov_vmi(LauncherRun& r, const std::filesystem::path& network_info) {
  r.write_vmi("console=ttyS0");
  std::string text = chl::test::read_file(r.vmi_file());
  text = std::regex_replace(text, std::regex("guest: 64Mi"), "guest: 4Mi");
  text = std::regex_replace(text, std::regex("    devices:\n      autoattachPodInterface: false\n"),
                            "    devices:\n      interfaces:\n      - {name: fast, sriov: {}}\n");
  text += "  networks:\n  - {name: fast, multus: {networkName: sriov-net}}\n";
  chl::test::write_file(r.vmi_file(), text);
  chl::test::write_file(network_info,
                        R"J({"interfaces":[{"network":"fast","deviceInfo":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:00:00.0"}}}]})J");
  rlimit ml{};
  REQUIRE(::getrlimit(RLIMIT_MEMLOCK, &ml) == 0);
  if (ml.rlim_cur != RLIM_INFINITY && ml.rlim_cur < (std::uint64_t{4} << 20)) {
    chl::test::skip("the memory-lock limit (" + std::to_string(ml.rlim_cur) + " bytes) is below even a 4 MiB guest");
    return false;
  }
  return true;
}

}  // namespace

TEST_CASE("run: an SR-IOV interface is its VF from network-info as a VFIO device (sriov-<name>), never a virtio NIC") {
  chl::test::TempDir root("hostdev-sriovroot");  // the double's machine with VFIO; outlives the run
  LauncherRun r;
  const auto info = r.dir.path() / "network-info";
  if (!write_sriov_vmi(r, info)) return;
  if (!chl::test::using_real_vmm()) {
    // The double's machine with VFIO: the VF's IOMMU group and its file.
    const std::string dev = root.path().string() + "/sys/bus/pci/devices/0000:00:00.0";
    std::filesystem::create_directories(dev);
    std::filesystem::create_directories(root / "dev/vfio");
    std::error_code ec;
    std::filesystem::create_symlink("../../../../kernel/iommu_groups/3", dev + "/iommu_group", ec);
    chl::test::write_file(root / "dev/vfio/vfio", "");
    chl::test::write_file(root / "dev/vfio/3", "");
    r.start({"--network-info", info.string()}, r.vmm_with_env({{"VMM_DOUBLE_VFIO_ROOT", root.path().string()}}));
    REQUIRE_MESSAGE(r.wait_state("Running"), r.output());
    const auto d = r.domain();
    REQUIRE(d["info"]["config"]["devices"].is_array());
    CHECK(d["info"]["config"]["devices"][0]["id"] == "sriov-fast");
    CHECK(d["info"]["config"]["devices"][0]["path"] == "/sys/bus/pci/devices/0000:00:00.0/");
    CHECK(d["info"]["device_tree"].contains("sriov-fast"));
    const auto& cfg = d["info"]["config"];
    CHECK_MESSAGE((!cfg.contains("net") || cfg["net"].is_null() || cfg["net"].empty()), cfg.dump());  // no virtio-net NIC
    return;
  }
  if (std::filesystem::exists("/dev/vfio/vfio")) {
    chl::test::skip("this machine has /dev/vfio/vfio: what CH does with 0000:00:00.0 depends on its IOMMU groups");
    return;
  }
  // The real CH: its own chain for a VF it cannot open, as the launcher's failure.
  r.start({"--network-info", info.string()});
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK(exit->code == 1);
  const std::string out = r.output();
  CHECK_MESSAGE(out.find("Cannot create a VFIO device") != std::string::npos, out);
  CHECK(out.find("failed to open /dev/vfio/vfio container: No such file or directory (os error 2)") != std::string::npos);
}

TEST_CASE("run: an SR-IOV interface whose network has no VF in network-info is refused naming the interface") {
  LauncherRun r;
  const auto info = r.dir.path() / "network-info";
  if (!write_sriov_vmi(r, info)) return;
  chl::test::write_file(info, R"J({"interfaces":[{"network":"other","deviceInfo":{"pci":{"pci-address":"0000:65:00.2"}}}]})J");
  r.start({"--network-info", info.string()});
  auto exit = r.wait_exit();
  REQUIRE(exit);
  CHECK(exit->code == 2);
  CHECK_MESSAGE(r.output().find("spec.domain.devices.interfaces[0].sriov: PCI-Address for SR-IOV network \"fast\" not found") !=
                    std::string::npos,
                r.output());
  CHECK_FALSE(std::filesystem::exists(r.state_dir() / "vmm.log"));
}

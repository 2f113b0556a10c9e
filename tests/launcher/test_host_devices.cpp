// launcher/host_devices: KubeVirt's device-plugin environment variables -> the VFIO devices of a
// VMI's hostDevices and gpus, as virt-launcher reads them (KubeVirt
// pkg/virt-launcher/virtwrap/device/hostdevice).
#include <doctest/doctest.h>

#include "launcher/host_devices.hpp"
#include "vmi/parser.hpp"

using chl::launcher::device_plugin_env;
using chl::launcher::plan_host_devices;
using chl::launcher::resource_env_var;

namespace {

chl::vmi::Vmi vmi_with(const std::string& devices) {
  auto parsed = chl::vmi::parse_vmi(
      "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {name: v, namespace: d}\n"
      "spec:\n  domain:\n    resources: {requests: {memory: 64Mi}}\n    devices:\n" +
      devices);
  return parsed.vmi;
}

}  // namespace

TEST_CASE("KubeVirt's variable name for a resource") {
  // pkg/util/util.go ResourceNameToEnvVar: upper case, '/' and '.' as '_'.
  CHECK(resource_env_var("PCI_RESOURCE", "nvidia.com/GP102GL_Tesla_P40") == "PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40");
  CHECK(resource_env_var("MDEV_PCI_RESOURCE", "nvidia.com/GRID_T4-1Q") == "MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_T4-1Q");
}

TEST_CASE("host devices and GPUs take their addresses as virt-launcher's address pools give them") {
  auto v = vmi_with(
      "      hostDevices:\n"
      "      - {name: nic1, deviceName: intel.com/qat}\n"
      "      - {name: nic2, deviceName: intel.com/qat}\n"
      "      gpus:\n"
      "      - {name: gpu1, deviceName: nvidia.com/GP102GL}\n"
      "      - {name: vgpu1, deviceName: nvidia.com/GRID_T4-1Q}\n");
  std::map<std::string, std::string> env{
      {"PCI_RESOURCE_INTEL_COM_QAT", "0000:3d:01.0,0000:3d:01.1,"},  // a trailing comma, as plugins write
      {"PCI_RESOURCE_NVIDIA_COM_GP102GL", "0000:81:00.0"},
      {"MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_T4-1Q", "4b20d080-1b54-4048-85b3-a6a62d165c01"}};
  auto p = plan_host_devices(v, env);
  REQUIRE(p);
  REQUIRE(p->size() == 4);
  CHECK((*p)[0].alias == "hostdevice-nic1");
  CHECK((*p)[0].address == "0000:3d:01.0");
  CHECK((*p)[0].sysfs_path == "/sys/bus/pci/devices/0000:3d:01.0/");
  CHECK((*p)[1].alias == "hostdevice-nic2");
  CHECK((*p)[1].address == "0000:3d:01.1");
  CHECK((*p)[2].alias == "gpu-gpu1");
  CHECK_FALSE((*p)[2].mdev);
  CHECK((*p)[3].alias == "gpu-vgpu1");
  CHECK((*p)[3].mdev);
  CHECK((*p)[3].sysfs_path == "/sys/bus/mdev/devices/4b20d080-1b54-4048-85b3-a6a62d165c01/");
}

TEST_CASE("an address shared by two resources is given once (AddressPool.Pop)") {
  auto v = vmi_with(
      "      hostDevices:\n"
      "      - {name: a, deviceName: vendor.com/x}\n"
      "      - {name: b, deviceName: vendor.com/y}\n");
  auto p = plan_host_devices(v, {{"PCI_RESOURCE_VENDOR_COM_X", "0000:01:00.0"},
                                 {"PCI_RESOURCE_VENDOR_COM_Y", "0000:01:00.0,0000:02:00.0"}});
  REQUIRE(p);
  REQUIRE(p->size() == 2);
  CHECK((*p)[0].address == "0000:01:00.0");
  CHECK((*p)[1].address == "0000:02:00.0");
}

TEST_CASE("a device without an address, or with a malformed one, is refused naming the field and variable") {
  auto v = vmi_with(
      "      hostDevices:\n"
      "      - {name: a, deviceName: vendor.com/x}\n"
      "      - {name: b, deviceName: vendor.com/x}\n");
  auto one = plan_host_devices(v, {{"PCI_RESOURCE_VENDOR_COM_X", "0000:01:00.0"}});
  REQUIRE_FALSE(one);
  REQUIRE(one.error().size() == 1);
  CHECK(one.error()[0].path == "spec.domain.devices.hostDevices[1]");
  CHECK(one.error()[0].message.find("PCI_RESOURCE_VENDOR_COM_X and MDEV_PCI_RESOURCE_VENDOR_COM_X") !=
        std::string::npos);
  auto none = plan_host_devices(v, {});
  REQUIRE_FALSE(none);
  CHECK(none.error().size() == 2);
  auto bad = plan_host_devices(v, {{"PCI_RESOURCE_VENDOR_COM_X", "../../etc,0000:01:00.1"}});
  REQUIRE_FALSE(bad);
  CHECK(bad.error()[0].path == "spec.domain.devices.hostDevices[0]");
  CHECK(bad.error()[0].message.find("\"../../etc\", which is not a PCI address") != std::string::npos);
}

TEST_CASE("only the device plugins' variables are read from the environment") {
  std::string a = "PCI_RESOURCE_X=0000:01:00.0", b = "MDEV_PCI_RESOURCE_Y=u", c = "PATH=/bin", d = "PCI_RESOURCE=";
  char* envp[] = {a.data(), b.data(), c.data(), d.data(), nullptr};
  auto env = device_plugin_env(envp);
  CHECK(env.size() == 2);
  CHECK(env["PCI_RESOURCE_X"] == "0000:01:00.0");
  CHECK(env["MDEV_PCI_RESOURCE_Y"] == "u");
}

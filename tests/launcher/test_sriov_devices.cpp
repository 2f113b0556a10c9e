// launcher/sriov_devices: the SR-IOV interfaces of a VMI -> VFIO devices, each VF's PCI address
// from KubeVirt's network-info file as virt-launcher reads it (KubeVirt d923fdb
// pkg/virt-launcher/virtwrap/device/hostdevice/sriov/hostdev.go, pcipool_netstatus.go).
#include <doctest/doctest.h>

#include "launcher/sriov_devices.hpp"
#include "vmi/parser.hpp"

using chl::launcher::plan_sriov_devices;

namespace {

chl::vmi::Vmi vmi_with(const std::string& interfaces) {
  return chl::vmi::parse_vmi(
             "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {name: v, "
             "namespace: d}\n"
             "spec:\n  domain:\n    resources: {requests: {memory: 64Mi}}\n    devices:\n      "
             "interfaces:\n" +
             interfaces +
             "  networks:\n  - {name: default, pod: {}}\n  - {name: fast, multus: {networkName: "
             "sriov-a}}\n"
             "  - {name: slow, multus: {networkName: sriov-b}}\n")
      .vmi;
}

// As virt-controller writes the annotation (downwardapi/networkinfo.go generateNetworkInfo:
// sorted by network; deviceInfo as the SR-IOV CNI reported it in the network-status).
const char* kInfo = R"J({"interfaces":[
  {"network":"fast","deviceInfo":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:65:00.2","pf-pci-address":"0000:65:00.0"}},"mac":"02:00:00:00:00:01"},
  {"network":"slow","deviceInfo":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:65:00.3"}}}]})J";

std::string all(const chl::vmi::Violations& v) {
  std::string s;
  for (const auto& x : v) s += x.path + ": " + x.message + "\n";
  return s;
}

}  // namespace

TEST_CASE("SR-IOV: each interface takes its network's VF, aliased sriov-<name>, by sysfs path") {
  const auto v = vmi_with(
      "      - {name: default, masquerade: {}}\n      - {name: fast, sriov: {}}\n"
      "      - {name: slow, sriov: {}}\n");
  auto d = plan_sriov_devices(v, kInfo);
  REQUIRE_MESSAGE(d, (d ? "" : all(d.error())));
  REQUIRE(d->size() == 2);
  CHECK((*d)[0].alias == "sriov-fast");  // pkg/network/deviceinfo/sriov.go:22
  CHECK((*d)[0].address == "0000:65:00.2");
  CHECK((*d)[0].sysfs_path == "/sys/bus/pci/devices/0000:65:00.2/");
  CHECK_FALSE((*d)[0].mdev);
  CHECK((*d)[1].alias == "sriov-slow");
  CHECK((*d)[1].address == "0000:65:00.3");
  // No SR-IOV interface: nothing, and the file is not even read.
  auto none = plan_sriov_devices(vmi_with("      - {name: default, masquerade: {}}\n"), "");
  REQUIRE(none);
  CHECK(none->empty());
}

TEST_CASE("SR-IOV: what the network-info lacks is named on the interface, in KubeVirt's words") {
  const auto v = vmi_with("      - {name: fast, sriov: {}}\n      - {name: slow, sriov: {}}\n");
  // Not JSON (NewPCIAddressPoolWithNetworkStatus: "failed to unmarshal network-info annotation").
  auto bad = plan_sriov_devices(v, "{not json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error()[0].path == "spec.domain.devices.interfaces[0].sriov");
  CHECK(bad.error()[0].message.find("failed to unmarshal network-info annotation") !=
        std::string::npos);
  // No VF at all: the file missing or empty, or no deviceInfo.pci (hostdev.go: "found no SR-IOV
  // networks to PCI-Address mapping").
  for (const char* text :
       {"", "{}", R"J({"interfaces":[{"network":"fast","mac":"02:00:00:00:00:01"}]})J"}) {
    auto e = plan_sriov_devices(v, text);
    REQUIRE_FALSE(e);
    CHECK_MESSAGE(e.error()[0].message.find("found no SR-IOV networks to PCI-Address mapping") !=
                      std::string::npos,
                  all(e.error()));
  }
  // One network without its VF (pcipool_netstatus.go Pop: "PCI-Address for SR-IOV network %q not
  // found").
  auto one = plan_sriov_devices(
      v,
      R"J({"interfaces":[{"network":"fast","deviceInfo":{"type":"pci","pci":{"pci-address":"0000:65:00.2"}}}]})J");
  REQUIRE_FALSE(one);
  REQUIRE(one.error().size() == 1);
  CHECK(one.error()[0].path == "spec.domain.devices.interfaces[1].sriov");
  CHECK(one.error()[0].message.find("PCI-Address for SR-IOV network \"slow\" not found") !=
        std::string::npos);
  // An address that is not one.
  auto shape = plan_sriov_devices(
      v, R"J({"interfaces":[{"network":"fast","deviceInfo":{"pci":{"pci-address":"65:00.2"}}},
                            {"network":"slow","deviceInfo":{"pci":{"pci-address":"0000:65:00.3"}}}]})J");
  REQUIRE_FALSE(shape);
  CHECK(shape.error()[0].path == "spec.domain.devices.interfaces[0].sriov");
  CHECK(shape.error()[0].message.find("\"65:00.2\"") != std::string::npos);
}

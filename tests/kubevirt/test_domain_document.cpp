// Where the domain document's values come from (kubevirt/domain_document.hpp): the VMIs as
// virt-handler sends them (../shared/reference/kubevirt-sync-vmis/*.sync.json, copied to
// golden/sync-vmis/) give documents virt-handler reads without a failure, with the MAC the network
// plan gives each NIC and the tap phase 1 made; the VMM's view then fills the disks' sources and
// targets and the NICs as the VMM has them, on both paths. The documents we make from each VMI
// are kept in golden/ours-<name>.json (CHL_UPDATE_GOLDEN=1 rewrites them).
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>

#include "kubevirt/domain_document.hpp"
#include "network/mac.hpp"
#include "tests/kubevirt/go_domain.hpp"
#include "tests/support/test_support.hpp"
#include "vmi/parser.hpp"

namespace {

using chl::kubevirt::apply_vmm_info;
using chl::kubevirt::document_of;
using chl::kubevirt::DomainDocument;
using nlohmann::json;

const std::filesystem::path kGolden = chl::test::source_dir() / "tests/kubevirt/golden";

json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  REQUIRE_MESSAGE(in.good(), "missing " << p);
  return json::parse(in);
}

std::string all(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& f : v) s += "\n  " + f;
  return s;
}

// The document with what depends on the machine the test runs on left out (the taps' MTU is read
// from /sys/class/net).
json stable(json doc) {
  for (auto& i : doc["Spec"]["Devices"]["Interfaces"]) i["MTU"] = nullptr;
  return doc;
}

}  // namespace

TEST_CASE(
    "domain document: from each synced VMI, a document virt-handler reads cleanly, the same as "
    "golden/ours-*.json") {
  const bool update = std::getenv("CHL_UPDATE_GOLDEN") != nullptr;
  for (const char* name : {"containerdisk-cloudinit-masquerade", "efi-rng-serial",
                           "kernel-boot-no-interfaces", "pvc-emptydisk-bridge-multus"}) {
    const std::string vmi_name = name;
    CAPTURE(vmi_name);
    const json vmi = read_json(kGolden / "sync-vmis" / (std::string(name) + ".sync.json"));
    auto parsed = chl::vmi::parse_vmi(vmi.dump());
    DomainDocument d = document_of(parsed.vmi, "cloud-hypervisor");
    d.state = chl::events::DomainState::Running;
    d.reason = chl::events::StateReason::Booted;
    const json doc = chl::kubevirt::to_domain_json(d);
    // virt-handler's reading: no crash, no misreport; the interfaces' MACs the ones the guest gets.
    chl::test::HandlerVmi h = chl::test::HandlerVmi::from_vmi_json(vmi);
    for (const auto& i : parsed.vmi.spec.domain.devices.interfaces)
      if (!h.guest_macs.count(i.name))
        h.guest_macs[i.name] =
            chl::network::format_mac(chl::network::generated_mac(parsed.vmi.metadata.uid, i.name));
    const auto decoded = chl::test::go_decode_domain(doc.dump());
    CHECK(decoded.error.empty());
    CHECK_MESSAGE(decoded.unmodelled.empty(), all(decoded.unmodelled));
    const auto read = chl::test::read_as_virt_handler(decoded.value, h);
    CHECK_MESSAGE(read.failures.empty(), all(read.failures));
    CHECK(read.status.interfaces.size() == h.interfaces.size());
    for (const auto& i : read.status.interfaces) CHECK(i.mac == h.guest_macs[i.name]);
    // The shapes the real launcher sends.
    for (const auto& i : doc["Spec"]["Devices"]["Interfaces"]) {
      CHECK(i["Alias"]["UserDefined"] == true);
      CHECK(i["Target"]["Managed"] == "no");
      CHECK(i["Type"] == "ethernet");
    }
    CHECK(
        doc["Spec"]["Devices"]["Channels"][0]["Target"] ==
        json({{"Name", "org.qemu.guest_agent.0"}, {"Type", "virtio"}, {"State", "disconnected"}}));
    CHECK(doc["Spec"]["Metadata"]["KubeVirt"]["GracePeriod"]["DeletionGracePeriodSeconds"] ==
          vmi["spec"].value("terminationGracePeriodSeconds", 30));
    CHECK(doc["Spec"]["Features"]["ACPI"] == json::object());
    const auto golden = kGolden / ("ours-" + std::string(name) + ".json");
    if (update) std::ofstream(golden) << stable(doc).dump(1) << "\n";
    CHECK(stable(doc) == read_json(golden));
  }
}

TEST_CASE("domain document: the pod networks' taps and MACs as the network plan gives them") {
  const json vmi = read_json(kGolden / "sync-vmis/pvc-emptydisk-bridge-multus.sync.json");
  const DomainDocument d = document_of(chl::vmi::parse_vmi(vmi.dump()).vmi, "cloud-hypervisor");
  REQUIRE(d.interfaces.size() == 2);
  CHECK(d.interfaces[0].name == "default");
  CHECK(d.interfaces[0].target_device == "tap0");  // eth0's
  CHECK(d.interfaces[0].mac == chl::network::format_mac(chl::network::generated_mac(
                                   "3f2d5c1e-7a4b-4c8d-9e0f-1a2b3c4d5e03", "default")));
  CHECK(d.interfaces[1].name == "storage");
  CHECK(d.interfaces[1].mac == "02:00:00:aa:bb:01");  // the VMI's, lowercase
  // KubeVirt's hashed pod interface name for a Multus network (pod<11 hex>) gives tap<11 hex>.
  CHECK(d.interfaces[1].target_device.starts_with("tap"));
  CHECK(d.interfaces[1].target_device.size() == 14);
  CHECK(d.interfaces[0].model == "virtio-non-transitional");
  // Disks: named, no source or target until the VMM has them.
  REQUIRE(d.disks.size() == 3);
  CHECK(d.disks[0].name == "rootdisk");
  CHECK(d.disks[0].source.empty());
  CHECK(d.disks[0].target_device.empty());
}

TEST_CASE(
    "domain document: Cloud Hypervisor's vm.info gives the disks' sources and vdX targets, the "
    "NICs' MACs") {
  const json vmi = read_json(kGolden / "sync-vmis/pvc-emptydisk-bridge-multus.sync.json");
  DomainDocument d = document_of(chl::vmi::parse_vmi(vmi.dump()).vmi, "cloud-hypervisor");
  d.disks.emplace_back().name = "hp1";  // a hotplug volume, attached as "hotplug-hp1"
  // vm.info's config as CH v52 answers it (the disks in the order it created them).
  const json info = json::parse(R"({"config": {
    "disks": [{"path": "/var/run/kubevirt-private/vmi-disks/rootdisk/disk.img", "id": "rootdisk", "readonly": false},
              {"path": "/var/run/kubevirt-ephemeral-disks/disk-data/scratch/disk.qcow2", "id": "scratch"},
              {"path": "/var/run/kubevirt/hotplug-disks/hp1.img", "id": "hotplug-hp1", "readonly": true}],
    "net": [{"id": "net-default", "mac": "02:AB:CD:00:00:01", "mtu": 1450, "tap": null},
            {"id": "net-storage", "mac": "02:00:00:aa:bb:01"}]},
    "state": "Running"})");
  CHECK(apply_vmm_info(d, info, {{"hotplug-hp1", "hp1"}}));
  CHECK(d.disks[0].source == "/var/run/kubevirt-private/vmi-disks/rootdisk/disk.img");
  CHECK(d.disks[0].target_device == "vda");
  CHECK(d.disks[1].target_device == "vdb");
  CHECK(d.disks[2].name == "logs");  // the VMM does not have it: no source, no target
  CHECK(d.disks[2].source.empty());
  CHECK(d.disks[2].target_device.empty());
  CHECK(d.disks[3].source == "/var/run/kubevirt/hotplug-disks/hp1.img");
  CHECK(d.disks[3].target_device == "vdc");
  CHECK(d.disks[3].read_only);
  CHECK(d.interfaces[0].mac == "02:ab:cd:00:00:01");  // the VMM's, lowercase
  CHECK(d.interfaces[0].mtu == std::optional<unsigned>(1450));
  CHECK(d.interfaces[0].target_device == "tap0");  // CH has the tap by fd, not by name: ours stays
  // The same again changes nothing.
  CHECK_FALSE(apply_vmm_info(d, info, {{"hotplug-hp1", "hp1"}}));
  // hp1 detached: CH's config no longer has it, but the guest has not ejected it yet -- kept
  // as it was (`keep`), as libvirt keeps a disk until DEVICE_DELETED; after that, no source.
  json without = info;
  without["config"]["disks"].erase(2);
  CHECK_FALSE(apply_vmm_info(d, without, {}, {"hp1"}));
  CHECK(d.disks[3].source == "/var/run/kubevirt/hotplug-disks/hp1.img");
  CHECK(d.disks[3].target_device == "vdc");
  CHECK(apply_vmm_info(d, without, {}));
  CHECK(d.disks[3].source.empty());
}

TEST_CASE(
    "domain document: libvirt's live domain gives its own targets, the NICs and the expanded "
    "machine type") {
  const json vmi = read_json(kGolden / "sync-vmis/containerdisk-cloudinit-masquerade.sync.json");
  DomainDocument d = document_of(chl::vmi::parse_vmi(vmi.dump()).vmi, "qemu-kvm");
  d.disks.emplace_back().name = "hp1";
  // The libvirt driver's info (drivers/libvirt/libvirt_driver.cpp, from live_xml.hpp).
  const json info = json::parse(R"({"config": {
    "disks": [{"id": "root", "path": "/state/root.qcow2", "target": "vda", "device": "disk", "readonly": false},
              {"id": "cloudinit", "path": "/state/noCloud.iso", "target": "vdb", "device": "disk", "readonly": true},
              {"id": "hotplug-hp1", "path": "/var/run/kubevirt/hotplug-disks/hp1.img", "target": "sda", "device": "disk"}],
    "net": [{"id": "default", "mac": "02:00:00:11:22:33", "tap": "tap0", "mtu": 1500, "model": "virtio-non-transitional"}]},
    "machine": "pc-q35-7.2"})");
  CHECK(apply_vmm_info(d, info, {{"hotplug-hp1", "hp1"}}));
  CHECK(d.disks[0].target_device == "vda");
  CHECK(d.disks[1].target_device == "vdb");
  CHECK(d.disks[1].bus == "virtio");  // the VMI's
  CHECK(d.disks[1].read_only);
  CHECK(d.disks[2].target_device == "sda");
  CHECK(d.disks[2].bus == "scsi");  // libvirt's hotplug disks are on the virtio-scsi controller
  CHECK(d.interfaces[0].mac == "02:00:00:11:22:33");
  CHECK(d.interfaces[0].target_device == "tap0");
  CHECK(d.machine == "pc-q35-7.2");
  // The VMM's view, as virt-handler reads it: the cloud-init and root targets in volumeStatus.
  chl::test::HandlerVmi h = chl::test::HandlerVmi::from_vmi_json(vmi);
  h.guest_macs["default"] = "02:00:00:11:22:33";
  h.volumes.push_back("hp1");
  h.volume_status = {{"root", false, "Ready"},
                     {"cloudinit", false, "Ready"},
                     {"hp1", true, "HotplugVolumeMounted"}};
  d.state = chl::events::DomainState::Running;
  const auto r = chl::test::decode_and_read(chl::kubevirt::to_domain_json(d).dump(), h);
  CHECK_MESSAGE(r.failures.empty(), all(r.failures));
  REQUIRE(r.status.volume("hp1"));
  CHECK(r.status.volume("hp1")->phase == "Ready");
  CHECK(r.status.volume("cloudinit")->target == "vdb");
  CHECK(r.status.machine == "pc-q35-7.2");
}

TEST_CASE(
    "domain document: an SR-IOV interface is a host device aliased sriov-<name>, as virt-handler "
    "reads it") {
  auto vmi = read_json(kGolden / "sync-vmis/pvc-emptydisk-bridge-multus.sync.json");
  vmi["spec"]["domain"]["devices"]["interfaces"][1] = {
      {"name", "storage"}, {"sriov", json::object()}, {"macAddress", "02:00:00:aa:bb:01"}};
  DomainDocument d = document_of(chl::vmi::parse_vmi(vmi.dump()).vmi, "qemu-kvm");
  d.state = chl::events::DomainState::Running;
  REQUIRE(d.interfaces.size() == 1);
  REQUIRE(d.sriov_interfaces == std::vector<std::string>{"storage"});
  // On Cloud Hypervisor: only once CH has the VF attached (vm.info's config and device tree).
  DomainDocument c = document_of(chl::vmi::parse_vmi(vmi.dump()).vmi, "cloud-hypervisor");
  CHECK(c.sriov_interfaces.empty());
  CHECK(apply_vmm_info(c,
                       {{"config", {{"devices", {{{"id", "sriov-storage"}, {"path", "/sys/bus/pci/devices/0000:65:00.2/"}}}}}},
                        {"device_tree", {{"sriov-storage", {{"pci_bdf", "0000:00:04.0"}}}}}},
                       {}));
  c.state = chl::events::DomainState::Running;
  CHECK(chl::kubevirt::to_domain_json(c)["Spec"]["Devices"]["HostDevices"][0]["Alias"] ==
        json({{"Name", "sriov-storage"}, {"UserDefined", true}}));
  const json doc = chl::kubevirt::to_domain_json(d);
  CHECK(doc["Spec"]["Devices"]["HostDevices"][0]["Alias"] ==
        json({{"Name", "sriov-storage"}, {"UserDefined", true}}));
  auto h = chl::test::HandlerVmi::from_vmi_json(vmi);
  h.guest_macs["default"] = d.interfaces[0].mac;
  const auto r = chl::test::decode_and_read(doc.dump(), h);
  CHECK_MESSAGE(r.failures.empty(), all(r.failures));
  REQUIRE(r.status.interface("storage"));
  CHECK(r.status.interface("storage")->mac == "02:00:00:aa:bb:01");
}

TEST_CASE("domain document: disk target names as libvirt makes them") {
  CHECK(chl::kubevirt::disk_target_name("vd", 0) == "vda");
  CHECK(chl::kubevirt::disk_target_name("vd", 25) == "vdz");
  CHECK(chl::kubevirt::disk_target_name("vd", 26) == "vdaa");
  CHECK(chl::kubevirt::disk_target_name("sd", 27) == "sdab");
}

TEST_CASE("isolateEmulatorThread: the domain never carries CPUTune") {
  // virt-handler's housekeeping (KubeVirt pkg/hypervisor/kvm/runtime.go:178-237) moves every
  // thread of the pod whose name lacks "CPU " and "KVM" onto the domain's CPUTune.EmulatorPin
  // CPUs — Cloud Hypervisor's vCPU threads ("vcpuN") included. Without CPUTune it stops at
  // creating its cgroup, and the launcher's own placement stands (docs/vmi-support.md, "Where
  // virt-handler assumes QEMU").
  auto parsed = chl::vmi::parse_vmi(R"({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
    "metadata": {"name": "iso", "namespace": "default", "uid": "11111111-2222-4333-8444-555555555555"},
    "spec": {"domain": {"cpu": {"cores": 2, "dedicatedCpuPlacement": true, "isolateEmulatorThread": true},
                        "resources": {"requests": {"memory": "64Mi"}}, "devices": {}}}})");
  REQUIRE(parsed.vmi.spec.domain.cpu.isolate_emulator_thread);
  DomainDocument d = document_of(parsed.vmi, "cloud-hypervisor");
  d.state = chl::events::DomainState::Running;
  d.reason = chl::events::StateReason::Booted;
  const json doc = chl::kubevirt::to_domain_json(d);
  CHECK((!doc["Spec"].contains("CPUTune") || doc["Spec"]["CPUTune"].is_null()));
  CHECK(doc["Spec"]["Type"] == "kvm");  // not "qemu": no SoftwareEmulation condition (vm.go:753)
}

TEST_CASE(
    "domain document: host devices and GPUs are the VFIO devices Cloud Hypervisor attached (config and "
    "device tree), in KubeVirt's HostDevice shape") {
  auto vmi = read_json(kGolden / "sync-vmis/pvc-emptydisk-bridge-multus.sync.json");
  DomainDocument d = document_of(chl::vmi::parse_vmi(vmi.dump()).vmi, "cloud-hypervisor");
  d.state = chl::events::DomainState::Running;
  CHECK(d.host_devices.empty());  // nothing from the plan
  // vm.info as CH v52 answers it: devices[] in the config; the device tree has those attached
  // (a device whose boot or add failed is in neither; one only created is in the config alone).
  json info = {{"state", "Running"},
               {"config",
                {{"devices",
                  {{{"id", "hostdevice-nic"}, {"path", "/sys/bus/pci/devices/0000:81:00.1/"}},
                   {{"id", "gpu-vgpu1"}, {"path", "/sys/bus/mdev/devices/4b20d080-1b54-4048-85b3-a6a62d165c01/"}},
                   {{"id", "hostdevice-notyet"}, {"path", "/sys/bus/pci/devices/0000:82:00.0/"}}}}}},
               {"device_tree",
                {{"hostdevice-nic", {{"id", "hostdevice-nic"}, {"pci_bdf", "0000:00:05.0"}}},
                 {"gpu-vgpu1", {{"id", "gpu-vgpu1"}, {"pci_bdf", "0000:00:06.0"}}},
                 {"__rng", {{"id", "__rng"}, {"pci_bdf", "0000:00:01.0"}}}}}};
  CHECK(apply_vmm_info(d, info, {}));
  REQUIRE(d.host_devices.size() == 2);
  const json doc = chl::kubevirt::to_domain_json(d);
  const json& hd = doc["Spec"]["Devices"]["HostDevices"];
  REQUIRE(hd.size() == 2);
  // generic/hostdev.go:34 and hostdev.go:140-150: alias "hostdevice-<name>", user-defined; the
  // host address as device.NewPciAddressField writes it.
  CHECK(hd[0]["Alias"] == json({{"Name", "hostdevice-nic"}, {"UserDefined", true}}));
  CHECK(hd[0]["Type"] == "pci");
  CHECK(hd[0]["Managed"] == "no");
  CHECK(hd[0]["Source"]["Address"] ==
        json({{"Type", "pci"}, {"Domain", "0x0000"}, {"Bus", "0x81"}, {"Slot", "0x00"}, {"Function", "0x1"}}));
  CHECK(hd[0]["Address"]["Slot"] == "0x05");
  // gpu/hostdev.go:34 and hostdev.go:181-194: a mediated device.
  CHECK(hd[1]["Alias"]["Name"] == "gpu-vgpu1");
  CHECK(hd[1]["Type"] == "mdev");
  CHECK(hd[1]["Mode"] == "subsystem");
  CHECK(hd[1]["Model"] == "vfio-pci");
  CHECK(hd[1]["Source"]["Address"]["UUID"] == "4b20d080-1b54-4048-85b3-a6a62d165c01");
  // Go decodes it (every field typed), and virt-handler reads it without a failure.
  const auto decoded = chl::test::go_decode_domain(doc.dump());
  CHECK(decoded.error.empty());
  CHECK_MESSAGE(decoded.unmodelled.empty(), all(decoded.unmodelled));
  CHECK(decoded.value["Spec"]["Devices"]["HostDevices"][0]["Source"]["Address"]["Bus"] == "0x81");
  const auto r = chl::test::decode_and_read(doc.dump(), chl::test::HandlerVmi::from_vmi_json(vmi));
  CHECK_MESSAGE(r.failures.empty(), all(r.failures));
  // The VM gone (no device tree, as after a failed vm.boot): nothing is claimed any more.
  info.erase("device_tree");
  CHECK(apply_vmm_info(d, info, {}));
  CHECK(d.host_devices.empty());
  CHECK(chl::kubevirt::to_domain_json(d)["Spec"]["Devices"]["HostDevices"].is_null());
}

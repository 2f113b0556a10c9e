// HotplugHostDevices on Cloud Hypervisor (kubevirt/launcher_hotplug.cpp): a VMI started with no
// SR-IOV interface, then the VMI with one Multus plugged later (its status has the multus-status
// source, its VF is in the pod's network-info), as virt-handler sends it
// (pkg/virt-handler/vm.go:2061-2101). Our machines have no VFIO: on the VMM double its
// VMM_DOUBLE_VFIO_ROOT knob stands for a machine with it; without, Cloud Hypervisor's (or the
// double's) error chain is the answer and the domain claims nothing.
#include "tests/kubevirt/virt_launcher_harness.hpp"

namespace {

// The VMI of the start, and the same with the SR-IOV interface "fast" Multus added since.
nlohmann::json sriov_vmi() {
  auto j = nlohmann::json::parse(vmi_json());
  j["spec"]["domain"]["devices"]["interfaces"] = nlohmann::json::parse(R"([{"name": "fast", "sriov": {}}])");
  j["spec"]["networks"] = nlohmann::json::parse(R"([{"name": "fast", "multus": {"networkName": "sriov-net"}}])");
  j["status"]["interfaces"] = nlohmann::json::parse(R"([{"name": "fast", "infoSource": "multus-status"}])");
  return j;
}

v1::VMIRequest request(const std::string& json) {
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(json);
  return vmi;
}

constexpr const char* kNetworkInfo =
    R"J({"interfaces":[{"network":"fast","deviceInfo":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:00:00.0"}}}]})J";

// The aliases of GetDomain's Spec.Devices.HostDevices.
std::vector<std::string> host_device_aliases(v1::Cmd::Stub& cmd) {
  v1::EmptyRequest empty;
  v1::DomainResponse dom;
  REQUIRE(call([&](auto& c) { return cmd.GetDomain(&c, empty, &dom); }).ok());
  REQUIRE_MESSAGE(dom.response().success(), dom.response().message());
  const auto d = nlohmann::json::parse(dom.domain(), nullptr, false);
  REQUIRE(d.is_object());
  std::vector<std::string> out;
  const auto& devs = d["Spec"]["Devices"];
  if (devs.contains("HostDevices") && devs["HostDevices"].is_array())
    for (const auto& h : devs["HostDevices"]) out.push_back(h["Alias"].value("Name", ""));
  return out;
}

// Start the launcher with `network_info` as the pod's network-info file, Sync the VMI without
// SR-IOV: its command stub once the domain runs.
std::unique_ptr<v1::Cmd::Stub> start_plain(Pod& pod, const std::string& network_info) {
  const fs::path file = pod.dir.path() / "network-info";
  chl::test::write_file(file, network_info);
  pod.extra_args = {"--network-info", file.string()};
  auto cmd = pod.serve();
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, request(vmi_json()), &r); }).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  return cmd;
}

}  // namespace

// Suite double (label double: the vmm lane runs it, the real-ch lane leaves it out): the machine
// with VFIO is the double's VMM_DOUBLE_VFIO_ROOT knob; no machine of ours has VFIO.
TEST_CASE("virt-launcher mode (cloud-hypervisor): HotplugHostDevices with VFIO (the double's VMM_DOUBLE_VFIO_ROOT) attaches the new SR-IOV VF as sriov-<name> and a second call is a no-op" *
          doctest::test_suite("double")) {
  if (chl::test::using_real_vmm()) {
    chl::test::skip("VMM_DOUBLE_VFIO_ROOT (a machine with VFIO) is a knob of the VMM double; no machine of ours has VFIO");
    return;
  }
  if (!guest_runnable()) return;
  Pod pod;
  // A machine with VFIO: the container, the VF's IOMMU group link, the group's file.
  const fs::path root = pod.dir.path() / "vfio-root";
  const fs::path dev = root / "sys/bus/pci/devices/0000:00:00.0";
  fs::create_directories(dev);
  fs::create_directories(root / "dev/vfio");
  fs::create_symlink("../../../../kernel/iommu_groups/12", dev / "iommu_group");
  chl::test::write_file(root / "dev/vfio/vfio", "");
  chl::test::write_file(root / "dev/vfio/12", "");
  const fs::path wrapper = pod.dir.path() / "vmm-vfio.sh";
  chl::test::write_file(wrapper, "#!/bin/sh\nexport VMM_DOUBLE_VFIO_ROOT='" + root.string() + "'\nexec '" +
                                     chl::test::vmm_binary() + "' \"$@\"\n");
  fs::permissions(wrapper, fs::perms::owner_all);
  pod.vmm_binary = wrapper.string();
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  auto cmd = start_plain(pod, kNetworkInfo);
  CHECK(host_device_aliases(*cmd).empty());

  // An interface whose status has no multus-status yet is left out, as virt-launcher does.
  auto early = sriov_vmi();
  early["status"]["interfaces"][0]["infoSource"] = "domain";
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->HotplugHostDevices(&c, request(early.dump()), &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  CHECK(host_device_aliases(*cmd).empty());

  REQUIRE(call([&](auto& c) { return cmd->HotplugHostDevices(&c, request(sriov_vmi().dump()), &r); }).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  CHECK(host_device_aliases(*cmd) == std::vector<std::string>{"sriov-fast"});
  const auto st = pod.status();
  REQUIRE(st.is_object());
  const auto& devices = st["info"]["config"]["devices"];
  REQUIRE_MESSAGE(devices.is_array(), st.dump());
  CHECK(devices[0]["path"] == "/sys/bus/pci/devices/0000:00:00.0/");
  CHECK(devices[0]["id"] == "sriov-fast");
  // virt-handler told: a domain event with the host device.
  CHECK(chl::test::wait_until(10s, [&] {
    for (const auto& n : notify.received())
      if (!n.k8s && n.json["Spec"]["Devices"].contains("HostDevices")) return true;
    return false;
  }));

  // Again: the domain has sriov-fast, nothing to attach.
  REQUIRE(call([&](auto& c) { return cmd->HotplugHostDevices(&c, request(sriov_vmi().dump()), &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  CHECK(host_device_aliases(*cmd) == std::vector<std::string>{"sriov-fast"});
  CHECK(pod.status()["info"]["config"]["devices"].size() == 1);
  // virt-handler's next Sync carries the interface: the running domain has it, nothing changed.
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, request(sriov_vmi().dump()), &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  kill_and_delete(*cmd, request(vmi_json()));
}

TEST_CASE("virt-launcher mode (cloud-hypervisor): HotplugHostDevices without VFIO answers Cloud Hypervisor's chain — the domain claims no host device and the launcher serves on") {
  if (fs::exists("/dev/vfio/vfio")) {
    chl::test::skip("this machine has /dev/vfio/vfio: what CH does with 0000:00:00.0 depends on its IOMMU groups");
    return;
  }
  if (!guest_runnable()) return;
  Pod pod;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  auto cmd = start_plain(pod, R"({"interfaces":[{"network":"other","deviceInfo":{"type":"pci","pci":{"pci-address":"0000:00:00.1"}}}]})");
  v1::Response r;
  // The network-info has no VF for the interface: refused naming it, nothing asked of CH.
  REQUIRE(call([&](auto& c) { return cmd->HotplugHostDevices(&c, request(sriov_vmi().dump()), &r); }).ok());
  CHECK_FALSE(r.success());
  CHECK_MESSAGE(r.message().find("PCI-Address for SR-IOV network \"fast\" not found") != std::string::npos, r.message());
  // A request that is not a VMI.
  REQUIRE(call([&](auto& c) { return cmd->HotplugHostDevices(&c, request("{not json"), &r); }).ok());
  CHECK_FALSE(r.success());

  chl::test::write_file(pod.dir.path() / "network-info", kNetworkInfo);
  REQUIRE(call([&](auto& c) { return cmd->HotplugHostDevices(&c, request(sriov_vmi().dump()), &r); }).ok());
  CHECK_FALSE(r.success());
  // CH v52 vm.add-device on a machine without /dev/vfio (vmm/src/device_manager.rs
  // add_vfio_device, vfio-ioctls VfioContainer::new).
  CHECK_MESSAGE(r.message().find("failed to hot-plug host-devices") != std::string::npos, r.message());
  CHECK_MESSAGE(r.message().find("sriov-fast") != std::string::npos, r.message());
  CHECK_MESSAGE(r.message().find("Cannot create a VFIO device") != std::string::npos, r.message());
  CHECK_MESSAGE(r.message().find("failed to open /dev/vfio/vfio container") != std::string::npos, r.message());
  CHECK(host_device_aliases(*cmd).empty());
  const auto st = pod.status();
  REQUIRE(st.is_object());
  CHECK_MESSAGE(st["info"]["config"].value("devices", nlohmann::json::array()).empty(), st.dump());
  CHECK_MESSAGE(st["info"].value("device_tree", nlohmann::json::object()).count("sriov-fast") == 0, st.dump());
  v1::EmptyRequest empty;
  REQUIRE(call([&](auto& c) { return cmd->Ping(&c, empty, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  kill_and_delete(*cmd, request(vmi_json()));
}

// The guest agent's answers (as a real qemu-ga 7.2 writes them) turned into KubeVirt's documents:
// GetGuestInfo / GetUsers / GetFilesystems (manager.go:2571-2665) and the domain's Status.OSInfo,
// Status.Interfaces ("lo" left out, IPv4 first: agent_poller.go:493-533), FSFreezeStatus and the
// channel entry virt-handler reads (vm.go:665-674).
#include <doctest/doctest.h>

#include "kubevirt/domain_json.hpp"
#include "kubevirt/guest_info_json.hpp"

namespace chl::kubevirt {
namespace {

using nlohmann::json;

guest_agent::GuestCache sample() {
  guest_agent::GuestCache c;
  c.info = json::parse(R"({"version": "7.2.22", "supported_commands": [
      {"enabled": true, "name": "guest-ping", "success-response": true},
      {"enabled": false, "name": "guest-fsfreeze-freeze", "success-response": true}]})");
  c.host_name = json::parse(R"({"host-name": "vm1"})");
  c.os_info = json::parse(R"J({"name": "Debian GNU/Linux", "kernel-release": "6.1.0-18-amd64",
      "version": "12 (bookworm)", "pretty-name": "Debian GNU/Linux 12 (bookworm)", "version-id": "12",
      "kernel-version": "#1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1", "machine": "x86_64", "id": "debian"})J");
  c.timezone = json::parse(R"({"zone": "UTC", "offset": 0})");
  c.users = json::parse(
      R"([{"user": "root", "login-time": 1700000000.123456}, {"user": "alice", "domain": "CORP", "login-time": 1.5}])");
  c.fs_info = json::parse(
      R"([{"name": "vda1", "mountpoint": "/", "type": "ext4", "used-bytes": 100, "total-bytes": 1000,
      "disk": [{"serial": "abc", "bus-type": "virtio", "bus": 0, "target": 0, "unit": 0}]},
      {"name": "tmpfs", "mountpoint": "/run", "type": "tmpfs", "disk": []}])");
  c.interfaces = json::parse(R"([{"name": "lo", "hardware-address": "00:00:00:00:00:00",
      "ip-addresses": [{"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8}]},
      {"name": "eth0", "hardware-address": "02:42:ac:11:00:02", "ip-addresses": [
        {"ip-address-type": "ipv6", "ip-address": "fe80::42:acff:fe11:2", "prefix": 64},
        {"ip-address-type": "ipv4", "ip-address": "10.0.2.2", "prefix": 24}]}])");
  c.fs_freeze = "thawed";
  return c;
}

TEST_CASE(
    "GetGuestInfo: KubeVirt's VirtualMachineInstanceGuestAgentInfo from the agent's answers") {
  const json j = guest_info_json(sample());
  CHECK(j["guestAgentVersion"] == "7.2.22");
  CHECK(j["supportedCommands"] ==
        json::parse(
            R"([{"name": "guest-ping", "enabled": true}, {"name": "guest-fsfreeze-freeze"}])"));
  CHECK(j["hostname"] == "vm1");
  CHECK(j["os"]["prettyName"] == "Debian GNU/Linux 12 (bookworm)");
  CHECK(j["os"]["versionId"] == "12");
  CHECK(j["os"]["id"] == "debian");
  CHECK(j["timezone"] == "UTC, 0");
  CHECK(j["userList"][0]["userName"] == "root");
  CHECK(j["userList"][0]["loginTime"].get<double>() == doctest::Approx(1700000000.123));
  CHECK(j["userList"][1]["domain"] == "CORP");
  CHECK(j["fsInfo"]["disks"][0] ==
        json::parse(R"({"diskName": "vda1", "mountPoint": "/", "fileSystemType": "ext4",
      "usedBytes": 100, "totalBytes": 1000, "disk": [{"serial": "abc", "busType": "virtio"}]})"));
  CHECK_FALSE(j["fsInfo"]["disks"][1].contains("disk"));  // an empty slice, omitempty
  CHECK(j["fsFreezeStatus"] == "thawed");
}

TEST_CASE(
    "GetGuestInfo with nothing known: the empty shapes KubeVirt writes (os {}, timezone ', 0', "
    "disks null)") {
  const json j = guest_info_json({});
  CHECK(j == json::parse(R"({"os": {}, "timezone": ", 0", "fsInfo": {"disks": null}})"));
  CHECK(guest_users_json({}) == json::array());
  CHECK(guest_filesystems_json({}) == json::array());
}

TEST_CASE("GetGuestInfo lists at most 10 users and filesystems, GetUsers/GetFilesystems all") {
  auto c = sample();
  c.users = json::array();
  for (int i = 0; i < 12; ++i)
    c.users.push_back({{"user", "u" + std::to_string(i)}, {"login-time", 1.0}});
  CHECK(guest_info_json(c)["userList"].size() == 10);
  CHECK(guest_users_json(c).size() == 12);
}

TEST_CASE(
    "the domain: the agent channel's state, OS info, interfaces without lo (IPv4 first), freeze "
    "status") {
  const auto c = sample();
  DomainDocument d;
  d.vmi_name = "vm";
  d.vmi_namespace = "ns";
  d.state = events::DomainState::Running;
  d.reason = events::StateReason::Booted;
  const json before = to_domain_json(d);
  CHECK(before["Spec"]["Devices"]["Channels"][0]["Target"] ==
        json::parse(
            R"({"Name": "org.qemu.guest_agent.0", "Type": "virtio", "State": "disconnected"})"));
  CHECK(before["Status"]["Interfaces"].is_null());
  d.agent_state = "connected";
  d.os_info = guest_os_info(c);
  d.guest_interfaces = guest_interfaces(c);
  d.fs_freeze_status = c.fs_freeze;
  const json j = to_domain_json(d);
  CHECK(j["Spec"]["Devices"]["Channels"][0]["Target"]["State"] == "connected");
  CHECK(j["Status"]["OSInfo"]["Name"] == "Debian GNU/Linux");
  CHECK(j["Status"]["OSInfo"]["KernelRelease"] == "6.1.0-18-amd64");
  CHECK(j["Status"]["Interfaces"] == json::parse(R"([{"Mac": "02:42:ac:11:00:02", "Ip": "10.0.2.2",
      "IPs": ["fe80::42:acff:fe11:2", "10.0.2.2"], "InterfaceName": "eth0"}])"));
  CHECK(j["Status"]["FSFreezeStatus"]["Status"] == "thawed");
}

}  // namespace
}  // namespace chl::kubevirt

#include "kubevirt/guest_info_json.hpp"

#include <cmath>
#include <cstdint>
#include <string>

namespace chl::kubevirt {

using nlohmann::json;

namespace {

std::string str(const json& o, const char* key) {
  if (!o.is_object() || !o.contains(key) || !o[key].is_string()) return {};
  return o[key].get<std::string>();
}
std::int64_t num(const json& o, const char* key) {
  if (!o.is_object() || !o.contains(key) || !o[key].is_number()) return 0;
  return o[key].get<std::int64_t>();
}

}  // namespace

json guest_users_json(const guest_agent::GuestCache& c, int limit) {
  json out = json::array();
  if (!c.users.is_array()) return out;
  for (const auto& u : c.users) {
    if (limit >= 0 && static_cast<int>(out.size()) >= limit) break;
    json j = {{"userName", str(u, "user")}};
    if (auto d = str(u, "domain"); !d.empty()) j["domain"] = d;
    // qemu-ga: seconds (a double); libvirt: whole milliseconds; KubeVirt: back to seconds.
    double seconds = 0;
    if (u.is_object() && u.contains("login-time") && u["login-time"].is_number())
      seconds = std::floor(u["login-time"].get<double>() * 1000.0) / 1000.0;
    if (seconds != 0) j["loginTime"] = seconds;
    out.push_back(std::move(j));
  }
  return out;
}

json guest_filesystems_json(const guest_agent::GuestCache& c, int limit) {
  json out = json::array();
  if (!c.fs_info.is_array()) return out;
  for (const auto& f : c.fs_info) {
    if (limit >= 0 && static_cast<int>(out.size()) >= limit) break;
    json j = {{"diskName", str(f, "name")},
              {"mountPoint", str(f, "mountpoint")},
              {"fileSystemType", str(f, "type")},
              {"usedBytes", num(f, "used-bytes")},
              {"totalBytes", num(f, "total-bytes")}};
    json disks = json::array();
    if (f.is_object() && f.contains("disk") && f["disk"].is_array())
      for (const auto& d : f["disk"]) {
        json dj = {{"busType", str(d, "bus-type")}};
        if (auto s = str(d, "serial"); !s.empty()) dj["serial"] = s;
        disks.push_back(std::move(dj));
      }
    if (!disks.empty()) j["disk"] = std::move(disks);
    out.push_back(std::move(j));
  }
  return out;
}

GuestOsInfo guest_os_info(const guest_agent::GuestCache& c) {
  const json& o = c.os_info;
  return {str(o, "name"),       str(o, "kernel-release"), str(o, "version"), str(o, "pretty-name"),
          str(o, "version-id"), str(o, "kernel-version"), str(o, "machine"), str(o, "id")};
}

std::vector<GuestInterfaceStatus> guest_interfaces(const guest_agent::GuestCache& c) {
  std::vector<GuestInterfaceStatus> out;
  if (!c.interfaces.is_array()) return out;
  for (const auto& i : c.interfaces) {
    GuestInterfaceStatus s;
    s.interface_name = str(i, "name");
    if (s.interface_name == "lo") continue;
    s.mac = str(i, "hardware-address");
    if (i.is_object() && i.contains("ip-addresses") && i["ip-addresses"].is_array())
      for (const auto& a : i["ip-addresses"]) {
        const std::string ip = str(a, "ip-address");
        if (s.ip.empty() && str(a, "ip-address-type") == "ipv4") s.ip = ip;
        s.ips.push_back(ip);
      }
    if (s.ip.empty() && !s.ips.empty()) s.ip = s.ips.front();
    out.push_back(std::move(s));
  }
  return out;
}

json guest_info_json(const guest_agent::GuestCache& c) {
  json j = json::object();
  if (auto v = str(c.info, "version"); !v.empty()) j["guestAgentVersion"] = v;
  json cmds = json::array();
  if (c.info.is_object() && c.info.contains("supported_commands") &&
      c.info["supported_commands"].is_array())
    for (const auto& cmd : c.info["supported_commands"]) {
      json e = {{"name", str(cmd, "name")}};
      if (cmd.is_object() && cmd.value("enabled", false)) e["enabled"] = true;
      cmds.push_back(std::move(e));
    }
  if (!cmds.empty()) j["supportedCommands"] = std::move(cmds);
  if (auto h = str(c.host_name, "host-name"); !h.empty()) j["hostname"] = h;
  const GuestOsInfo os = guest_os_info(c);
  json osj = json::object();
  auto put = [&](const char* k, const std::string& v) {
    if (!v.empty()) osj[k] = v;
  };
  put("name", os.name);
  put("kernelRelease", os.kernel_release);
  put("version", os.version);
  put("prettyName", os.pretty_name);
  put("versionId", os.version_id);
  put("kernelVersion", os.kernel_version);
  put("machine", os.machine);
  put("id", os.id);
  j["os"] = std::move(osj);
  // fmt.Sprintf("%s, %d", Zone, Offset): ", 0" when the agent has told nothing.
  j["timezone"] = str(c.timezone, "zone") + ", " + std::to_string(num(c.timezone, "offset"));
  if (json users = guest_users_json(c, 10); !users.empty()) j["userList"] = std::move(users);
  json fs = guest_filesystems_json(c, 10);
  j["fsInfo"] = {{"disks", fs.empty() ? json(nullptr) : fs}};
  if (!c.fs_freeze.empty()) j["fsFreezeStatus"] = c.fs_freeze;
  return j;
}

}  // namespace chl::kubevirt

// A plan's preparations as JSON (`ch-launcher plan`, the command socket's status): each step's
// kind and the fields it has.
#include "launcher/plan.hpp"

namespace chl::launcher {

const char* to_string(PreparationKind k) {
  switch (k) {
    case PreparationKind::CreateEmptyDisk:
      return "create-empty-disk";
    case PreparationKind::ConvertContainerDisk:
      return "convert-container-disk";
    case PreparationKind::CreateOverlay:
      return "create-overlay";
    case PreparationKind::CreateHostDisk:
      return "create-host-disk";
    case PreparationKind::WriteCloudInit:
      return "write-cloud-init";
    case PreparationKind::WriteConfigDisk:
      return "write-config-disk";
    case PreparationKind::FindFirmware:
      return "find-firmware";
    case PreparationKind::WaitVirtiofsSocket:
      return "wait-virtiofs-socket";
  }
  return "?";
}

nlohmann::json preparations_json(const LaunchPlan& plan) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& p : plan.preparations) {
    nlohmann::json j;
    j["kind"] = to_string(p.kind);
    auto put = [&](const char* key, const std::string& v) {
      if (!v.empty()) j[key] = v;
    };
    put("volume", p.volume);
    put("source", p.source);
    put("target", p.target);
    if (p.size_bytes) j["size_bytes"] = p.size_bytes;
    put("format", p.format);
    put("volume_label", p.volume_label);
    put("datasource", p.datasource);
    put("user_data", p.user_data);
    put("network_data", p.network_data);
    put("user_data_file", p.user_data_file);
    put("network_data_file", p.network_data_file);
    put("instance_id", p.instance_id);
    put("hostname", p.hostname);
    put("uuid", p.uuid);
    put("firmware", p.firmware);
    arr.push_back(std::move(j));
  }
  return arr;
}

}  // namespace chl::launcher

// The rules for spec.volumes and spec.networks.
#include <algorithm>
#include <array>
#include <set>

#include "vmi/checker.hpp"

namespace chl::vmi {

void Checker::check_volumes() {
  std::map<std::string, std::string> names;
  static constexpr std::array<Feature, 13> kFeature{Feature::VolumeContainerDisk,
                                                    Feature::VolumeEmptyDisk,
                                                    Feature::VolumePvc,
                                                    Feature::VolumeDataVolume,
                                                    Feature::VolumeEphemeral,
                                                    Feature::VolumeHostDisk,
                                                    Feature::VolumeCloudInitNoCloud,
                                                    Feature::VolumeCloudInitConfigDrive,
                                                    Feature::VolumeSecret,
                                                    Feature::VolumeConfigMap,
                                                    Feature::VolumeServiceAccount,
                                                    Feature::VolumeDownwardApi,
                                                    Feature::VolumeOther};
  for (std::size_t i = 0; i < vmi_.spec.volumes.size(); ++i) {
    const Volume& v = vmi_.spec.volumes[i];
    const std::string p = "spec.volumes[" + std::to_string(i) + "]";
    check_label(v.name, p + ".name");
    unique(names, v.name, "volumes[" + std::to_string(i) + "]", p + ".name");
    if (v.kind_count == 0) {
      add(p,
          "missing source: set one of containerDisk, emptyDisk, persistentVolumeClaim, "
          "dataVolume, "
          "hostDisk, cloudInitNoCloud, cloudInitConfigDrive, secret, configMap, serviceAccount");
      continue;
    }
    if (v.kind_count > 1) {
      add(p, "set only one volume source");
      continue;
    }
    const std::string sp =
        p + "." + (v.kind == VolumeKind::Other ? v.other_kind : to_string(v.kind));
    require(kFeature[static_cast<std::size_t>(v.kind)], sp);
    switch (v.kind) {
      case VolumeKind::ContainerDisk:
        if (v.image.empty()) add(sp + ".image", "required");
        if (has_dotdot_component(v.image_path))
          add(sp + ".path", "must stay inside the image (no '..')");
        break;
      case VolumeKind::EmptyDisk:
        disk_size(v.capacity, sp + ".capacity", true);
        break;
      case VolumeKind::PersistentVolumeClaim:
      case VolumeKind::Ephemeral:
        if (v.claim_name.empty())
          add(sp + (v.kind == VolumeKind::Ephemeral ? ".persistentVolumeClaim" : "") +
                  ".claimName",
              "required");
        break;
      case VolumeKind::DataVolume:
        if (v.claim_name.empty()) add(sp + ".name", "required");
        break;
      case VolumeKind::HostDisk:
        if (v.host_path.empty())
          add(sp + ".path", "required");
        else if (v.host_path[0] != '/')
          add(sp + ".path", "\"" + v.host_path + "\" must be an absolute path");
        else if (has_dotdot_component(v.host_path))
          add(sp + ".path", "\"" + v.host_path + "\" must not contain '..'");
        if (v.host_disk_type != "Disk" && v.host_disk_type != "DiskOrCreate") {
          add(sp + ".type",
              (v.host_disk_type.empty() ? std::string("required")
                                        : "unknown type \"" + v.host_disk_type + "\"") +
                  "; expected Disk or DiskOrCreate");
        }
        disk_size(v.capacity, sp + ".capacity", v.host_disk_type == "DiskOrCreate");
        break;
      case VolumeKind::CloudInitNoCloud:
      case VolumeKind::CloudInitConfigDrive:
        if (v.cloud_init.user_data.empty() && v.cloud_init.user_data_secret.empty() &&
            v.cloud_init.network_data.empty() && v.cloud_init.network_data_secret.empty()) {
          add(sp, "set userData, userDataBase64 or secretRef");
        }
        break;
      case VolumeKind::Secret:
        if (v.ref_name.empty()) add(sp + ".secretName", "required");
        break;
      case VolumeKind::ConfigMap:
        if (v.ref_name.empty()) add(sp + ".name", "required");
        break;
      default:
        break;
    }
  }
}

void Checker::check_networks() {
  std::map<std::string, std::string> names;
  int pods = 0;
  const auto& ifaces = vmi_.spec.domain.devices.interfaces;
  for (std::size_t i = 0; i < vmi_.spec.networks.size(); ++i) {
    const Network& n = vmi_.spec.networks[i];
    const std::string p = "spec.networks[" + std::to_string(i) + "]";
    check_label(n.name, p + ".name");
    unique(names, n.name, "networks[" + std::to_string(i) + "]", p + ".name");
    switch (n.kind) {
      case NetworkKind::None:
        add(p, "missing source: set pod or multus");
        break;
      case NetworkKind::Pod:
        if (++pods == 2) add(p + ".pod", "only one pod network is allowed");
        break;
      case NetworkKind::Multus:
        require(Feature::NetworkMultus, p + ".multus");
        if (n.multus_network_name.empty()) add(p + ".multus.networkName", "required");
        break;
    }
    if (!n.name.empty() && std::none_of(ifaces.begin(), ifaces.end(),
                                        [&](const Interface& x) { return x.name == n.name; })) {
      add(p + ".name", "no interface named \"" + n.name + "\" in spec.domain.devices.interfaces");
    }
  }
}

}  // namespace chl::vmi

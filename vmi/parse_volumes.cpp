// spec.volumes (with their cloud-init sources) and spec.networks.
#include "vmi/parse_support.hpp"

namespace chl::vmi {
namespace {

void parse_cloud_init(Reader& r, const YAML::Node& n, const std::string& p, CloudInitData& c) {
  r.unknown_keys(n, p,
                 {"userData", "userDataBase64", "secretRef", "networkData", "networkDataBase64",
                  "networkDataSecretRef"});
  auto text = [&](const char* plain, const char* b64, std::string& out) {
    auto a = r.str(n, plain, p);
    auto b = r.str(n, b64, p);
    if (a && b) r.problem(p, std::string("set ") + plain + " or " + b64 + ", not both", n);
    if (a) out = *a;
    if (b && !base64_decode(*b, out)) r.problem(Reader::join(p, b64), "not valid base64", n[b64]);
  };
  text("userData", "userDataBase64", c.user_data);
  text("networkData", "networkDataBase64", c.network_data);
  bool present = false;
  YAML::Node s = r.object(n, "secretRef", p, present);
  if (present) c.user_data_secret = r.str(s, "name", p + ".secretRef").value_or("");
  s = r.object(n, "networkDataSecretRef", p, present);
  if (present) c.network_data_secret = r.str(s, "name", p + ".networkDataSecretRef").value_or("");
}

}  // namespace

void parse_volume(Reader& r, const YAML::Node& n, const std::string& p, Volume& v) {
  v.name = r.str(n, "name", p).value_or("");
  struct Kind {
    const char* key;
    VolumeKind kind;
  };
  static constexpr std::array<Kind, 17> kKinds{{
      {"containerDisk", VolumeKind::ContainerDisk},
      {"emptyDisk", VolumeKind::EmptyDisk},
      {"persistentVolumeClaim", VolumeKind::PersistentVolumeClaim},
      {"dataVolume", VolumeKind::DataVolume},
      {"ephemeral", VolumeKind::Ephemeral},
      {"hostDisk", VolumeKind::HostDisk},
      {"cloudInitNoCloud", VolumeKind::CloudInitNoCloud},
      {"cloudInitConfigDrive", VolumeKind::CloudInitConfigDrive},
      {"secret", VolumeKind::Secret},
      {"configMap", VolumeKind::ConfigMap},
      {"serviceAccount", VolumeKind::ServiceAccount},
      {"downwardAPI", VolumeKind::DownwardApi},
      {"sysprep", VolumeKind::Other},
      {"downwardMetrics", VolumeKind::Other},
      {"memoryDump", VolumeKind::Other},
      {"hotplugVolume", VolumeKind::Other},
      {"containerPath", VolumeKind::Other},
  }};
  for (const auto& kv : n) {
    const std::string key = kv.first.Scalar();
    if (key == "name") continue;
    auto it =
        std::find_if(kKinds.begin(), kKinds.end(), [&](const Kind& k) { return key == k.key; });
    if (it == kKinds.end()) {
      CHL_LOG_DEBUG("ignoring unknown field {}.{}", p, key);
      continue;
    }
    ++v.kind_count;
    v.kind = it->kind;
    if (v.kind == VolumeKind::Other) v.other_kind = key;
    const YAML::Node& s = kv.second;
    const std::string sp = p + "." + key;
    if (s.IsNull()) continue;
    if (!r.expect_map(s, sp)) continue;
    switch (it->kind) {
      case VolumeKind::ContainerDisk:
        r.unknown_keys(s, sp, {"image", "path", "imagePullPolicy", "imagePullSecret"});
        v.image = r.str(s, "image", sp).value_or("");
        v.image_path = r.str(s, "path", sp).value_or("");
        break;
      case VolumeKind::EmptyDisk:
        r.unknown_keys(s, sp, {"capacity"});
        v.capacity = r.quantity(s, "capacity", sp);
        break;
      case VolumeKind::PersistentVolumeClaim:
        r.unknown_keys(s, sp, {"claimName", "readOnly", "hotpluggable"});
        v.claim_name = r.str(s, "claimName", sp).value_or("");
        v.read_only = r.boolean(s, "readOnly", sp).value_or(false);
        break;
      case VolumeKind::DataVolume:
        r.unknown_keys(s, sp, {"name", "hotpluggable"});
        v.claim_name = r.str(s, "name", sp).value_or("");
        break;
      case VolumeKind::Ephemeral: {
        r.unknown_keys(s, sp, {"persistentVolumeClaim"});
        bool present = false;
        YAML::Node pvc = r.object(s, "persistentVolumeClaim", sp, present);
        if (present) {
          v.claim_name = r.str(pvc, "claimName", sp + ".persistentVolumeClaim").value_or("");
          v.read_only = r.boolean(pvc, "readOnly", sp + ".persistentVolumeClaim").value_or(false);
        }
        break;
      }
      case VolumeKind::HostDisk:
        r.unknown_keys(s, sp, {"path", "type", "capacity", "shared"});
        v.host_path = r.str(s, "path", sp).value_or("");
        v.host_disk_type = r.str(s, "type", sp).value_or("");
        v.capacity = r.quantity(s, "capacity", sp);
        break;
      case VolumeKind::CloudInitNoCloud:
      case VolumeKind::CloudInitConfigDrive:
        parse_cloud_init(r, s, sp, v.cloud_init);
        break;
      case VolumeKind::Secret:
        r.unknown_keys(s, sp, {"secretName", "optional", "volumeLabel"});
        v.ref_name = r.str(s, "secretName", sp).value_or("");
        v.volume_label = r.str(s, "volumeLabel", sp).value_or("");
        break;
      case VolumeKind::ConfigMap:
        r.unknown_keys(s, sp, {"name", "optional", "volumeLabel"});
        v.ref_name = r.str(s, "name", sp).value_or("");
        v.volume_label = r.str(s, "volumeLabel", sp).value_or("");
        break;
      case VolumeKind::ServiceAccount:
        r.unknown_keys(s, sp, {"serviceAccountName"});
        v.ref_name = r.str(s, "serviceAccountName", sp).value_or("");
        break;
      default:
        break;
    }
  }
}

void parse_network(Reader& r, const YAML::Node& n, const std::string& p, Network& net) {
  r.unknown_keys(n, p, {"name", "pod", "multus"});
  net.name = r.str(n, "name", p).value_or("");
  bool pod = false, multus = false;
  YAML::Node pn = r.object(n, "pod", p, pod);
  if (!pod && n["pod"].IsDefined() && n["pod"].IsNull()) pod = true;
  YAML::Node mn = r.object(n, "multus", p, multus);
  if (pod && multus) r.problem(p, "set either pod or multus, not both", n);
  if (pod) {
    net.kind = NetworkKind::Pod;
    if (pn.IsDefined()) {
      r.unknown_keys(pn, p + ".pod", {"vmNetworkCIDR", "vmIPv6NetworkCIDR"});
      net.vm_network_cidr = r.str(pn, "vmNetworkCIDR", p + ".pod").value_or("");
    }
  } else if (multus) {
    net.kind = NetworkKind::Multus;
    r.unknown_keys(mn, p + ".multus", {"networkName", "default"});
    net.multus_network_name = r.str(mn, "networkName", p + ".multus").value_or("");
    net.multus_default = r.boolean(mn, "default", p + ".multus").value_or(false);
  }
}

}  // namespace chl::vmi

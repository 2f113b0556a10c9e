// `ch-launcher cloud-init`: write the cloud-init media (NoCloud or ConfigDrive) for a VMI's
// cloud-init volume, as ISO 9660 or vfat, with the meta-data KubeVirt would write.
#include "disks/cloud_init.hpp"

#include <cstdio>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/registry.hpp"
#include "vmi/parser.hpp"

namespace {

namespace disks = chl::disks;

constexpr const char* kDefaultSecretRoot =
    "/var/run/kubevirt-private/secret";  // KubeVirt's mount point

bool is_cloud_init(const chl::vmi::Volume& v) {
  return v.kind == chl::vmi::VolumeKind::CloudInitNoCloud ||
         v.kind == chl::vmi::VolumeKind::CloudInitConfigDrive;
}

int fail(const std::string& msg, int code = 1) {
  std::fprintf(stderr, "ch-launcher cloud-init: %s\n", msg.c_str());
  return code;
}

int run(const std::vector<std::string>& argv) {
  chl::cli::Args args({"--vmi", "--volume", "--out", "--format", "--secret-dir"}, {});
  if (!args.parse(argv)) return chl::cli::usage_error("cloud-init", args.error());
  auto vmi_file = args.get("--vmi");
  auto out = args.get("--out");
  if (!vmi_file) return chl::cli::usage_error("cloud-init", "--vmi FILE is required");
  if (!out) return chl::cli::usage_error("cloud-init", "--out IMG is required");
  auto format = disks::parse_cloud_init_format(
      args.get_or("--format", std::string(to_string(disks::kDefaultCloudInitFormat))));
  if (!format) return chl::cli::usage_error("cloud-init", format.error().message());

  auto text = chl::vmi::read_manifest(*vmi_file);
  if (!text) return fail(text.error().message());
  auto parsed = chl::vmi::parse_vmi(*text);
  if (parsed.fatal || !parsed.problems.empty()) {
    for (const auto& p : parsed.problems) std::fprintf(stderr, "%s\n", chl::vmi::to_string(p).c_str());
    return fail(*vmi_file + ": not a valid VirtualMachineInstance", 2);
  }
  const chl::vmi::Vmi& vmi = parsed.vmi;

  // The volume: the one named, or the only cloud-init volume.
  const chl::vmi::Volume* volume = nullptr;
  std::string names;
  for (const auto& v : vmi.spec.volumes) {
    if (!is_cloud_init(v)) continue;
    names += (names.empty() ? "" : ", ") + v.name;
    if (auto want = args.get("--volume"); want ? v.name == *want : volume == nullptr) volume = &v;
  }
  if (auto want = args.get("--volume"); want && !volume)
    return fail("no cloud-init volume named '" + *want +
                "' (cloud-init volumes: " + (names.empty() ? "none" : names) + ")");
  if (!volume) return fail("the VMI has no cloudInitNoCloud or cloudInitConfigDrive volume");
  if (!args.get("--volume") && names.find(", ") != std::string::npos)
    return fail("the VMI has several cloud-init volumes (" + names + "): choose one with --volume");

  disks::CloudInitSource src;
  src.user_data = volume->cloud_init.user_data;  // the model has already decoded *Base64
  src.network_data = volume->cloud_init.network_data;
  src.user_data_secret_ref = !volume->cloud_init.user_data_secret.empty();
  src.network_data_secret_ref = !volume->cloud_init.network_data_secret.empty();
  src.secret_dir =
      std::filesystem::path(args.get_or("--secret-dir", kDefaultSecretRoot)) / volume->name;
  auto payload = disks::resolve_cloud_init_source(src);
  if (!payload) return fail("volume '" + volume->name + "': " + payload.error().message());

  const std::string hostname = disks::kubevirt_hostname(vmi.metadata.name, vmi.spec.hostname);
  const std::string instance_id =
      disks::kubevirt_instance_id(vmi.spec.domain.firmware.uuid, vmi.metadata.uid);
  disks::CloudInitWriteOptions wo;
  wo.format = *format;
  chl::common::Status st;
  const bool nocloud = volume->kind == chl::vmi::VolumeKind::CloudInitNoCloud;
  if (nocloud) {
    disks::NoCloudData d;
    d.user_data = std::move(payload->user_data);
    d.network_config = std::move(payload->network_data);
    d.meta_data = disks::nocloud_meta_data(instance_id, hostname);
    st = disks::write_nocloud_image(*out, std::move(d), wo);
  } else {
    disks::ConfigDriveData d;
    d.user_data = std::move(payload->user_data);
    d.network_data_json = std::move(payload->network_data);
    d.meta_data_json = disks::config_drive_meta_data(vmi.metadata.name, vmi.metadata.namespace_,
                                                     instance_id, hostname);
    st = disks::write_config_drive_image(*out, std::move(d), wo);
  }
  if (!st) return fail(st.error().message());
  std::printf("wrote %s: %s, %s, label %s, volume '%s'\n", out->c_str(),
              nocloud ? "NoCloud" : "ConfigDrive", std::string(to_string(*format)).c_str(),
              std::string(nocloud ? disks::kNoCloudLabel : disks::kConfigDriveLabel).c_str(),
              volume->name.c_str());
  return 0;
}

chl::cli::Registrar reg(
    {"cloud-init", "write the cloud-init disk (NoCloud or ConfigDrive) of a VMI",
     "usage: ch-launcher cloud-init --vmi FILE [--volume NAME] --out IMG [--format iso|vfat] "
     "[--secret-dir DIR]\n"
     "  Writes the media for the VMI's cloud-init volume (the only one when --volume is omitted):\n"
     "  NoCloud (label cidata: user-data, meta-data, network-config) or ConfigDrive (label "
     "config-2:\n"
     "  openstack/latest/{user_data,meta_data.json,network_data.json}). meta-data as KubeVirt "
     "writes\n"
     "  it: instance-id = spec.domain.firmware.uuid (else metadata.uid), hostname = spec.hostname "
     "or\n"
     "  the name. Secrets (secretRef, networkDataSecretRef) are read from "
     "DIR/<volume>/userdata|userData\n"
     "  and networkdata|networkData (default DIR: /var/run/kubevirt-private/secret).\n"
     "  --format: iso (ISO 9660 with Joliet and Rock Ridge, the default) or vfat. IMG must not "
     "exist;\n"
     "  it appears only when complete. user-data is capped at 16 MiB.",
     run});

}  // namespace

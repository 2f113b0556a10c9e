#pragma once
// cloud-init media for a VMI, the way KubeVirt makes them (pkg/cloud-init), without external
// tools: NoCloud (label "cidata": user-data, meta-data, network-config) and ConfigDrive (label
// "config-2": openstack/latest/{user_data, meta_data.json, network_data.json}), written as
// ISO 9660 (Joliet + Rock Ridge) or FAT, atomically and never over an existing file.
//
// The API takes plain values, not the VMI model: the caller maps spec.volumes[].cloudInitNoCloud
// / cloudInitConfigDrive onto CloudInitSource and the VMI's identity onto the meta-data helpers.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "disks/cloud_init_image.hpp"

namespace chl::disks {

enum class CloudInitFormat { iso9660, vfat };
// ISO 9660, like KubeVirt. A real kernel (Debian's, under QEMU) finds it by label with blkid
// and with busybox findfs, and reads every file (tests/guests/test_linux_guest.cpp); vfat too.
inline constexpr CloudInitFormat kDefaultCloudInitFormat = CloudInitFormat::iso9660;
// "iso", "iso9660" or "vfat", "fat".
common::Result<CloudInitFormat> parse_cloud_init_format(std::string_view name);
std::string_view to_string(CloudInitFormat f);

inline constexpr std::size_t kMaxUserDataBytes = 16u << 20;     // 16 MiB, after base64 decoding
inline constexpr std::size_t kMaxNetworkDataBytes = 16u << 20;  // same bound for network data
inline constexpr std::size_t kMaxMetaDataBytes = 1u << 20;

inline constexpr std::string_view kNoCloudLabel = "cidata";
inline constexpr std::string_view kConfigDriveLabel = "config-2";

// One cloudInitNoCloud or cloudInitConfigDrive volume source, as plain fields.
struct CloudInitSource {
  std::string user_data;                 // userData
  std::string user_data_base64;          // userDataBase64
  std::string network_data;              // networkData
  std::string network_data_base64;       // networkDataBase64
  bool user_data_secret_ref = false;     // secretRef (a.k.a. userDataSecretRef) is set
  bool network_data_secret_ref = false;  // networkDataSecretRef is set
  // Where the referenced secret is mounted, as KubeVirt does: <secret root>/<volume name>, holding
  // the files `userdata` or `userData`, `networkdata` or `networkData`.
  std::filesystem::path secret_dir;
};

struct CloudInitPayload {
  std::string user_data;
  std::string network_data;
};

// KubeVirt's precedence: a secret's value replaces the inline one; then raw before base64. At
// least one of user and network data must result. Sizes capped (kMax*Bytes), errors name the field.
common::Result<CloudInitPayload> resolve_cloud_init_source(const CloudInitSource& src);

// Standard base64 (RFC 4648 alphabet); whitespace ignored, padding optional, anything else an
// error.
common::Result<std::string> decode_base64(std::string_view text);

// The VMI's hostname as KubeVirt derives it: spec.hostname if set, else the name up to the
// first '.', cut to 63 characters.
std::string kubevirt_hostname(std::string_view vmi_name, std::string_view spec_hostname = {});
// The instance id: spec.domain.firmware.uuid when set (what KubeVirt uses; stable across restarts
// of the same VM), else the VMI's metadata.uid.
std::string kubevirt_instance_id(std::string_view firmware_uuid, std::string_view vmi_uid);

// NoCloud meta-data as KubeVirt writes it: JSON (valid YAML) {"instance-id":…,"local-hostname":…}.
std::string nocloud_meta_data(std::string_view instance_id, std::string_view hostname);
// ConfigDrive meta_data.json as KubeVirt writes it: {"instance_id":"<name>.<namespace>",
// "hostname":…,"uuid":…} (instance_id is `name` alone when `namespace_` is empty).
std::string config_drive_meta_data(std::string_view name, std::string_view namespace_,
                                   std::string_view uuid, std::string_view hostname);

struct NoCloudData {
  std::string user_data;       // "user-data" (always written, may be empty)
  std::string meta_data;       // "meta-data"
  std::string network_config;  // "network-config", written only when not empty
};
struct ConfigDriveData {
  std::string user_data;          // openstack/latest/user_data
  std::string meta_data_json;     // openstack/latest/meta_data.json
  std::string network_data_json;  // openstack/latest/network_data.json, only when not empty
};

// The files on the media (checks the size caps).
common::Result<std::vector<MediaFile>> nocloud_files(NoCloudData data);
common::Result<std::vector<MediaFile>> config_drive_files(ConfigDriveData data);

// The timestamp the launcher puts on the media it generates (cloud-init, config disks):
// 2000-01-01T00:00:00Z, a constant, so that the media are a function of the VMI alone and a live
// migration's target rebuilds them byte-identical to the source's (docs/kubevirt/migration.md,
// "Live migration"); the guest sees the same disk before and after the switch.
inline constexpr std::int64_t kGeneratedMediaMtime = 946684800;

struct CloudInitWriteOptions {
  CloudInitFormat format = kDefaultCloudInitFormat;
  std::int64_t mtime = -1;  // timestamps on the media; -1 = now
  // fsync before the image appears under its name. Off by default: the media are regenerated
  // from the spec at every start, so after a host crash nothing depends on them, while an fsync
  // costs more than building the image (see docs/disks/cloud-init.md). Atomicity does not depend on
  // it: the name appears only once the image is complete.
  bool durable = false;
};

// Lay out a filesystem holding `files`, labelled `label`, in `format` (borrows `files`).
common::Result<ImagePlan> plan_cloud_init_media(const std::vector<MediaFile>& files,
                                                std::string_view label, CloudInitFormat format,
                                                std::int64_t mtime);

// Build and write the media to `out` (which must not exist).
common::Status write_nocloud_image(const std::filesystem::path& out, NoCloudData data,
                                   const CloudInitWriteOptions& opts = {});
common::Status write_config_drive_image(const std::filesystem::path& out, ConfigDriveData data,
                                        const CloudInitWriteOptions& opts = {});

}  // namespace chl::disks

#include "disks/cloud_init.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <ctime>

#include "common/syscall.hpp"
#include "common/unique_fd.hpp"
#include "disks/cloud_init_iso9660.hpp"
#include "disks/cloud_init_vfat.hpp"

namespace chl::disks {

using common::fail;
using common::fail_errno;
using common::Result;
using common::Status;

Result<CloudInitFormat> parse_cloud_init_format(std::string_view name) {
  if (name == "iso" || name == "iso9660") return CloudInitFormat::iso9660;
  if (name == "vfat" || name == "fat") return CloudInitFormat::vfat;
  return fail(std::errc::invalid_argument,
              "unknown cloud-init media format '" + std::string(name) + "' (iso or vfat)");
}

std::string_view to_string(CloudInitFormat f) {
  return f == CloudInitFormat::iso9660 ? "iso9660" : "vfat";
}

Result<std::string> decode_base64(std::string_view text) {
  static const std::array<int, 256> table = [] {
    std::array<int, 256> t{};
    t.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(alphabet[i])] = i;
    return t;
  }();
  std::string out;
  out.reserve(text.size() / 4 * 3);
  std::uint32_t acc = 0;
  int bits = 0, quantum = 0;
  std::size_t padding = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    int v = table[c];
    if (v < 0 || padding)
      return fail(std::errc::invalid_argument, "invalid base64 at offset " + std::to_string(i));
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    quantum = (quantum + 1) % 4;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if (quantum == 1)
    return fail(std::errc::invalid_argument, "invalid base64: truncated final group");
  if (padding > 2 || (padding && (quantum + padding) % 4 != 0))
    return fail(std::errc::invalid_argument, "invalid base64: wrong padding");
  return out;
}

namespace {

// Read a whole regular file of at most `cap` bytes.
Result<std::string> read_capped(const std::filesystem::path& p, std::size_t cap) {
  common::UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail_errno("opening '" + p.string() + "'");
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = common::retry_eintr([&] { return ::read(fd.get(), buf, sizeof buf); });
    if (n < 0) return fail_errno("reading '" + p.string() + "'");
    if (n == 0) break;
    if (out.size() + static_cast<std::size_t>(n) > cap)
      return fail(std::errc::file_too_large, "'" + p.string() + "' is larger than the limit of " +
                                                 std::to_string(cap) + " bytes");
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

// KubeVirt's readFirstFoundFileFromDir: the first of the names that exists.
Result<std::string> read_secret_key(const std::filesystem::path& dir,
                                    std::initializer_list<const char*> names, std::size_t cap) {
  std::string tried;
  for (const char* n : names) {
    auto p = dir / n;
    if (::access(p.c_str(), F_OK) != 0) {
      tried += (tried.empty() ? "" : ", ") + p.string();
      continue;
    }
    return read_capped(p, cap);
  }
  return fail(std::errc::no_such_file_or_directory, "none of " + tried + " exists");
}

Result<std::string> raw_or_base64(const std::string& raw, const std::string& b64, std::size_t cap,
                                  const char* field) {
  if (!raw.empty()) {
    if (raw.size() > cap)
      return fail(std::errc::file_too_large,
                  std::string(field) + " is " + std::to_string(raw.size()) +
                      " bytes, more than the limit of " + std::to_string(cap));
    return raw;
  }
  if (b64.empty()) return std::string();
  if (b64.size() / 4 * 3 > cap + 3)
    return fail(std::errc::file_too_large, std::string(field) +
                                               "Base64 decodes to more than the limit of " +
                                               std::to_string(cap) + " bytes");
  auto d = decode_base64(b64);
  if (!d) return tl::unexpected(d.error().wrap(std::string(field) + "Base64"));
  if (d->size() > cap)
    return fail(std::errc::file_too_large,
                std::string(field) + "Base64 decodes to " + std::to_string(d->size()) +
                    " bytes, more than the limit of " + std::to_string(cap));
  return d;
}

void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

Status check_size(const std::string& data, std::size_t cap, const char* what) {
  if (data.size() > cap)
    return fail(std::errc::file_too_large,
                std::string(what) + " is " + std::to_string(data.size()) +
                    " bytes, more than the limit of " + std::to_string(cap));
  return {};
}

std::int64_t effective_mtime(std::int64_t t) {
  return t >= 0 ? t : static_cast<std::int64_t>(std::time(nullptr));
}

Status write_files(const std::filesystem::path& out, const std::vector<MediaFile>& files,
                   std::string_view label, const CloudInitWriteOptions& opts) {
  const std::string what =
      "cloud-init media '" + out.string() + "' (" + std::string(to_string(opts.format)) + ")";
  auto plan = plan_cloud_init_media(files, label, opts.format, effective_mtime(opts.mtime));
  if (!plan) return tl::unexpected(plan.error().wrap(what));
  ImageWriteOptions w;
  w.durable = opts.durable;
  w.mode = 0644;
  if (auto s = write_image_file(out, *plan, w); !s) return tl::unexpected(s.error().wrap(what));
  return {};
}

}  // namespace

Result<CloudInitPayload> resolve_cloud_init_source(const CloudInitSource& src) {
  CloudInitSource s = src;
  if (s.user_data_secret_ref) {
    auto v = read_secret_key(s.secret_dir, {"userdata", "userData"}, kMaxUserDataBytes);
    if (!v) return tl::unexpected(v.error().wrap("cloud-init user data secret"));
    s.user_data = std::move(*v);
  }
  if (s.network_data_secret_ref) {
    auto v = read_secret_key(s.secret_dir, {"networkdata", "networkData"}, kMaxNetworkDataBytes);
    if (!v) return tl::unexpected(v.error().wrap("cloud-init network data secret"));
    s.network_data = std::move(*v);
  }
  CloudInitPayload p;
  CHL_TRY(p.user_data,
          raw_or_base64(s.user_data, s.user_data_base64, kMaxUserDataBytes, "userData"));
  CHL_TRY(p.network_data, raw_or_base64(s.network_data, s.network_data_base64, kMaxNetworkDataBytes,
                                        "networkData"));
  if (p.user_data.empty() && p.network_data.empty())
    return fail(std::errc::invalid_argument,
                "cloud-init: userData, userDataBase64, a user data secret, networkData or "
                "networkDataBase64 is required");
  return p;
}

std::string kubevirt_hostname(std::string_view vmi_name, std::string_view spec_hostname) {
  if (!spec_hostname.empty()) return std::string(spec_hostname);
  std::string_view h = vmi_name.substr(0, vmi_name.find('.'));
  return std::string(h.substr(0, 63));
}

std::string kubevirt_instance_id(std::string_view firmware_uuid, std::string_view vmi_uid) {
  return std::string(firmware_uuid.empty() ? vmi_uid : firmware_uuid);
}

std::string nocloud_meta_data(std::string_view instance_id, std::string_view hostname) {
  std::string out = "{\"instance-id\":";
  append_json_string(out, instance_id);
  if (!hostname.empty()) {
    out += ",\"local-hostname\":";
    append_json_string(out, hostname);
  }
  out += "}";
  return out;
}

std::string config_drive_meta_data(std::string_view name, std::string_view namespace_,
                                   std::string_view uuid, std::string_view hostname) {
  std::string out = "{\"instance_id\":";
  // "<name>.<namespace>"; a caller that already joined them passes an empty namespace.
  append_json_string(out, namespace_.empty() ? std::string(name)
                                             : std::string(name) + "." + std::string(namespace_));
  if (!hostname.empty()) {
    out += ",\"hostname\":";
    append_json_string(out, hostname);
  }
  if (!uuid.empty()) {
    out += ",\"uuid\":";
    append_json_string(out, uuid);
  }
  out += "}";
  return out;
}

Result<std::vector<MediaFile>> nocloud_files(NoCloudData data) {
  CHL_TRY_VOID(check_size(data.user_data, kMaxUserDataBytes, "user-data"));
  CHL_TRY_VOID(check_size(data.network_config, kMaxNetworkDataBytes, "network-config"));
  CHL_TRY_VOID(check_size(data.meta_data, kMaxMetaDataBytes, "meta-data"));
  std::vector<MediaFile> files;
  files.push_back({"user-data", std::move(data.user_data)});
  files.push_back({"meta-data", std::move(data.meta_data)});
  if (!data.network_config.empty())
    files.push_back({"network-config", std::move(data.network_config)});
  return files;
}

Result<std::vector<MediaFile>> config_drive_files(ConfigDriveData data) {
  CHL_TRY_VOID(check_size(data.user_data, kMaxUserDataBytes, "user_data"));
  CHL_TRY_VOID(check_size(data.network_data_json, kMaxNetworkDataBytes, "network_data.json"));
  CHL_TRY_VOID(check_size(data.meta_data_json, kMaxMetaDataBytes, "meta_data.json"));
  std::vector<MediaFile> files;
  files.push_back({"openstack/latest/user_data", std::move(data.user_data)});
  files.push_back({"openstack/latest/meta_data.json", std::move(data.meta_data_json)});
  if (!data.network_data_json.empty())
    files.push_back({"openstack/latest/network_data.json", std::move(data.network_data_json)});
  return files;
}

Result<ImagePlan> plan_cloud_init_media(const std::vector<MediaFile>& files, std::string_view label,
                                        CloudInitFormat format, std::int64_t mtime) {
  if (format == CloudInitFormat::iso9660) {
    Iso9660Options o;
    o.volume_id = std::string(label);
    o.mtime = mtime;
    return plan_iso9660(files, o);
  }
  VfatOptions o;
  o.label = std::string(label);
  o.mtime = mtime;
  return plan_vfat(files, o);
}

Status write_nocloud_image(const std::filesystem::path& out, NoCloudData data,
                           const CloudInitWriteOptions& opts) {
  auto files = nocloud_files(std::move(data));
  if (!files)
    return tl::unexpected(files.error().wrap("cloud-init NoCloud media '" + out.string() + "'"));
  return write_files(out, *files, kNoCloudLabel, opts);
}

Status write_config_drive_image(const std::filesystem::path& out, ConfigDriveData data,
                                const CloudInitWriteOptions& opts) {
  auto files = config_drive_files(std::move(data));
  if (!files)
    return tl::unexpected(
        files.error().wrap("cloud-init ConfigDrive media '" + out.string() + "'"));
  return write_files(out, *files, kConfigDriveLabel, opts);
}

}  // namespace chl::disks

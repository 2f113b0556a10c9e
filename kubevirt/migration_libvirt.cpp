#include "kubevirt/migration_libvirt.hpp"

#include <map>

#include "vmi/quantity.hpp"

namespace chl::kubevirt {
using Json = nlohmann::json;

std::vector<std::string> not_migratable_on_libvirt(const Json& vmi) {
  std::vector<std::string> why;
  const Json spec = vmi.value("spec", Json::object());
  const Json devices = spec.value("domain", Json::object()).value("devices", Json::object());
  std::map<std::string, Json> volumes;
  for (const auto& v : spec.value("volumes", Json::array())) volumes[v.value("name", "")] = v;
  std::map<std::string, Json> volume_status;
  for (const auto& v : vmi.value("status", Json::object()).value("volumeStatus", Json::array()))
    volume_status[v.value("name", "")] = v;
  const bool block =
      vmi.value("status", Json::object()).value("migrationMethod", "") == "BlockMigration";
  for (const auto& d : devices.value("disks", Json::array())) {
    const std::string name = d.value("name", "");
    const bool read_only = d.contains("cdrom") ||
                           d.value("disk", Json::object()).value("readonly", false) ||
                           d.value("lun", Json::object()).value("readonly", false);
    const auto vit = volumes.find(name);
    if (vit == volumes.end() || read_only) continue;
    const Json& v = vit->second;
    if (v.contains("hostDisk")) continue;
    if (v.contains("persistentVolumeClaim") || v.contains("dataVolume")) {
      const Json info = volume_status.count(name)
                            ? volume_status[name].value("persistentVolumeClaimInfo", Json::object())
                            : Json::object();
      const Json modes = info.value("accessModes", Json::array());
      if (std::find(modes.begin(), modes.end(), "ReadWriteMany") != modes.end()) continue;
    }
    why.push_back("volume " + name +
                  ": a writable disk that is not shared storage needs libvirt's block " +
                  "migration" + (block ? " (status.migrationMethod BlockMigration)" : "") +
                  ", which ch-launcher does not do yet");
  }
  return why;
}

common::Result<launcher::MigrationSend> libvirt_migration_send(const Json& vmi, const Json& options,
                                                               const std::string& proxy_dir,
                                                               std::uint64_t memory_kib) {
  const std::string uid = vmi.value("metadata", Json::object()).value("uid", "");
  launcher::MigrationSend m;
  // migrationproxy.SourceUnixFile(virtShareDir, key): <share>/migrationproxy/<key>-source.sock,
  // key <vmiUID> for libvirt (port 0) and <vmiUID>-49152 for QEMU's direct stream.
  m.destination = "unix:" + proxy_dir + "/" + uid + "-source.sock";
  m.migrate_uri = "unix://" + proxy_dir + "/" + uid + "-49152-source.sock";
  const Json o = options.is_object() ? options : Json::object();
  // Bandwidth: a quantity ("0Mi" unlimited, "64Mi"), libvirt's MiB/s (vcpu.QuantityToMebiByte).
  if (o.contains("Bandwidth") && o["Bandwidth"].is_string()) {
    auto b = vmi::parse_quantity(o["Bandwidth"].get<std::string>());
    if (!b || *b < 0)
      return common::fail(
          std::errc::invalid_argument,
          "MigrationOptions.Bandwidth: not a quantity: " + o["Bandwidth"].get<std::string>());
    m.bandwidth_mib = static_cast<std::uint64_t>(*b) >> 20;
  }
  m.progress_timeout_s = o.value("ProgressTimeout", std::int64_t{150});
  const std::int64_t per_gib = o.value("CompletionTimeoutPerGiB", std::int64_t{150});
  const std::uint64_t gib = std::max<std::uint64_t>(1, (memory_kib + (1ULL << 20) - 1) >> 20);
  if (per_gib > 0) m.completion_timeout_s = per_gib * static_cast<std::int64_t>(gib);
  m.allow_auto_converge = o.value("AllowAutoConverge", false);
  m.allow_post_copy = o.value("AllowPostCopy", false);
  // AllowWorkloadDisruption; KubeVirt versions without it took AllowPostCopy for it.
  m.allow_workload_disruption = o.value("AllowWorkloadDisruption", m.allow_post_copy);
  m.unsafe = o.value("UnsafeMigration", false);
  if (o.contains("ParallelMigrationThreads") && o["ParallelMigrationThreads"].is_number_unsigned())
    m.parallel_threads = o["ParallelMigrationThreads"].get<std::uint32_t>();
  return m;
}

}  // namespace chl::kubevirt

// libFuzzer target: the cloud-init writers with fuzzed inputs: volume sources (inline and
// base64 user/network data), the meta-data helpers, file names/contents/modes, labels,
// timestamps and both media formats (ISO 9660 + Joliet + Rock Ridge, FAT). Media are planned
// in memory and, for NoCloud/ConfigDrive, written into a scratch directory under /dev/shm,
// then removed.
// Properties checked: no crash/UB/leak; meta-data helpers give valid JSON; a plan's extents lie
// within the image and do not overlap; a failed write leaves nothing behind, a successful one
// leaves exactly the planned size.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "common/log.hpp"
#include "fuzz/fuzz_support.hpp"
#include "disks/cloud_init.hpp"
#include "disks/cloud_init_image.hpp"

namespace {

using chl::fuzz::require;

namespace fs = std::filesystem;


fs::path g_scratch;

bool valid_json(const std::string& s) { return nlohmann::json::accept(s); }

void check_plan(const chl::disks::ImagePlan& plan) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  for (const auto& e : plan.extents) {
    const std::uint64_t n = e.bytes().size();
    require(e.offset <= plan.size && n <= plan.size - e.offset);
    spans.emplace_back(e.offset, e.offset + n);
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i) require(spans[i - 1].second <= spans[i].first);
  if (plan.size <= (8u << 20)) require(chl::disks::render_image(plan).size() == plan.size);
}

// Write with `write` to a fresh name; the outcome must be all or nothing.
template <typename Write>
void write_and_check(Write write) {
  const fs::path out = g_scratch / "media.img";
  auto st = write(out);
  std::error_code ec;
  if (!st) require(!fs::exists(out, ec));
  fs::remove(out, ec);
  require(fs::is_empty(g_scratch, ec));  // no temporary file left either way
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  chl::fuzz::quiet_logs();
  g_scratch = chl::fuzz::scratch_dir("cloud-init");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace chl::disks;
  FuzzedDataProvider in(data, size);
  const auto format = in.ConsumeBool() ? CloudInitFormat::vfat : CloudInitFormat::iso9660;
  const std::int64_t mtime = in.ConsumeIntegral<std::int64_t>();

  // Volume sources and the meta-data helpers.
  CloudInitSource src;
  src.user_data = in.ConsumeRandomLengthString(512);
  src.user_data_base64 = in.ConsumeRandomLengthString(512);
  src.network_data = in.ConsumeRandomLengthString(256);
  src.network_data_base64 = in.ConsumeRandomLengthString(256);
  auto payload = resolve_cloud_init_source(src);
  (void)decode_base64(src.user_data_base64);
  const std::string name = in.ConsumeRandomLengthString(80);
  const std::string ns = in.ConsumeRandomLengthString(40);
  const std::string uuid = in.ConsumeRandomLengthString(40);
  const std::string host = kubevirt_hostname(name, in.ConsumeRandomLengthString(80));
  const std::string nocloud_meta = nocloud_meta_data(kubevirt_instance_id(uuid, name), host);
  const std::string cd_meta = config_drive_meta_data(name, ns, uuid, host);
  // JSON strings must be valid UTF-8: only demand valid JSON for ASCII-clean inputs.
  const auto ascii = [](const std::string& s) {
    return std::all_of(s.begin(), s.end(),
                       [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  };
  if (ascii(name) && ascii(ns) && ascii(uuid) && ascii(host)) {
    require(valid_json(nocloud_meta));
    require(valid_json(cd_meta));
  }

  // Arbitrary files (names, contents, modes) on media with an arbitrary label.
  std::vector<MediaFile> files;
  const int nfiles = in.ConsumeIntegralInRange(0, 6);
  for (int i = 0; i < nfiles; ++i) {
    MediaFile f;
    f.path = in.ConsumeRandomLengthString(120);
    f.data = in.ConsumeRandomLengthString(2048);
    f.mode = in.ConsumeIntegral<unsigned>() & 07777;
    files.push_back(std::move(f));
  }
  const std::string label = in.ConsumeRandomLengthString(40);
  if (auto plan = plan_cloud_init_media(files, label, format, mtime)) check_plan(*plan);

  // The two media KubeVirt writes, onto the filesystem.
  CloudInitWriteOptions opts;
  opts.format = format;
  opts.mtime = mtime;
  opts.durable = false;
  const std::string user_data = payload ? payload->user_data : src.user_data;
  const std::string network_data = payload ? payload->network_data : src.network_data;
  write_and_check([&](const fs::path& out) {
    return write_nocloud_image(out, NoCloudData{user_data, nocloud_meta, network_data}, opts);
  });
  write_and_check([&](const fs::path& out) {
    return write_config_drive_image(out, ConfigDriveData{user_data, cd_meta, network_data}, opts);
  });
  if (auto nc = nocloud_files(NoCloudData{user_data, nocloud_meta, network_data})) {
    if (auto plan = plan_cloud_init_media(*nc, kNoCloudLabel, format, mtime)) check_plan(*plan);
  }
  return 0;
}

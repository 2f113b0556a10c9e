// cloud_init_bench: time to build a NoCloud disk (user-data, meta-data, network-config) with our
// in-process writers against the tools KubeVirt and users reach for, in one run on the same files:
//   xorrisofs -output X -volid cidata -joliet -rock DIR       (what KubeVirt runs)
//   mkfs.vfat -n cidata -C IMG KiB  +  mcopy -i IMG FILES ::   (the usual FAT recipe)
// Each figure is the median of --rounds builds, each to a new file in the same directory.
// Ours is measured as a whole write to a file (plan + write, no fsync, like the tools) and also
// with fsync (what the launcher does by default).
// Run: cloud_init_bench [--rounds N] [--user-data-bytes N] [--dir DIR]
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/child_process.hpp"
#include "disks/cloud_init.hpp"

namespace fs = std::filesystem;
namespace d = chl::disks;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

bool run(const std::vector<std::string>& argv) {
  chl::common::SpawnOptions o;
  o.argv = argv;
  o.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "MTOOLS_SKIP_CHECK=1"};
  auto c = chl::common::ChildProcess::spawn(o);
  if (!c) return false;
  auto st = c->wait();
  return st && st->success();
}

void write(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

std::string arg(int argc, char** argv, const std::string& flag, const std::string& def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == flag) return argv[i + 1];
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = std::atoi(arg(argc, argv, "--rounds", "30").c_str());
  const std::size_t ud_bytes =
      std::strtoull(arg(argc, argv, "--user-data-bytes", "2048").c_str(), nullptr, 10);
  fs::path base = arg(argc, argv, "--dir", "");
  if (base.empty()) {
    char tmpl[] = "/tmp/chl-cibench-XXXXXX";
    if (!::mkdtemp(tmpl)) return 1;
    base = tmpl;
  }
  auto xorrisofs = chl::common::find_program("xorrisofs");
  auto mkfs = chl::common::find_program("mkfs.vfat");
  auto mcopy = chl::common::find_program("mcopy");

  // The same files for everyone: a cloud-config of the requested size, KubeVirt's meta-data, a
  // netplan v2 network-config.
  d::NoCloudData data;
  data.user_data = "#cloud-config\nusers:\n  - name: cloud\n    ssh_authorized_keys:\n";
  while (data.user_data.size() < ud_bytes)
    data.user_data += "      - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBench bench@example\n";
  data.user_data.resize(std::max(ud_bytes, std::size_t{16}));
  data.meta_data = d::nocloud_meta_data("5d307ca9-b3ef-428c-8861-06e72d69f223", "bench-vm");
  data.network_config = "version: 2\nethernets:\n  eth0:\n    dhcp4: true\n";
  fs::path src = base / "src";
  fs::create_directories(src);
  write(src / "user-data", data.user_data);
  write(src / "meta-data", data.meta_data);
  write(src / "network-config", data.network_config);

  auto ours = [&](d::CloudInitFormat f, bool durable, const char* tag) {
    std::vector<double> t;
    for (int i = 0; i < rounds; ++i) {
      fs::path out = base / (std::string("ours-") + tag + "-" + std::to_string(i));
      d::CloudInitWriteOptions o;
      o.format = f;
      o.durable = durable;
      auto t0 = Clock::now();
      auto st = d::write_nocloud_image(out, data, o);
      t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (!st) {
        std::fprintf(stderr, "ours failed: %s\n", st.error().message().c_str());
        std::exit(1);
      }
    }
    return median(t);
  };
  auto ours_size = [&](d::CloudInitFormat f) {
    auto files = d::nocloud_files(data);
    auto plan = d::plan_cloud_init_media(*files, d::kNoCloudLabel, f, 0);
    return plan ? plan->size : 0;
  };

  const double iso = ours(d::CloudInitFormat::iso9660, false, "iso");
  const double iso_sync = ours(d::CloudInitFormat::iso9660, true, "isos");
  const double fat = ours(d::CloudInitFormat::vfat, false, "fat");
  const double fat_sync = ours(d::CloudInitFormat::vfat, true, "fats");

  double xorr = -1, mkfsmcopy = -1;
  if (xorrisofs) {
    std::vector<double> t;
    for (int i = 0; i < rounds; ++i) {
      fs::path out = base / ("xorriso-" + std::to_string(i) + ".iso");
      auto t0 = Clock::now();
      bool ok = run({*xorrisofs, "-quiet", "-output", out.string(), "-volid", "cidata", "-joliet",
                     "-rock", src.string()});
      t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (!ok) std::fprintf(stderr, "xorrisofs failed\n");
    }
    xorr = median(t);
  }
  if (mkfs && mcopy) {
    // The size of our FAT image, in KiB as mkfs.vfat -C wants it, but at least 1 MiB: mkfs.vfat
    // refuses smaller volumes ("Too few blocks for viable filesystem").
    const auto kib = std::to_string(
        std::max<std::uint64_t>((ours_size(d::CloudInitFormat::vfat) + 1023) / 1024, 1024));
    std::vector<double> t;
    for (int i = 0; i < rounds; ++i) {
      fs::path out = base / ("mkfs-" + std::to_string(i) + ".img");
      auto t0 = Clock::now();
      bool ok = run({*mkfs, "-n", "cidata", "-C", out.string(), kib}) &&
                run({*mcopy, "-i", out.string(), (src / "user-data").string(),
                     (src / "meta-data").string(), (src / "network-config").string(), "::"});
      t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (!ok) std::fprintf(stderr, "mkfs.vfat + mcopy failed\n");
    }
    mkfsmcopy = median(t);
  }

  double fastest_tool = -1;
  for (double v : {xorr, mkfsmcopy})
    if (v > 0 && (fastest_tool < 0 || v < fastest_tool)) fastest_tool = v;
  std::printf("NoCloud build, user-data %zu bytes, median of %d rounds (ms per image)\n\n",
              data.user_data.size(), rounds);
  std::printf("| builder | ms | image bytes | vs fastest tool |\n|---|---|---|---|\n");
  auto row = [&](const char* name, double ms, std::uint64_t size) {
    if (ms < 0) {
      std::printf("| %s | n/a | | |\n", name);
      return;
    }
    std::printf("| %s | %.3f | %llu | %.1fx |\n", name, ms, static_cast<unsigned long long>(size),
                fastest_tool > 0 ? fastest_tool / ms : 0.0);
  };
  row("ours, ISO 9660 (Joliet+RR)", iso, ours_size(d::CloudInitFormat::iso9660));
  row("ours, ISO 9660, fsync", iso_sync, ours_size(d::CloudInitFormat::iso9660));
  row("ours, vfat", fat, ours_size(d::CloudInitFormat::vfat));
  row("ours, vfat, fsync", fat_sync, ours_size(d::CloudInitFormat::vfat));
  row("xorrisofs -joliet -rock", xorr, xorrisofs ? fs::file_size(base / "xorriso-0.iso") : 0);
  row("mkfs.vfat + mcopy", mkfsmcopy, mkfs ? fs::file_size(base / "mkfs-0.img") : 0);
  // For bench/run.sh: key, what, ours, peer name, peer, unit, target kind, target.
  if (xorr > 0)
    std::printf("RESULT\tcloudinit_iso\tcloud-init NoCloud ISO build\t%.3f\txorrisofs\t%.3f\tms\tfaster_ge\t10\n", iso, xorr);
  if (mkfsmcopy > 0)
    std::printf("RESULT\tcloudinit_vfat\tcloud-init NoCloud vfat build\t%.3f\tmkfs.vfat+mcopy\t%.3f\tms\tfaster_ge\t10\n", fat,
                mkfsmcopy);
  if (arg(argc, argv, "--dir", "").empty()) fs::remove_all(base);
  return 0;
}

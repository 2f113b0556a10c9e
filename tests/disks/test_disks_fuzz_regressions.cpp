// Inputs fuzz/fuzz_cloud_init found (each also in fuzz/corpus/fuzz_cloud_init/regress-*). Both
// were undefined behaviour that UBSan reports (the sanitizer lane, scripts/sanitize.sh asan);
// the checks below pin the bytes written.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "disks/cloud_init.hpp"
#include "disks/cloud_init_image.hpp"
#include "disks/cloud_init_vfat.hpp"

namespace d = chl::disks;

namespace {

std::uint32_t le32(const std::string& s, std::size_t at) {
  return static_cast<std::uint32_t>(static_cast<unsigned char>(s[at])) |
         static_cast<std::uint32_t>(static_cast<unsigned char>(s[at + 1])) << 8 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(s[at + 2])) << 16 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(s[at + 3])) << 24;
}

}  // namespace

// The FAT volume serial is derived from mtime; the product overflowed a signed 64-bit integer
// for far-off timestamps. It is now computed unsigned (the same serial for every mtime whose
// product did not overflow).
TEST_CASE("FAT volume serial from an extreme mtime") {
  const std::vector<d::MediaFile> files{{"user-data", "#cloud-config\n", 0}};
  for (const std::int64_t mtime :
       {std::int64_t{-9223372036586340352}, INT64_MIN, INT64_MAX, std::int64_t{1700000000}}) {
    CAPTURE(mtime);
    auto plan = d::plan_vfat(files, d::VfatOptions{"cidata", mtime, 0});
    REQUIRE(plan.has_value());
    const std::string img = d::render_image(*plan);
    REQUIRE(img.size() > 512);
    const auto expected =
        static_cast<std::uint32_t>(static_cast<std::uint64_t>(mtime) * 2654435761u) | 1u;
    CHECK(le32(img, 39) == expected);
    CHECK(img.substr(43, 11) == "cidata     ");
  }
}

// Directory records without a system-use field passed a null string_view to memcpy (size 0,
// still undefined): every ISO has such records (the Joliet tree), even with empty inputs.
TEST_CASE("ISO media from empty inputs") {
  auto files = d::nocloud_files(d::NoCloudData{"", "", ""});
  REQUIRE(files.has_value());
  auto plan = d::plan_cloud_init_media(*files, d::kNoCloudLabel, d::CloudInitFormat::iso9660, 0);
  REQUIRE(plan.has_value());
  const std::string img = d::render_image(*plan);
  REQUIRE(img.size() >= 17 * 2048);
  CHECK(img.substr(16 * 2048 + 1, 5) == "CD001");
  CHECK(img.find("cidata") != std::string::npos);
}

#pragma once
// Disk image format detection by content (magic numbers), never by file name.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

#include "common/error.hpp"

namespace chl::disks {

using common::Result;
using common::Status;

enum class ImageFormat {
  Raw,    // no known magic: a plain disk image
  Qcow2,  // "QFI\xfb", version 2 or later
  Qcow1,  // "QFI\xfb", version 1 (not supported)
  Vmdk,
  Vhdx,
  Vpc,
  Vdi,
  Qed,
  Luks,
};

// "raw", "qcow2", "qcow", "vmdk", ...
std::string_view format_name(ImageFormat f);

// How many bytes of the file's beginning detect_format_bytes() wants to see.
inline constexpr std::size_t kFormatProbeBytes = 512;

// Classify the first bytes of an image (fewer bytes than kFormatProbeBytes is fine).
ImageFormat detect_format_bytes(std::span<const std::uint8_t> head);
// Read the beginning of an open file/device and classify it.
Result<ImageFormat> detect_format_fd(int fd);
Result<ImageFormat> detect_format(const std::filesystem::path& path);

}  // namespace chl::disks

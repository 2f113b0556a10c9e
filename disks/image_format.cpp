#include "disks/image_format.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cstring>

#include "common/syscall.hpp"
#include "common/unique_fd.hpp"
#include "disks/byte_order.hpp"

namespace chl::disks {

namespace {

bool starts_with(std::span<const std::uint8_t> head, std::size_t at, std::string_view magic) {
  return head.size() >= at + magic.size() &&
         std::memcmp(head.data() + at, magic.data(), magic.size()) == 0;
}

// One row per format: where its magic sits and what it is (qcow is handled apart: its version
// decides between qcow1 and qcow2).
struct MagicRow {
  std::size_t offset;
  std::string_view magic;
  ImageFormat format;
};
constexpr std::array<MagicRow, 7> kMagics{{
    {0, std::string_view("KDMV", 4), ImageFormat::Vmdk},                    // VMDK sparse extent
    {0, std::string_view("COWD", 4), ImageFormat::Vmdk},                    // VMDK (ESX) sparse
    {0, std::string_view("# Disk DescriptorFile", 21), ImageFormat::Vmdk},  // VMDK descriptor
    {0, std::string_view("vhdxfile", 8), ImageFormat::Vhdx},
    {0, std::string_view("conectix", 8), ImageFormat::Vpc},  // dynamic VHD (footer copy first)
    {0, std::string_view("QED\0", 4), ImageFormat::Qed},
    {0, std::string_view("LUKS\xba\xbe", 6), ImageFormat::Luks},
}};

}  // namespace

std::string_view format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::Raw:
      return "raw";
    case ImageFormat::Qcow2:
      return "qcow2";
    case ImageFormat::Qcow1:
      return "qcow";
    case ImageFormat::Vmdk:
      return "vmdk";
    case ImageFormat::Vhdx:
      return "vhdx";
    case ImageFormat::Vpc:
      return "vpc";
    case ImageFormat::Vdi:
      return "vdi";
    case ImageFormat::Qed:
      return "qed";
    case ImageFormat::Luks:
      return "luks";
  }
  return "unknown";
}

ImageFormat detect_format_bytes(std::span<const std::uint8_t> head) {
  if (starts_with(head, 0, std::string_view("QFI\xfb", 4))) {
    // Any version but 1 is treated as qcow2 so that the qcow2 reader names what it rejects.
    if (head.size() >= 8 && load_be32(head.data() + 4) == 1) return ImageFormat::Qcow1;
    return ImageFormat::Qcow2;
  }
  for (const auto& row : kMagics) {
    if (starts_with(head, row.offset, row.magic)) return row.format;
  }
  // VDI: little-endian signature 0xbeda107f at offset 0x40.
  if (head.size() >= 0x44 && head[0x40] == 0x7f && head[0x41] == 0x10 && head[0x42] == 0xda &&
      head[0x43] == 0xbe) {
    return ImageFormat::Vdi;
  }
  return ImageFormat::Raw;
}

Result<ImageFormat> detect_format_fd(int fd) {
  std::array<std::uint8_t, kFormatProbeBytes> head{};
  std::size_t got = 0;
  while (got < head.size()) {
    ssize_t n = common::retry_eintr(
        [&] { return ::pread(fd, head.data() + got, head.size() - got, static_cast<off_t>(got)); });
    if (n < 0) return common::fail_errno("reading the image header");
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  return detect_format_bytes(std::span<const std::uint8_t>(head.data(), got));
}

Result<ImageFormat> detect_format(const std::filesystem::path& path) {
  common::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return common::fail_errno("opening '" + path.string() + "'");
  return common::wrap(detect_format_fd(fd.get()), "'" + path.string() + "'");
}

}  // namespace chl::disks

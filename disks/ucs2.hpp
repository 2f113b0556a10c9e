#pragma once
// UTF-8 -> UCS-2 (Basic Multilingual Plane only), for the names on cloud-init media: Joliet
// stores them big-endian (ISO 9660), VFAT long-name entries little-endian.
#include <string>
#include <string_view>

#include "common/error.hpp"

namespace chl::disks {

// Code units of `utf8`; fails naming the text when it is not UTF-8 or leaves the BMP.
common::Result<std::u16string> utf8_to_ucs2(std::string_view utf8);

}  // namespace chl::disks

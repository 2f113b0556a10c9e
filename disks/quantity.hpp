#pragma once
// Kubernetes resource quantities for disk sizes: "10Gi", "512Mi", "10G", "1.5Ti", "1e9",
// "1048576". Binary suffixes Ki Mi Gi Ti Pi Ei, decimal k M G T P E, and an exponent.
#include <cstdint>
#include <string_view>

#include "common/error.hpp"

namespace chl::disks {

// Bytes for a quantity, rounded up to a whole byte as Kubernetes' Quantity.Value() does.
// Errors name the text: negative values, unknown suffixes, values past 2^63-1.
common::Result<std::uint64_t> parse_quantity(std::string_view text);

}  // namespace chl::disks

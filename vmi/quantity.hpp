#pragma once
// Kubernetes resource quantities ("1Gi", "1024M", "512Mi", "1.5G", "500m", "1e3", "123"), parsed
// exactly as apimachinery's resource.Quantity does: a signed decimal number followed by a binary
// suffix (Ki Mi Gi Ti Pi Ei), a decimal SI suffix (n u m k M G T P E) or a decimal exponent
// (e3, E-2). `value` rounds up to a whole unit like Quantity.Value(); `milli` like MilliValue().
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.hpp"

namespace chl::vmi {

// The quantity rounded up to an integer ("1.5" -> 2, "100m" -> 1, "-1.5" -> -1).
// Fails on syntax errors and on values that do not fit in 63 bits.
common::Result<std::int64_t> parse_quantity(std::string_view text);
// The quantity in thousandths, rounded up ("500m" -> 500, "2" -> 2000).
common::Result<std::int64_t> parse_quantity_milli(std::string_view text);

// A byte count in the shortest exact Kubernetes form: the largest binary suffix that divides it
// ("1Gi", "1536Mi", "4Ki"), or plain digits ("1000", "0").
std::string format_bytes_quantity(std::int64_t bytes);

}  // namespace chl::vmi

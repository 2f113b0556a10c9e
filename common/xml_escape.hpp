#pragma once
// Escaping for the XML we write and read back (libvirt domain XML and its <interface> elements).

#include <string>
#include <string_view>

namespace chl::common {

// Escape text for XML character data and attribute values (quoted with ' or ").
std::string xml_escape(std::string_view s);
// The inverse for what xml_escape writes (the five predefined entities); any other `&...;`
// is kept as it is.
std::string xml_unescape(std::string_view s);

}  // namespace chl::common

#pragma once
// Escaping for the XML we write (libvirt domain XML and its <interface> elements).

#include <string>
#include <string_view>

namespace chl::common {

// Escape text for XML character data and attribute values (quoted with ' or ").
std::string xml_escape(std::string_view s);

}  // namespace chl::common

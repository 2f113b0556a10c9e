#include "network/mac.hpp"

#include <cstdio>

namespace chl::network {

namespace {
int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::optional<Mac> parse_mac(std::string_view text) {
  if (text.size() != 17) return std::nullopt;
  const char sep = text[2];
  if (sep != ':' && sep != '-') return std::nullopt;
  Mac m{};
  for (std::size_t i = 0; i < 6; ++i) {
    const std::size_t at = i * 3;
    if (i > 0 && text[at - 1] != sep) return std::nullopt;
    const int hi = hex_digit(text[at]);
    const int lo = hex_digit(text[at + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    m[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return m;
}

std::string format_mac(const Mac& m) {
  char buf[18];
  std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4],
                m[5]);
  return buf;
}

Mac generated_mac(std::string_view vmi_uid, std::string_view iface_name) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](std::string_view s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 0x100000001b3ULL;
    }
  };
  mix(vmi_uid);
  mix("/");
  mix(iface_name);
  Mac m{};
  for (std::size_t i = 0; i < 6; ++i) m[i] = static_cast<std::uint8_t>(h >> (8 * i));
  m[0] = static_cast<std::uint8_t>((m[0] & 0xfc) | 0x02);  // local, unicast
  return m;
}

}  // namespace chl::network

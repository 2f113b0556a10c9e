#include "disks/ucs2.hpp"

#include <cstdint>

namespace chl::disks {

common::Result<std::u16string> utf8_to_ucs2(std::string_view utf8) {
  using common::fail;
  std::u16string out;
  for (std::size_t i = 0; i < utf8.size();) {
    auto c = static_cast<unsigned char>(utf8[i]);
    std::uint32_t cp;
    std::size_t n;
    if (c < 0x80) {
      cp = c;
      n = 1;
    } else if ((c & 0xe0) == 0xc0) {
      cp = c & 0x1f;
      n = 2;
    } else if ((c & 0xf0) == 0xe0) {
      cp = c & 0x0f;
      n = 3;
    } else {
      return fail(std::errc::invalid_argument, "name '" + std::string(utf8) + "' is not UTF-8 within the BMP");
    }
    if (i + n > utf8.size()) return fail(std::errc::invalid_argument, "name '" + std::string(utf8) + "' is not UTF-8");
    for (std::size_t k = 1; k < n; ++k) {
      auto cc = static_cast<unsigned char>(utf8[i + k]);
      if ((cc & 0xc0) != 0x80)
        return fail(std::errc::invalid_argument, "name '" + std::string(utf8) + "' is not UTF-8");
      cp = (cp << 6) | (cc & 0x3f);
    }
    out.push_back(static_cast<char16_t>(cp));
    i += n;
  }
  return out;
}

}  // namespace chl::disks

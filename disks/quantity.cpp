#include "disks/quantity.hpp"

#include <array>
#include <string>

namespace chl::disks {

namespace {

using u128 = unsigned __int128;

struct Suffix {
  std::string_view text;
  unsigned base;   // 2 or 10
  unsigned power;  // 2^power or 10^power
};
// Longest first so that "Ki" wins over "k"-like prefixes.
constexpr std::array<Suffix, 13> kSuffixes{{
    {"Ki", 2, 10},
    {"Mi", 2, 20},
    {"Gi", 2, 30},
    {"Ti", 2, 40},
    {"Pi", 2, 50},
    {"Ei", 2, 60},
    {"k", 10, 3},
    {"M", 10, 6},
    {"G", 10, 9},
    {"T", 10, 12},
    {"P", 10, 15},
    {"E", 10, 18},
    {"", 10, 0},
}};

constexpr u128 kMax = static_cast<u128>(INT64_MAX);

common::Result<std::uint64_t> bad(std::string_view text, const std::string& why) {
  return common::fail(std::errc::invalid_argument,
                      "invalid quantity '" + std::string(text) + "': " + why);
}

}  // namespace

common::Result<std::uint64_t> parse_quantity(std::string_view text) {
  std::string_view s = text;
  if (s.empty()) return bad(text, "empty");
  if (s.front() == '+') s.remove_prefix(1);
  if (!s.empty() && s.front() == '-') return bad(text, "negative");
  // Mantissa: digits with an optional fraction.
  u128 mantissa = 0;
  unsigned frac_digits = 0, digits = 0;
  bool in_frac = false;
  std::size_t i = 0;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '.' && !in_frac) {
      in_frac = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    if (++digits > 19) return bad(text, "too many digits");
    mantissa = mantissa * 10 + static_cast<unsigned>(c - '0');
    if (in_frac) ++frac_digits;
  }
  if (digits == 0) return bad(text, "no number");
  std::string_view rest = s.substr(i);

  // Multiplier as numerator (base^power) over 10^frac_digits (and 10^-exp for milli).
  u128 num = 1, den = 1;
  for (unsigned k = 0; k < frac_digits; ++k) den *= 10;
  if (rest.size() > 1 && (rest[0] == 'e' || rest[0] == 'E') &&
      (rest[1] == '+' || rest[1] == '-' || (rest[1] >= '0' && rest[1] <= '9'))) {
    // Exponent form: 1e9, 5E-3 (an 'E' alone is the exa suffix, handled below).
    std::string_view e = rest.substr(1);
    bool neg = false;
    if (e.front() == '+' || e.front() == '-') {
      neg = e.front() == '-';
      e.remove_prefix(1);
    }
    if (e.empty() || e.size() > 2) return bad(text, "bad exponent");
    unsigned exp = 0;
    for (char c : e) {
      if (c < '0' || c > '9') return bad(text, "bad exponent");
      exp = exp * 10 + static_cast<unsigned>(c - '0');
    }
    if (exp > 18) return bad(text, "exponent too large");
    for (unsigned k = 0; k < exp; ++k) (neg ? den : num) *= 10;
  } else if (rest == "m") {
    den *= 1000;  // milli: only ever meaningful for fractions of a byte, rounded up
  } else {
    const Suffix* found = nullptr;
    for (const auto& suf : kSuffixes) {
      if (rest == suf.text) {
        found = &suf;
        break;
      }
    }
    if (!found) return bad(text, "unknown suffix '" + std::string(rest) + "'");
    for (unsigned k = 0; k < found->power; ++k) {
      if (found->base == 2) {
        num *= 2;
      } else {
        num *= 10;
      }
    }
  }
  // No overflow: mantissa < 10^19, num <= 2^60 or 10^18, den <= 10^37.
  u128 value = mantissa * num;
  u128 bytes = (value + den - 1) / den;
  if (bytes > kMax) return bad(text, "too large");
  return static_cast<std::uint64_t>(bytes);
}

}  // namespace chl::disks

#include "vmi/quantity.hpp"

#include <array>
#include <limits>

namespace chl::vmi {
namespace {

using i128 = __int128;

// An exact rational: numerator / denominator, denominator > 0.
struct Exact {
  i128 num = 0;
  i128 den = 1;
};

constexpr int kMaxDigits = 19;  // keeps num * 2^60 and num * 10^18 inside 128 bits
constexpr int kMaxScale = 36;   // 10^36 still fits in a signed 128-bit integer
constexpr i128 kMax128 = static_cast<i128>((~static_cast<unsigned __int128>(0)) >> 1);

i128 pow10(int n) {
  i128 r = 1;
  for (int i = 0; i < n; ++i) r *= 10;
  return r;
}

common::Result<Exact> parse_exact(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return common::fail(std::errc::invalid_argument,
                        "quantity \"" + std::string(text) + "\": " + why);
  };
  std::size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  std::string digits;  // significant digits, integer part then fraction
  int frac_digits = 0;
  bool any_digit = false;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    digits += text[i++];
    any_digit = true;
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      digits += text[i++];
      ++frac_digits;
      any_digit = true;
    }
  }
  if (!any_digit) return bad("expected a number such as 512Mi, 1Gi, 1024M, 2 or 500m");
  // Trailing zeros of the fraction carry no value; leading zeros none either.
  while (frac_digits > 0 && digits.back() == '0') {
    digits.pop_back();
    --frac_digits;
  }
  std::size_t lead = digits.find_first_not_of('0');
  digits = lead == std::string::npos ? std::string("0") : digits.substr(lead);
  if (static_cast<int>(digits.size()) > kMaxDigits) return bad("too many digits");

  Exact q;
  for (char c : digits) q.num = q.num * 10 + (c - '0');
  int scale = frac_digits;  // value = num * 10^-scale * suffix
  int exp10 = 0;
  int exp2 = 0;

  std::string_view suffix = text.substr(i);
  struct Suffix {
    std::string_view name;
    int exp2;
    int exp10;
  };
  static constexpr std::array<Suffix, 17> kSuffixes{{
      {"", 0, 0},
      {"Ki", 10, 0},
      {"Mi", 20, 0},
      {"Gi", 30, 0},
      {"Ti", 40, 0},
      {"Pi", 50, 0},
      {"Ei", 60, 0},
      {"n", 0, -9},
      {"u", 0, -6},
      {"m", 0, -3},
      {"k", 0, 3},
      {"M", 0, 6},
      {"G", 0, 9},
      {"T", 0, 12},
      {"P", 0, 15},
      {"E", 0, 18},
      {"K", -1, 0},
  }};
  bool matched = false;
  for (const auto& s : kSuffixes) {
    if (suffix == s.name) {
      if (s.exp2 < 0) return bad("unknown suffix \"K\" (did you mean k or Ki?)");
      exp2 = s.exp2;
      exp10 = s.exp10;
      matched = true;
      break;
    }
  }
  if (!matched) {
    // Decimal exponent: e3, E-2, e+6.
    if (suffix.size() >= 2 && (suffix[0] == 'e' || suffix[0] == 'E')) {
      std::size_t j = 1;
      bool neg_exp = false;
      if (suffix[j] == '+' || suffix[j] == '-') neg_exp = suffix[j++] == '-';
      if (j >= suffix.size()) return bad("exponent without digits");
      int e = 0;
      for (; j < suffix.size(); ++j) {
        if (suffix[j] < '0' || suffix[j] > '9')
          return bad("unknown suffix \"" + std::string(suffix) + "\"");
        e = e * 10 + (suffix[j] - '0');
        if (e > 1000) return bad("exponent out of range");
      }
      exp10 = neg_exp ? -e : e;
    } else {
      return bad("unknown suffix \"" + std::string(suffix) +
                 "\" (use Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent)");
    }
  }
  if (q.num != 0) {
    scale -= exp10;
    if (scale < -kMaxScale || scale > kMaxScale) return bad("out of range");
    if (scale < 0) {
      i128 m = pow10(-scale);
      if (q.num > kMax128 / m) return bad("too large");
      q.num *= m;
    } else {
      q.den = pow10(scale);
    }
    for (int k = 0; k < exp2; ++k) {
      if (q.num > kMax128 / 2) return bad("too large");
      q.num *= 2;
    }
  }
  if (negative) q.num = -q.num;
  return q;
}

// ceil(num * mul / den) as int64, or an error when it does not fit.
common::Result<std::int64_t> ceil_to_int64(const Exact& q, std::int64_t mul,
                                           std::string_view text) {
  i128 num = q.num;
  if (num > kMax128 / mul || num < -kMax128 / mul) {
    return common::fail(std::errc::value_too_large,
                        "quantity \"" + std::string(text) + "\": too large");
  }
  num *= mul;
  i128 quot = num / q.den;
  i128 rem = num % q.den;
  if (rem > 0) ++quot;  // toward +infinity; C++ truncates toward zero
  if (quot > std::numeric_limits<std::int64_t>::max() ||
      quot < std::numeric_limits<std::int64_t>::min()) {
    return common::fail(std::errc::value_too_large,
                        "quantity \"" + std::string(text) + "\": too large");
  }
  return static_cast<std::int64_t>(quot);
}

}  // namespace

common::Result<std::int64_t> parse_quantity(std::string_view text) {
  CHL_TRY(Exact q, parse_exact(text));
  return ceil_to_int64(q, 1, text);
}

common::Result<std::int64_t> parse_quantity_milli(std::string_view text) {
  CHL_TRY(Exact q, parse_exact(text));
  return ceil_to_int64(q, 1000, text);
}

std::string format_bytes_quantity(std::int64_t bytes) {
  static constexpr std::array<std::string_view, 6> kNames{"Ei", "Pi", "Ti", "Gi", "Mi", "Ki"};
  if (bytes == 0) return "0";
  for (std::size_t i = 0; i < kNames.size(); ++i) {
    const int shift = 60 - 10 * static_cast<int>(i);
    const std::int64_t unit = std::int64_t{1} << shift;
    if (bytes % unit == 0) return std::to_string(bytes / unit) + std::string(kNames[i]);
  }
  return std::to_string(bytes);
}

}  // namespace chl::vmi

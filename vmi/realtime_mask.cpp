#include "vmi/realtime_mask.hpp"

#include <algorithm>
#include <charconv>
#include <optional>

namespace chl::vmi {
namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// strconv.Atoi: an int64; digits that overflow it are an error ("value out of range").
std::optional<std::int64_t> atoi64(std::string_view s) {
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// strings.TrimSpace: ASCII white space at both ends (the mask is ASCII when it parses at all).
std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\v\f\r";
  const auto b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

}  // namespace

bool RealtimeMask::enabled(std::uint32_t vcpu) const {
  if (all_) return true;
  const std::string id = std::to_string(vcpu);
  if (std::find(negated_.begin(), negated_.end(), id) != negated_.end()) return false;
  if (std::find(singles_.begin(), singles_.end(), id) != singles_.end()) return true;
  return std::any_of(ranges_.begin(), ranges_.end(),
                     [&](const Range& r) { return r.first <= vcpu && vcpu <= r.last; });
}

std::vector<std::uint32_t> RealtimeMask::enabled_among(std::uint32_t count) const {
  std::vector<std::uint32_t> out;
  for (std::uint32_t i = 0; i < count; ++i)
    if (enabled(i)) out.push_back(i);
  return out;
}

tl::expected<RealtimeMask, std::string> parse_realtime_mask(std::string_view mask) {
  RealtimeMask m;
  if (mask.empty()) return m;
  m.all_ = false;
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = mask.find(',', at);
    const std::string_view raw =
        mask.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at);
    const std::string_view item = trim(raw);
    const std::size_t dash = item.find('-');
    const auto invalid = [&] {
      return tl::unexpected("invalid mask value '" + std::string(raw) + "' in '" +
                            std::string(mask) + "'");
    };
    if (dash != std::string_view::npos && all_digits(item.substr(0, dash)) &&
        all_digits(item.substr(dash + 1))) {
      const auto first = atoi64(item.substr(0, dash));
      const auto last = atoi64(item.substr(dash + 1));
      if (!first || !last) return invalid();
      if (*first > *last)
        return tl::unexpected("invalid mask range `" + std::to_string(*first) + "-" +
                              std::to_string(*last) + "`");
      m.ranges_.push_back({*first, *last});
    } else if (all_digits(item)) {
      if (!atoi64(item)) return invalid();
      m.singles_.emplace_back(item);
    } else if (item.size() > 1 && item[0] == '^' && all_digits(item.substr(1))) {
      if (!atoi64(item.substr(1))) return invalid();
      m.negated_.emplace_back(item.substr(1));
    } else {
      return invalid();
    }
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  return m;
}

}  // namespace chl::vmi

#include "common/proc_stat.hpp"

#include <charconv>
#include <fstream>
#include <sstream>

namespace chl::common {

std::optional<ProcStat> ProcStat::read(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  // "pid (comm) S ...": comm may hold spaces and parentheses, so it ends at the last ')'.
  const auto open = line.find('(');
  const auto close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open || close + 2 > line.size())
    return std::nullopt;
  ProcStat s;
  s.comm_ = line.substr(open + 1, close - open - 1);
  std::istringstream rest(line.substr(close + 1));
  for (std::string f; rest >> f;) s.rest_.push_back(std::move(f));
  if (s.rest_.empty()) return std::nullopt;
  return s;
}

std::optional<ProcStat> ProcStat::read(pid_t pid) { return read("/proc/" + std::to_string(pid) + "/stat"); }

char ProcStat::state() const { return rest_.front().empty() ? '?' : rest_.front().front(); }

std::optional<std::uint64_t> ProcStat::number(int field) const {
  if (field < 3 || static_cast<std::size_t>(field - 3) >= rest_.size()) return std::nullopt;
  const std::string& f = rest_[static_cast<std::size_t>(field - 3)];
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
  if (ec != std::errc() || p != f.data() + f.size()) return std::nullopt;
  return v;
}

bool process_exiting(pid_t pid) {
  if (pid <= 0) return true;
  auto st = ProcStat::read(pid);
  if (!st) return true;
  if (st->state() == 'Z' || st->state() == 'X') return true;
  auto flags = st->number(9);
  return flags && (*flags & kPfExiting) != 0;
}

}  // namespace chl::common

#include "common/thread_affinity.hpp"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <fstream>

namespace chl::common {
namespace fs = std::filesystem;

std::optional<std::vector<std::uint32_t>> parse_cpu_list(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::vector<std::uint32_t> out;
  std::size_t pos = 0;
  auto number = [&](std::uint32_t& v) {
    const char* b = text.data() + pos;
    auto [p, ec] = std::from_chars(b, text.data() + text.size(), v);
    if (ec != std::errc{} || p == b) return false;
    pos += static_cast<std::size_t>(p - b);
    return true;
  };
  while (pos < text.size()) {
    std::uint32_t a = 0;
    std::uint32_t b = 0;
    if (!number(a)) return std::nullopt;
    b = a;
    if (pos < text.size() && text[pos] == '-') {
      ++pos;
      if (!number(b) || b < a || b - a > 65535) return std::nullopt;
    }
    for (std::uint32_t c = a; c <= b; ++c) out.push_back(c);
    if (pos < text.size()) {
      if (text[pos] != ',') return std::nullopt;
      ++pos;
      if (pos == text.size()) return std::nullopt;
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string format_cpu_list(std::span<const std::uint32_t> cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

namespace {

// Name: and Cpus_allowed_list: of one task's status file; nullopt when it is gone.
std::optional<ThreadAffinity> read_task(const fs::path& status, pid_t tid, std::string* bad) {
  std::ifstream f(status);
  if (!f) return std::nullopt;
  ThreadAffinity t;
  t.tid = tid;
  bool have_cpus = false;
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("Name:", 0) == 0) {
      const std::size_t at = line.find_first_not_of(" \t", 5);
      t.name = at == std::string::npos ? std::string() : line.substr(at);
    } else if (line.rfind("Cpus_allowed_list:", 0) == 0) {
      const std::size_t at = line.find_first_not_of(" \t", 18);
      auto cpus = parse_cpu_list(at == std::string::npos ? "" : std::string_view(line).substr(at));
      if (!cpus) {
        *bad = status.string() + ": Cpus_allowed_list is not a CPU list: \"" + line + "\"";
        return std::nullopt;
      }
      t.cpus = std::move(*cpus);
      have_cpus = true;
    }
  }
  if (!have_cpus) {
    // A thread that ended under us reads empty; a status file with a name but no CPU list is
    // not one this code understands.
    if (!t.name.empty()) *bad = status.string() + ": no Cpus_allowed_list line";
    return std::nullopt;
  }
  return t;
}

}  // namespace

Result<std::vector<ThreadAffinity>> read_thread_affinities(pid_t pid, const fs::path& proc) {
  const fs::path dir = proc / std::to_string(pid) / "task";
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec)
    return fail(
        ec, "listing the threads of process " + std::to_string(pid) + " (" + dir.string() + ")");
  std::vector<ThreadAffinity> out;
  std::string bad;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return fail(ec, "listing the threads of process " + std::to_string(pid));
    const std::string name = it->path().filename().string();
    pid_t tid = 0;
    auto [p, perr] = std::from_chars(name.data(), name.data() + name.size(), tid);
    if (perr != std::errc{} || p != name.data() + name.size()) continue;
    if (auto t = read_task(it->path() / "status", tid, &bad)) out.push_back(std::move(*t));
    if (!bad.empty()) return fail(std::errc::invalid_argument, bad);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.tid < b.tid; });
  return out;
}

Status set_thread_affinity(pid_t tid, std::span<const std::uint32_t> cpus) {
  if (cpus.empty())
    return fail(std::errc::invalid_argument, "pinning thread " + std::to_string(tid) + ": no CPUs");
  cpu_set_t set;
  CPU_ZERO(&set);
  for (std::uint32_t c : cpus) {
    if (c >= CPU_SETSIZE)
      return fail(std::errc::invalid_argument, "pinning thread " + std::to_string(tid) + ": CPU " +
                                                   std::to_string(c) + " is beyond CPU_SETSIZE");
    CPU_SET(c, &set);
  }
  if (::sched_setaffinity(tid, sizeof set, &set) != 0)
    return fail_errno("pinning thread " + std::to_string(tid) + " to CPUs " +
                      format_cpu_list(cpus));
  return {};
}

}  // namespace chl::common

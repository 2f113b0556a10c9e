#include "cli/args.hpp"

#include <cstdio>

namespace chl::cli {

bool Args::parse(const std::vector<std::string>& argv) {
  bool only_positionals = false;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (only_positionals || a.size() < 2 || a[0] != '-' || a == "-") {
      positionals_.push_back(a);
      continue;
    }
    if (a == "--") {
      only_positionals = true;
      continue;
    }
    std::string flag = a, value;
    bool has_inline = false;
    if (auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
      flag = a.substr(0, eq);
      value = a.substr(eq + 1);
      has_inline = true;
    }
    if (switches_.count(flag)) {
      if (has_inline) {
        error_ = flag + " takes no value";
        return false;
      }
      seen_.insert(flag);
      continue;
    }
    if (!with_value_.count(flag)) {
      error_ = "unknown option " + flag;
      return false;
    }
    if (!has_inline) {
      if (i + 1 >= argv.size()) {
        error_ = flag + " needs a value";
        return false;
      }
      value = argv[++i];
    }
    seen_.insert(flag);
    values_[flag].push_back(value);
  }
  return true;
}

std::optional<std::string> Args::get(const std::string& flag) const {
  auto it = values_.find(flag);
  if (it == values_.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

std::string Args::get_or(const std::string& flag, const std::string& def) const {
  auto v = get(flag);
  return v ? *v : def;
}

std::vector<std::string> Args::all(const std::string& flag) const {
  auto it = values_.find(flag);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

bool Args::has(const std::string& flag) const { return seen_.count(flag) > 0; }

int usage_error(const std::string& cmd, const std::string& msg, int code) {
  std::fprintf(stderr, "ch-launcher %s: %s\n", cmd.c_str(), msg.c_str());
  return code;
}

std::optional<vmi::CheckedVmi> checked_vmi_or_print(const std::string& file, const std::string& hypervisor) {
  auto checked = vmi::check_vmi_file(file, hypervisor, vmi::current_host());
  if (!checked) {
    std::fputs(checked.error().c_str(), stderr);
    return std::nullopt;
  }
  std::fputs(vmi::format_warnings(checked->warnings, file == "-" ? "<stdin>" : file).c_str(), stderr);
  return std::move(*checked);
}

}  // namespace chl::cli

#pragma once
// A small argument parser: `--flag value`, `--flag=value`, repeated flags, boolean switches,
// positionals. Unknown flags are errors naming the flag.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "vmi/validator.hpp"

namespace chl::cli {

class Args {
 public:
  // `with_value`: flags that take a value; `switches`: boolean flags.
  Args(std::set<std::string> with_value, std::set<std::string> switches)
      : with_value_(std::move(with_value)), switches_(std::move(switches)) {}

  // Parse; on error returns false and sets error() ("unknown option --x", "--vmi needs a value").
  bool parse(const std::vector<std::string>& argv);
  [[nodiscard]] const std::string& error() const { return error_; }

  [[nodiscard]] std::optional<std::string> get(const std::string& flag) const;
  [[nodiscard]] std::string get_or(const std::string& flag, const std::string& def) const;
  [[nodiscard]] std::vector<std::string> all(const std::string& flag) const;
  [[nodiscard]] bool has(const std::string& flag) const;
  [[nodiscard]] const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  std::set<std::string> with_value_;
  std::set<std::string> switches_;
  std::map<std::string, std::vector<std::string>> values_;
  std::set<std::string> seen_;
  std::vector<std::string> positionals_;
  std::string error_;
};

// Print "ch-launcher <cmd>: <msg>" to stderr, return `code`.
int usage_error(const std::string& cmd, const std::string& msg, int code = 2);

// check_vmi_file for the commands that read a VMI (validate, render, overhead): the checked VMI
// with its warnings printed ("warning: FILE: spec.x: note"), or nullopt with every problem
// printed (the caller exits 2).
std::optional<vmi::CheckedVmi> checked_vmi_or_print(const std::string& file, const std::string& hypervisor);

}  // namespace chl::cli

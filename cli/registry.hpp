#pragma once
// The CLI's subcommand table. Each cli/<name>.cpp registers its command with a static
// `Registrar`; main.cpp looks the first argument up here. Subcommands only parse arguments
// and call into the libraries.
#include <functional>
#include <string>
#include <vector>

namespace chl::cli {

struct Command {
  std::string name;     // "validate", "disk convert" (multi-word names allowed)
  std::string summary;  // one line for `ch-launcher help`
  std::string usage;    // the full usage text
  // Arguments after the command name. Returns the process exit code.
  std::function<int(const std::vector<std::string>&)> run;
};

std::vector<Command>& commands();

struct Registrar {
  explicit Registrar(Command c) { commands().push_back(std::move(c)); }
};

}  // namespace chl::cli

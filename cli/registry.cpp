#include "cli/registry.hpp"

namespace chl::cli {

std::vector<Command>& commands() {
  static std::vector<Command> table;
  return table;
}

}  // namespace chl::cli

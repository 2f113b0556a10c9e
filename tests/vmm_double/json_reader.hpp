#pragma once
// A JSON reader that keeps source positions, so the VMM double can answer malformed or
// mistyped bodies with the same text serde_json gives inside Cloud Hypervisor:
// "missing field `max_vcpus` at line 1 column 26", "expected value at line 1 column 1", ...
// Positions follow serde_json: `line` counts from 1, `column` is the number of characters
// consumed on that line when the error is raised.
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.hpp"

namespace chl::vmm_double {

struct JsonPos {
  std::size_t line = 1;
  std::size_t column = 0;
};

struct JsonNode {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  std::string text;  // string value, or the number as written
  std::vector<JsonNode> items;
  std::vector<std::pair<std::string, JsonNode>> members;
  JsonPos start;  // position before the first character of the value
  JsonPos end;    // position after its last character

  [[nodiscard]] const JsonNode* find(std::string_view key) const;
};

// Parse a whole document; on a syntax error returns serde_json's message with position,
// e.g. "expected `,` or `}` at line 1 column 12".
tl::expected<JsonNode, std::string> parse_json(std::string_view text);

// " at line L column C" as serde_json appends it.
std::string at(const JsonPos& pos);

}  // namespace chl::vmm_double

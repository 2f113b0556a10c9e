#pragma once
// The parser's own tools, shared by its files (parser.cpp: the document, metadata and spec;
// parse_domain.cpp, parse_devices.cpp, parse_volumes.cpp: the sections). Not part of vmi/'s
// interface: only the parser's files include it.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "common/log.hpp"
#include "vmi/quantity.hpp"
#include "vmi/vmi.hpp"

namespace chl::vmi {

// " (line L, column C)" for a node that has a position, else "".
std::string where(const YAML::Node& n);
// "an object", "a list", "null", "\"text\"" or "nothing": what a node is, for messages.
std::string describe(const YAML::Node& n);
// Standard or URL-safe base64, padding optional; false on a malformed input.
bool base64_decode(std::string_view in, std::string& out);


// The walk over one document: every accessor records a problem (with the field path and the
// line) instead of stopping, so that all problems come back at once.
class Reader {
 public:
  explicit Reader(Violations& problems) : problems_(problems) {}

  void problem(const std::string& path, const std::string& msg, const YAML::Node& at) {
    problems_.push_back({path, msg + where(at)});
  }

  // A child that is present and not null, or an undefined node.
  static YAML::Node child(const YAML::Node& map, const char* key) {
    if (!map.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    YAML::Node c = map[key];
    if (!c.IsDefined() || c.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
    return c;
  }

  // Log (debug) every key of `map` that is not in `known`.
  void unknown_keys(const YAML::Node& map, const std::string& path,
                    std::initializer_list<std::string_view> known) {
    if (!map.IsMap()) return;
    for (const auto& kv : map) {
      const std::string key = kv.first.Scalar();
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        CHL_LOG_DEBUG("ignoring unknown field {}{}{}", path, path.empty() ? "" : ".", key);
      }
    }
  }

  // `node` must be an object: reports otherwise and returns false.
  bool expect_map(const YAML::Node& node, const std::string& path) {
    if (node.IsMap()) return true;
    problem(path, "expected an object, got " + describe(node), node);
    return false;
  }
  bool expect_list(const YAML::Node& node, const std::string& path) {
    if (node.IsSequence()) return true;
    problem(path, "expected a list, got " + describe(node), node);
    return false;
  }

  std::optional<std::string> str(const YAML::Node& map, const char* key, const std::string& path) {
    YAML::Node n = child(map, key);
    if (!n.IsDefined()) return std::nullopt;
    const std::string p = join(path, key);
    if (!n.IsScalar()) {
      problem(p, "expected a string, got " + describe(n), n);
      return std::nullopt;
    }
    return n.Scalar();
  }

  std::optional<bool> boolean(const YAML::Node& map, const char* key, const std::string& path) {
    YAML::Node n = child(map, key);
    if (!n.IsDefined()) return std::nullopt;
    const std::string p = join(path, key);
    if (n.IsScalar()) {
      const std::string& s = n.Scalar();
      if (s == "true" || s == "True" || s == "TRUE") return true;
      if (s == "false" || s == "False" || s == "FALSE") return false;
    }
    problem(p, "expected true or false, got " + describe(n), n);
    return std::nullopt;
  }

  std::optional<std::int64_t> integer(const YAML::Node& map, const char* key,
                                      const std::string& path, std::int64_t min, std::int64_t max) {
    YAML::Node n = child(map, key);
    if (!n.IsDefined()) return std::nullopt;
    const std::string p = join(path, key);
    if (n.IsScalar()) {
      const std::string& s = n.Scalar();
      std::size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
      bool digits = i < s.size() && s.size() - i <= 18 &&
                    std::all_of(s.begin() + static_cast<long>(i), s.end(),
                                [](char c) { return c >= '0' && c <= '9'; });
      if (digits) {
        std::int64_t v = std::stoll(s);
        if (v < min || v > max) {
          problem(p,
                  "must be between " + std::to_string(min) + " and " + std::to_string(max) +
                      ", got " + s,
                  n);
          return std::nullopt;
        }
        return v;
      }
    }
    problem(p, "expected an integer, got " + describe(n), n);
    return std::nullopt;
  }

  std::optional<std::uint32_t> count(const YAML::Node& map, const char* key,
                                     const std::string& path) {
    auto v = integer(map, key, path, 0, std::numeric_limits<std::uint32_t>::max());
    if (!v) return std::nullopt;
    return static_cast<std::uint32_t>(*v);
  }

  std::optional<Quantity> quantity(const YAML::Node& map, const char* key,
                                   const std::string& path) {
    YAML::Node n = child(map, key);
    if (!n.IsDefined()) return std::nullopt;
    const std::string p = join(path, key);
    if (!n.IsScalar()) {
      problem(p, "expected a quantity such as 1Gi, got " + describe(n), n);
      return std::nullopt;
    }
    auto milli = parse_quantity_milli(n.Scalar());
    auto value = parse_quantity(n.Scalar());
    if (!value) {
      problem(p, value.error().message(), n);
      return std::nullopt;
    }
    Quantity q;
    q.text = n.Scalar();
    q.value = *value;
    // Bytes beyond ~9.2e15 have no milli form; memory never needs it.
    q.milli = milli ? *milli
                    : (q.value >= 0 ? std::numeric_limits<std::int64_t>::max()
                                    : std::numeric_limits<std::int64_t>::min());
    return q;
  }

  // A present object (possibly empty) at map[key]; `present` false when absent or null.
  YAML::Node object(const YAML::Node& map, const char* key, const std::string& path,
                    bool& present) {
    YAML::Node n = child(map, key);
    present = false;
    if (!n.IsDefined()) return n;
    if (!expect_map(n, join(path, key))) return YAML::Node(YAML::NodeType::Undefined);
    present = true;
    return n;
  }

  void string_map(const YAML::Node& map, const char* key, const std::string& path,
                  std::map<std::string, std::string>& out) {
    YAML::Node n = child(map, key);
    if (!n.IsDefined()) return;
    const std::string p = join(path, key);
    if (!expect_map(n, p)) return;
    for (const auto& kv : n) {
      if (!kv.second.IsScalar() && !kv.second.IsNull()) {
        problem(p + "." + kv.first.Scalar(), "expected a string, got " + describe(kv.second),
                kv.second);
        continue;
      }
      out[kv.first.Scalar()] = kv.second.IsNull() ? "" : kv.second.Scalar();
    }
  }

  static std::string join(const std::string& path, const char* key) {
    return path.empty() ? std::string(key) : path + "." + key;
  }
  static std::string index(const std::string& path, std::size_t i) {
    return path + "[" + std::to_string(i) + "]";
  }

 private:
  Violations& problems_;
};

// The sections, each filling its part of the model and recording every problem in `r`.
void parse_domain(Reader& r, const YAML::Node& n, Domain& d);            // parse_domain.cpp
void parse_devices(Reader& r, const YAML::Node& n, const std::string& p, Devices& dev);  // parse_devices.cpp
void parse_volume(Reader& r, const YAML::Node& n, const std::string& p, Volume& v);     // parse_volumes.cpp
void parse_network(Reader& r, const YAML::Node& n, const std::string& p, Network& net);  // parse_volumes.cpp

}  // namespace chl::vmi

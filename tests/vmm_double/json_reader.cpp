#include "tests/vmm_double/json_reader.hpp"

#include <cstdint>

namespace chl::vmm_double {

const JsonNode* JsonNode::find(std::string_view key) const {
  // serde keeps the last duplicate; so do we.
  const JsonNode* found = nullptr;
  for (const auto& [k, v] : members) {
    if (k == key) found = &v;
  }
  return found;
}

std::string at(const JsonPos& pos) {
  return " at line " + std::to_string(pos.line) + " column " + std::to_string(pos.column);
}

namespace {

class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  tl::expected<JsonNode, std::string> document() {
    auto v = value();
    if (!v) return v;
    skip_ws();
    if (i_ < s_.size()) return tl::unexpected(peek_error("trailing characters"));
    return v;
  }

 private:
  // Position after consuming s_[0, idx).
  [[nodiscard]] JsonPos pos_of(std::size_t idx) const {
    JsonPos p;
    std::size_t line_start = 0;
    for (std::size_t k = 0; k < idx && k < s_.size(); ++k) {
      if (s_[k] == '\n') {
        ++p.line;
        line_start = k + 1;
      }
    }
    p.column = idx - line_start;
    return p;
  }
  [[nodiscard]] std::string error(const std::string& what) const { return what + at(pos_of(i_)); }
  // serde's peek errors point just past the peeked character.
  [[nodiscard]] std::string peek_error(const std::string& what) const {
    return what + at(pos_of(std::min(s_.size(), i_ + 1)));
  }

  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r'))
      ++i_;
  }

  tl::expected<JsonNode, std::string> value() {
    skip_ws();
    JsonNode n;
    n.start = pos_of(i_);
    if (i_ >= s_.size()) return tl::unexpected(error("EOF while parsing a value"));
    const char c = s_[i_];
    switch (c) {
      case 'n':
        if (auto e = ident("null"); !e.empty()) return tl::unexpected(e);
        n.kind = JsonNode::Kind::Null;
        break;
      case 't':
        if (auto e = ident("true"); !e.empty()) return tl::unexpected(e);
        n.kind = JsonNode::Kind::Bool;
        n.boolean = true;
        break;
      case 'f':
        if (auto e = ident("false"); !e.empty()) return tl::unexpected(e);
        n.kind = JsonNode::Kind::Bool;
        n.boolean = false;
        break;
      case '"': {
        auto str = string();
        if (!str) return tl::unexpected(str.error());
        n.kind = JsonNode::Kind::String;
        n.text = std::move(*str);
        break;
      }
      case '[': {
        ++i_;
        n.kind = JsonNode::Kind::Array;
        skip_ws();
        if (i_ < s_.size() && s_[i_] == ']') {
          ++i_;
          break;
        }
        for (;;) {
          auto item = value();
          if (!item) return item;
          n.items.push_back(std::move(*item));
          skip_ws();
          if (i_ >= s_.size()) return tl::unexpected(error("EOF while parsing a list"));
          if (s_[i_] == ',') {
            ++i_;
            skip_ws();
            if (i_ < s_.size() && s_[i_] == ']')
              return tl::unexpected(peek_error("trailing comma"));
            continue;
          }
          if (s_[i_] == ']') {
            ++i_;
            break;
          }
          return tl::unexpected(peek_error("expected `,` or `]`"));
        }
        break;
      }
      case '{': {
        ++i_;
        n.kind = JsonNode::Kind::Object;
        skip_ws();
        if (i_ < s_.size() && s_[i_] == '}') {
          ++i_;
          break;
        }
        for (;;) {
          skip_ws();
          if (i_ >= s_.size()) return tl::unexpected(error("EOF while parsing an object"));
          if (s_[i_] != '"') return tl::unexpected(peek_error("key must be a string"));
          auto key = string();
          if (!key) return tl::unexpected(key.error());
          skip_ws();
          if (i_ >= s_.size()) return tl::unexpected(error("EOF while parsing an object"));
          if (s_[i_] != ':') return tl::unexpected(peek_error("expected `:`"));
          ++i_;
          auto member = value();
          if (!member) return member;
          n.members.emplace_back(std::move(*key), std::move(*member));
          skip_ws();
          if (i_ >= s_.size()) return tl::unexpected(error("EOF while parsing an object"));
          if (s_[i_] == ',') {
            ++i_;
            skip_ws();
            if (i_ < s_.size() && s_[i_] == '}')
              return tl::unexpected(peek_error("trailing comma"));
            continue;
          }
          if (s_[i_] == '}') {
            ++i_;
            break;
          }
          return tl::unexpected(peek_error("expected `,` or `}`"));
        }
        break;
      }
      default:
        if (c == '-' || (c >= '0' && c <= '9')) {
          auto num = number();
          if (!num) return tl::unexpected(num.error());
          n.kind = JsonNode::Kind::Number;
          n.text = std::move(*num);
          break;
        }
        return tl::unexpected(peek_error("expected value"));
    }
    n.end = pos_of(i_);
    return n;
  }

  // Returns an empty string on success, else the error text.
  std::string ident(std::string_view word) {
    ++i_;  // first letter already matched
    for (std::size_t k = 1; k < word.size(); ++k) {
      if (i_ >= s_.size()) return error("EOF while parsing a value");
      const char got = s_[i_++];
      if (got != word[k]) return error("expected ident");
    }
    return {};
  }

  tl::expected<std::string, std::string> number() {
    const std::size_t begin = i_;
    auto digit = [&](std::size_t k) { return k < s_.size() && s_[k] >= '0' && s_[k] <= '9'; };
    if (s_[i_] == '-') ++i_;
    if (!digit(i_)) {
      if (i_ >= s_.size()) return tl::unexpected(error("EOF while parsing a value"));
      return tl::unexpected(peek_error("invalid number"));
    }
    if (s_[i_] == '0') {
      ++i_;
      if (digit(i_)) return tl::unexpected(peek_error("invalid number"));
    } else {
      while (digit(i_)) ++i_;
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!digit(i_)) {
        if (i_ >= s_.size()) return tl::unexpected(error("EOF while parsing a value"));
        return tl::unexpected(peek_error("invalid number"));
      }
      while (digit(i_)) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digit(i_)) {
        if (i_ >= s_.size()) return tl::unexpected(error("EOF while parsing a value"));
        return tl::unexpected(peek_error("invalid number"));
      }
      while (digit(i_)) ++i_;
    }
    return std::string(s_.substr(begin, i_ - begin));
  }

  static void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  tl::expected<std::uint32_t, std::string> hex4() {
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      if (i_ >= s_.size()) return tl::unexpected(error("EOF while parsing a string"));
      const char h = s_[i_++];
      v <<= 4;
      if (h >= '0' && h <= '9') {
        v |= static_cast<std::uint32_t>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        v |= static_cast<std::uint32_t>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        v |= static_cast<std::uint32_t>(h - 'A' + 10);
      } else {
        return tl::unexpected(error("invalid escape"));
      }
    }
    return v;
  }

  tl::expected<std::string, std::string> string() {
    ++i_;  // opening quote
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) return tl::unexpected(error("EOF while parsing a string"));
      const auto c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return out;
      if (c < 0x20)
        return tl::unexpected(
            error("control character (\\u0000-\\u001F) found while parsing a string"));
      if (c != '\\') {
        out.push_back(static_cast<char>(c));
        continue;
      }
      if (i_ >= s_.size()) return tl::unexpected(error("EOF while parsing a string"));
      const char e = s_[i_++];
      switch (e) {
        case '"':
          out.push_back('"');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '/':
          out.push_back('/');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          auto cp = hex4();
          if (!cp) return tl::unexpected(cp.error());
          std::uint32_t code = *cp;
          if (code >= 0xD800 && code <= 0xDBFF) {
            if (i_ + 1 >= s_.size() || s_[i_] != '\\' || s_[i_ + 1] != 'u') {
              return tl::unexpected(error("unexpected end of hex escape"));
            }
            i_ += 2;
            auto lo = hex4();
            if (!lo) return tl::unexpected(lo.error());
            if (*lo < 0xDC00 || *lo > 0xDFFF)
              return tl::unexpected(error("lone leading surrogate in hex escape"));
            code = 0x10000 + ((code - 0xD800) << 10) + (*lo - 0xDC00);
          }
          append_utf8(out, code);
          break;
        }
        default:
          return tl::unexpected(error("invalid escape"));
      }
    }
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

}  // namespace

tl::expected<JsonNode, std::string> parse_json(std::string_view text) {
  return Reader(text).document();
}

}  // namespace chl::vmm_double

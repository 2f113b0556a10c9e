#include "vmm_api/error.hpp"

#include <nlohmann/json.hpp>

namespace chl::vmm_api {
namespace {

constexpr std::string_view kHttpMarker = "HTTP ";

class VmmApiCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "vmm_api"; }
  std::string message(int ev) const override {
    switch (static_cast<ApiErrc>(ev)) {
      case ApiErrc::socket_missing:
        return "VMM API socket does not exist";
      case ApiErrc::connection_refused:
        return "VMM API socket refused the connection";
      case ApiErrc::timeout:
        return "VMM API call timed out";
      case ApiErrc::malformed_response:
        return "malformed response from the VMM API";
      case ApiErrc::connection_closed:
        return "VMM closed the API connection mid-call";
    }
    return "unknown vmm_api error";
  }
};

class HttpCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "vmm_api.http"; }
  std::string message(int ev) const override { return "HTTP " + std::to_string(ev); }
};

// Where the messages start in an HTTP error's context: after the last "HTTP <status>: ".
std::optional<std::size_t> messages_offset(const common::Error& e) {
  if (e.code.category() != http_category()) {
    return std::nullopt;
  }
  const std::string marker = std::string(kHttpMarker) + std::to_string(e.code.value()) + ": ";
  // The marker is ours; CH's text comes after it, so search from the left for the first
  // occurrence after any outer wrapping ("outer: PUT vm.boot: HTTP 500: ...").
  const auto pos = e.context.find(marker);
  if (pos == std::string::npos) {
    return std::nullopt;
  }
  return pos + marker.size();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() &&
         (s.front() == ' ' || s.front() == '\n' || s.front() == '\r' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace

const std::error_category& vmm_api_category() {
  static const VmmApiCategory c;
  return c;
}

const std::error_category& http_category() {
  static const HttpCategory c;
  return c;
}

std::error_code make_error_code(ApiErrc e) { return {static_cast<int>(e), vmm_api_category()}; }

std::optional<ApiErrc> api_errc(const common::Error& e) {
  if (e.code.category() != vmm_api_category()) {
    return std::nullopt;
  }
  return static_cast<ApiErrc>(e.code.value());
}

std::optional<int> http_status(const common::Error& e) {
  if (e.code.category() != http_category()) {
    return std::nullopt;
  }
  return e.code.value();
}

std::string ch_message(const common::Error& e) {
  auto off = messages_offset(e);
  if (!off) {
    return {};
  }
  return e.context.substr(*off);
}

std::vector<std::string> ch_messages(const common::Error& e) {
  std::vector<std::string> out;
  auto off = messages_offset(e);
  if (!off) {
    return out;
  }
  std::string_view rest(e.context);
  rest.remove_prefix(*off);
  for (;;) {
    const auto sep = rest.find(": ");
    if (sep == std::string_view::npos) {
      out.emplace_back(rest);
      break;
    }
    out.emplace_back(rest.substr(0, sep));
    rest.remove_prefix(sep + 2);
  }
  return out;
}

std::vector<std::string> parse_ch_error_body(std::string_view body) {
  std::vector<std::string> out;
  const auto text = trim(body);
  if (text.empty()) {
    return out;
  }
  auto j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_array()) {
    bool all_strings = true;
    for (const auto& m : j) {
      all_strings = all_strings && m.is_string();
    }
    if (all_strings) {
      for (const auto& m : j) {
        // Some messages end with a Rust backtrace ("...\n\nStack backtrace: ..."): keep the
        // text before it so the context stays one readable line.
        auto s = m.get<std::string>();
        if (auto bt = s.find("\n\nStack backtrace:"); bt != std::string::npos) {
          s.resize(bt);
        }
        out.emplace_back(trim(s));
      }
      return out;
    }
  }
  if (j.is_string()) {
    out.push_back(j.get<std::string>());
    return out;
  }
  out.emplace_back(text);
  return out;
}

common::Error http_error(std::string_view what, int status, std::string_view reason,
                         const std::vector<std::string>& messages) {
  std::string ctx(what);
  ctx.append(": ").append(kHttpMarker).append(std::to_string(status));
  if (messages.empty()) {
    if (!reason.empty()) {
      ctx.append(" ").append(reason);
    }
  } else {
    ctx.append(": ");
    for (std::size_t i = 0; i < messages.size(); ++i) {
      if (i) {
        ctx.append(": ");
      }
      ctx.append(messages[i]);
    }
  }
  return common::Error{std::error_code(status, http_category()), std::move(ctx)};
}

}  // namespace chl::vmm_api

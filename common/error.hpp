#pragma once
// Error values for the whole project: Result<T> = tl::expected<T, Error>.
// An Error carries a std::error_code (errno, or a domain category such as the VMM API's
// HTTP status) and a human context chain wrapped "outer: inner" as it rises.
#include <cerrno>
#include <string>
#include <system_error>
#include <utility>

#include <tl/expected.hpp>

namespace chl::common {

struct Error {
  std::error_code code;
  std::string context;

  // "outer: inner" — returns a copy with `outer` prepended.
  [[nodiscard]] Error wrap(std::string_view outer) const&;
  [[nodiscard]] Error wrap(std::string_view outer) &&;
  // The full text: the context, and the code's message when the context does not say it.
  [[nodiscard]] std::string message() const;
};

template <typename T>
using Result = tl::expected<T, Error>;
using Status = Result<void>;

// An error from a code and a context.
// A system error_code (system or generic category: std::filesystem, Asio): its message is added
// to the context unless the context already says it. An errc, or our own categories: the context
// is the whole message.
[[nodiscard]] tl::unexpected<Error> fail(std::error_code code, std::string context);
[[nodiscard]] tl::unexpected<Error> fail(std::errc code, std::string context);
// An error from the current errno: "context: strerror(errno)".
[[nodiscard]] tl::unexpected<Error> fail_errno(std::string context);
[[nodiscard]] tl::unexpected<Error> fail_errno(int err, std::string context);

// Wrap the error of a Result (if any) with `outer`, keeping the value otherwise.
template <typename T>
Result<T> wrap(Result<T>&& r, std::string_view outer) {
  if (r) return std::move(r);
  return tl::unexpected(std::move(r.error()).wrap(outer));
}

}  // namespace chl::common

// Propagate an error: `CHL_TRY(auto x, expr)`; for Status use CHL_TRY_VOID(expr).
#define CHL_CONCAT_INNER(a, b) a##b
#define CHL_CONCAT(a, b) CHL_CONCAT_INNER(a, b)
#define CHL_TRY_IMPL(tmp, decl, expr)                                      \
  auto tmp = (expr);                                                      \
  if (!tmp) return ::tl::unexpected(std::move(tmp.error()));              \
  decl = std::move(*tmp)
#define CHL_TRY(decl, expr) CHL_TRY_IMPL(CHL_CONCAT(chl_try_, __LINE__), decl, expr)
#define CHL_TRY_VOID(expr)                                                 \
  do {                                                                    \
    auto chl_try_v = (expr);                                              \
    if (!chl_try_v) return ::tl::unexpected(std::move(chl_try_v.error())); \
  } while (0)

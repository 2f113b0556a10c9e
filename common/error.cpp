#include "common/error.hpp"

#include <cstring>

namespace chl::common {

Error Error::wrap(std::string_view outer) const& {
  Error e = *this;
  return std::move(e).wrap(outer);
}

Error Error::wrap(std::string_view outer) && {
  if (context.empty()) {
    context = std::string(outer);
  } else {
    std::string s;
    s.reserve(outer.size() + 2 + context.size());
    s.append(outer).append(": ").append(context);
    context = std::move(s);
  }
  return std::move(*this);
}

std::string Error::message() const {
  if (context.empty()) return code.message();
  return context;
}

tl::unexpected<Error> fail(std::error_code code, std::string context) {
  // An error_code from the system (std::filesystem, Asio): say what it was, once. Our own
  // categories (the VMM API's...) are already in the context.
  const bool system = code.category() == std::system_category() || code.category() == std::generic_category();
  if (code && system && !context.empty()) {
    const std::string why = code.message();
    if (!why.empty() && context.find(why) == std::string::npos) context += ": " + why;
  }
  return tl::unexpected(Error{code, std::move(context)});
}

tl::unexpected<Error> fail(std::errc code, std::string context) {
  // An errc is ours: the context says everything.
  return tl::unexpected(Error{std::make_error_code(code), std::move(context)});
}

tl::unexpected<Error> fail_errno(int err, std::string context) {
  std::string text = std::move(context);
  text.append(": ").append(std::strerror(err));
  return tl::unexpected(Error{std::error_code(err, std::system_category()), std::move(text)});
}

tl::unexpected<Error> fail_errno(std::string context) { return fail_errno(errno, std::move(context)); }

}  // namespace chl::common

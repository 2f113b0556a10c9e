#pragma once
// Syscall helpers: retry EINTR only; EAGAIN and everything else go back to the caller.
#include <cerrno>

namespace chl::common {

template <typename F>
auto retry_eintr(F&& f) -> decltype(f()) {
  decltype(f()) r;
  do {
    r = f();
  } while (r == -1 && errno == EINTR);
  return r;
}

}  // namespace chl::common

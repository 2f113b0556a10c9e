#include "common/unique_fd.hpp"

#include <unistd.h>

namespace chl::common {

void UniqueFd::reset(int fd) noexcept {
  if (fd_ >= 0 && fd_ != fd) ::close(fd_);  // never retried: the fd is gone either way
  fd_ = fd;
}

}  // namespace chl::common

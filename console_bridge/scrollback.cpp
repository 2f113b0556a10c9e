#include "console_bridge/scrollback.hpp"

#include <algorithm>
#include <cstring>

namespace chl::console_bridge {

void Scrollback::append(std::span<const char> data) {
  const std::size_t cap = buf_.size();
  if (cap == 0 || data.empty()) return;
  if (data.size() >= cap) {  // only the tail survives
    std::memcpy(buf_.data(), data.data() + (data.size() - cap), cap);
    start_ = 0;
    size_ = cap;
    return;
  }
  // Write at the end of the ring, in at most two pieces.
  std::size_t end = (start_ + size_) % cap;
  std::size_t first = std::min(data.size(), cap - end);
  std::memcpy(buf_.data() + end, data.data(), first);
  std::memcpy(buf_.data(), data.data() + first, data.size() - first);
  std::size_t total = size_ + data.size();
  if (total > cap) {
    start_ = (start_ + (total - cap)) % cap;
    size_ = cap;
  } else {
    size_ = total;
  }
}

std::string Scrollback::contents() const {
  std::string out;
  out.reserve(size_);
  const std::size_t cap = buf_.size();
  std::size_t first = std::min(size_, cap - start_);
  out.append(buf_.data() + start_, first);
  out.append(buf_.data(), size_ - first);
  return out;
}

}  // namespace chl::console_bridge

#pragma once
// A bounded in-memory copy of the most recent guest output (a byte ring). A newly connected
// console client is sent its contents before live output.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace chl::console_bridge {

class Scrollback {
 public:
  explicit Scrollback(std::size_t capacity) : buf_(capacity) {}

  // Keep the last capacity() bytes of everything appended.
  void append(std::span<const char> data);
  // The kept bytes, oldest first.
  [[nodiscard]] std::string contents() const;
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] std::size_t capacity() const { return buf_.size(); }

 private:
  std::vector<char> buf_;
  std::size_t start_ = 0;  // index of the oldest byte
  std::size_t size_ = 0;
};

}  // namespace chl::console_bridge

#pragma once
// qemu-ga's wire framing, read incrementally: the agent writes JSON objects (one per reply, each
// followed by "\n", docs/interop/qemu-ga.rst) and, in answer to guest-sync-delimited, a 0xFF byte
// before the reply (qga/qapi-schema.json, guest-sync-delimited). One read() is never one message:
// feed() takes any slice of the stream — half an object, three objects, an object split inside a
// string — and reports whole objects, delimiters and what it had to skip.
//
// 0xFF never occurs in UTF-8 JSON, so it resets the parser wherever it appears (inside a string
// too): what came before it is dropped, as qemu-ga's own parser does with the 0xFF a client sends.
// Bytes outside an object that are not whitespace are garbage: counted and skipped. An object
// longer than the limit is dropped whole (reported once as an overflow).
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace chl::guest_agent {

struct FrameEvent {
  enum class Kind { Frame, Delimiter, Overflow };
  Kind kind;
  std::string text;  // the object's bytes (Frame only)
};

class FrameParser {
 public:
  explicit FrameParser(std::size_t max_frame = 4u << 20) : max_frame_(max_frame) {}

  // Consume `bytes`; complete events are appended to `out` in stream order.
  void feed(std::string_view bytes, std::vector<FrameEvent>& out);
  // Forget any partial object (a new connection).
  void reset();

  [[nodiscard]] std::size_t garbage_bytes() const { return garbage_; }
  [[nodiscard]] bool in_frame() const { return depth_ > 0 || skipping_; }

 private:
  std::size_t max_frame_;
  std::string buf_;
  int depth_ = 0;
  bool in_string_ = false;
  bool escape_ = false;
  bool skipping_ = false;  // inside an overflowed object: its bytes are dropped to its end
  std::size_t garbage_ = 0;
};

}  // namespace chl::guest_agent

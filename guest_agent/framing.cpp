#include "guest_agent/framing.hpp"

namespace chl::guest_agent {

void FrameParser::reset() {
  buf_.clear();
  depth_ = 0;
  in_string_ = false;
  escape_ = false;
  skipping_ = false;
}

void FrameParser::feed(std::string_view bytes, std::vector<FrameEvent>& out) {
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == 0xFF) {
      reset();
      out.push_back({FrameEvent::Kind::Delimiter, {}});
      continue;
    }
    if (depth_ == 0) {
      if (c == '{') {
        depth_ = 1;
        buf_.assign(1, '{');
      } else if (c != ' ' && c != '\n' && c != '\r' && c != '\t') {
        ++garbage_;
      }
      continue;
    }
    if (!skipping_) buf_.push_back(ch);
    if (in_string_) {
      if (escape_)
        escape_ = false;
      else if (c == '\\')
        escape_ = true;
      else if (c == '"')
        in_string_ = false;
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      if (--depth_ == 0) {
        if (!skipping_) out.push_back({FrameEvent::Kind::Frame, std::move(buf_)});
        reset();
        continue;
      }
    }
    if (!skipping_ && buf_.size() > max_frame_) {
      skipping_ = true;
      buf_.clear();
      buf_.shrink_to_fit();
      out.push_back({FrameEvent::Kind::Overflow, {}});
    }
  }
}

}  // namespace chl::guest_agent

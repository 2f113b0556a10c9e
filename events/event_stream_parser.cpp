#include "events/event_stream_parser.hpp"

#include "common/log.hpp"

namespace chl::events {

namespace {
constexpr std::size_t kPreview = 48;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}
}  // namespace

EventStreamParser::EventStreamParser(ParserOptions options) : opts_(options) {
  if (opts_.max_event_bytes < 2) opts_.max_event_bytes = 2;
}

void EventStreamParser::start_object() {
  flush_garbage_log();
  mode_ = Mode::InObject;
  buf_.clear();
  depth_ = 0;
  in_string_ = false;
  escape_ = false;
  line_blank_ = false;
  line_start_ = false;
  skipped_ = 0;
}

void EventStreamParser::abandon_object(const char* why) {
  ++stats_.invalid;
  CHL_LOG_WARN("event monitor: skipping a broken event ({}) after {} bytes: {}", why,
               mode_ == Mode::Skipping ? skipped_ : buf_.size(),
               printable(std::string_view(buf_).substr(0, kPreview)));
  mode_ = Mode::Between;
  buf_.clear();
}

void EventStreamParser::note_garbage(char c) {
  ++stats_.garbage_bytes;
  if (garbage_run_ == 0) ++stats_.garbage_runs;
  ++garbage_run_;
  if (garbage_preview_.size() < kPreview) garbage_preview_.push_back(c);
}

void EventStreamParser::flush_garbage_log() {
  if (garbage_run_ == 0) return;
  CHL_LOG_WARN("event monitor: skipped {} bytes that are not an event: {}", garbage_run_,
               printable(garbage_preview_));
  garbage_run_ = 0;
  garbage_preview_.clear();
}

void EventStreamParser::end_object(const Sink& sink) {
  if (mode_ == Mode::Skipping) {
    ++stats_.oversized;
    CHL_LOG_WARN("event monitor: skipped an event of {} bytes (limit {})", skipped_,
                 opts_.max_event_bytes);
    mode_ = Mode::Between;
    return;
  }
  mode_ = Mode::Between;
  auto j = nlohmann::json::parse(buf_, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    ++stats_.invalid;
    CHL_LOG_WARN("event monitor: skipping an object that is not valid JSON: {}",
                 printable(std::string_view(buf_).substr(0, kPreview)));
    return;
  }
  auto ev = vmm_event_from_json(j);
  if (!ev) {
    ++stats_.invalid;
    CHL_LOG_WARN("event monitor: skipping an object that is not an event: {}: {}",
                 ev.error().message(), printable(std::string_view(buf_).substr(0, kPreview)));
    return;
  }
  ++stats_.events;
  buf_.clear();
  sink(std::move(*ev));
}

void EventStreamParser::feed(std::string_view bytes, const Sink& sink) {
  stats_.bytes += bytes.size();
  const char* p = bytes.data();
  const std::size_t n = bytes.size();
  std::size_t i = 0;
  while (i < n) {
    if (mode_ == Mode::Between) {
      // Skip whitespace and garbage up to the next '{'.
      for (; i < n; ++i) {
        char c = p[i];
        if (c == '{') break;
        if (is_space(c)) {
          // Whitespace separates events; inside a garbage run it only shows in the log preview.
          if (garbage_run_ != 0 && garbage_preview_.size() < kPreview) garbage_preview_.push_back(c);
          continue;
        }
        note_garbage(c);
      }
      if (i == n) break;
      start_object();
    }
    // Inside an object: scan for the closing brace, copying whole segments.
    const std::size_t seg = i;
    bool closed = false;
    bool broken = false;
    const char* why = "";
    for (; i < n; ++i) {
      char c = p[i];
      if (in_string_) {
        if (escape_) {
          escape_ = false;
        } else if (c == '\\') {
          escape_ = true;
        } else if (c == '"') {
          in_string_ = false;
        } else if (static_cast<unsigned char>(c) < 0x20) {
          broken = true;
          why = "raw control character inside a string";
          break;
        }
        continue;
      }
      // CH pretty-prints: a '{' in column 0 only ever opens a top-level event (nested objects
      // follow `": ` or are indented). One there while an object is open means that object
      // was cut short: abandon it and start the new event at this brace.
      if (c == '{' && line_start_ && depth_ > 0) {
        broken = true;
        why = "a new event began before the object closed";
        break;
      }
      line_start_ = c == '\n';
      switch (c) {
        case '"':
          in_string_ = true;
          line_blank_ = false;
          break;
        case '{':
        case '[':
          ++depth_;
          line_blank_ = false;
          break;
        case '}':
        case ']':
          if (depth_ > 0) --depth_;
          line_blank_ = false;
          break;
        case '\n':
          if (line_blank_ && opts_.resync_on_blank_line) {
            broken = true;
            why = "blank line before the object closed";
          }
          line_blank_ = true;
          break;
        case ' ':
        case '\t':
        case '\r':
          break;
        default:
          line_blank_ = false;
          break;
      }
      if (broken) break;
      if (depth_ == 0) {
        closed = true;
        ++i;  // include the closing brace
        break;
      }
    }
    const std::size_t len = i - seg;
    if (mode_ == Mode::InObject) {
      if (buf_.size() + len > opts_.max_event_bytes) {
        mode_ = Mode::Skipping;
        skipped_ = buf_.size();
        buf_.clear();
      } else {
        buf_.append(p + seg, len);
      }
    }
    if (mode_ == Mode::Skipping) skipped_ += len;
    if (broken) {
      abandon_object(why);
      // The offending byte is re-examined between objects (a newline is just whitespace).
      continue;
    }
    if (closed) end_object(sink);
  }
}

std::size_t EventStreamParser::feed(std::string_view bytes, std::vector<VmmEvent>& out) {
  const std::size_t before = out.size();
  feed(bytes, [&out](VmmEvent&& e) { out.push_back(std::move(e)); });
  return out.size() - before;
}

bool EventStreamParser::finish() {
  bool clean = true;
  if (mode_ != Mode::Between) {
    ++stats_.invalid;
    CHL_LOG_WARN("event monitor: stream ended inside an event ({} bytes read of it)",
                 mode_ == Mode::Skipping ? skipped_ : buf_.size());
    clean = false;
  }
  if (garbage_run_ != 0) clean = false;
  flush_garbage_log();
  mode_ = Mode::Between;
  buf_.clear();
  depth_ = 0;
  in_string_ = escape_ = false;
  return clean;
}

}  // namespace chl::events

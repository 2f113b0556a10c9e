#pragma once
// Incremental parser for Cloud Hypervisor's event-monitor stream: JSON objects (pretty-printed
// by CH, one blank line after each). Bytes are fed as they are read; one read may hold half an
// event, several events, or garbage. Objects are delimited by tracking brace depth with string
// and escape awareness — never by line or by read. Garbage between objects is skipped (and
// logged once per run); an object larger than the limit is skipped with a log line; an object
// that is not valid JSON or not a valid event is skipped. The parser then resynchronizes on
// the next '{' outside an object.
//
// Recovery inside a broken object: JSON forbids raw control characters inside strings, and CH
// never writes a blank line inside an object, so a raw newline inside a string, or (with
// `resync_on_blank_line`) an empty line while an object is still open, abandons the object and
// resynchronizes. So does a '{' in column 0 while an object is open: CH's pretty printer puts
// a brace there only to open a top-level event, so the open object was cut short (an event
// written after a truncated one is not lost). A well-formed object split anywhere is never
// affected by this.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "events/vmm_event.hpp"

namespace chl::events {

struct ParserOptions {
  std::size_t max_event_bytes = 64 * 1024;  // one object, braces included
  bool resync_on_blank_line = true;
};

struct ParserStats {
  std::uint64_t events = 0;          // events delivered
  std::uint64_t garbage_bytes = 0;   // bytes skipped outside objects
  std::uint64_t garbage_runs = 0;    // separate runs of garbage
  std::uint64_t oversized = 0;       // objects skipped for exceeding max_event_bytes
  std::uint64_t invalid = 0;         // objects skipped: bad JSON, not an event, or cut short
  std::uint64_t bytes = 0;           // bytes fed in total
};

class EventStreamParser {
 public:
  using Sink = std::function<void(VmmEvent&&)>;

  explicit EventStreamParser(ParserOptions options = {});

  // Feed the next bytes; each complete event is passed to `sink` in stream order.
  void feed(std::string_view bytes, const Sink& sink);
  // Convenience: append complete events to `out`; returns how many were appended.
  std::size_t feed(std::string_view bytes, std::vector<VmmEvent>& out);
  // The stream ended (EOF). Logs and counts a partial object or pending garbage; returns true
  // when the stream ended cleanly between objects. The parser is reset for reuse.
  bool finish();

  [[nodiscard]] const ParserStats& stats() const { return stats_; }
  // True while part of an object has been read but not its end.
  [[nodiscard]] bool in_object() const { return mode_ != Mode::Between; }

 private:
  enum class Mode { Between, InObject, Skipping };
  void start_object();
  void end_object(const Sink& sink);
  void abandon_object(const char* why);
  void note_garbage(char c);
  void flush_garbage_log();

  ParserOptions opts_;
  ParserStats stats_;
  Mode mode_ = Mode::Between;
  std::string buf_;            // the current object's bytes (Mode::InObject)
  std::size_t depth_ = 0;
  bool in_string_ = false;
  bool escape_ = false;
  bool line_blank_ = false;    // only whitespace since the last newline (outside strings)
  bool line_start_ = false;    // the last byte was a newline (outside strings)
  std::size_t skipped_ = 0;    // bytes of the oversized object skipped so far
  std::size_t garbage_run_ = 0;
  std::string garbage_preview_;
};

}  // namespace chl::events

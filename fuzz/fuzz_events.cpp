// libFuzzer target: Cloud Hypervisor's event-monitor stream through events::EventStreamParser,
// fed in chunks of fuzzed sizes (a read is never a message), then through the domain-state
// tracker. Input layout: byte 0 seeds the chunk sizes, byte 1 picks the parser options, the rest
// is the stream.
// Properties checked: no crash/UB/leak; the events and counters do not depend on how the stream
// was split; every delivered event re-serialized the way CH writes it parses back to itself;
// the parser's byte count matches what it was fed.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "common/log.hpp"
#include "fuzz/fuzz_support.hpp"
#include "events/domain_state_tracker.hpp"
#include "events/event_stream_parser.hpp"
#include "events/vmm_event.hpp"

namespace {

using chl::fuzz::require;
using chl::fuzz::Rng;



}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  chl::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace chl::events;
  if (size < 2) return 0;
  Rng rng{0x9e3779b9u ^ (std::uint32_t{data[0]} * 2654435761u)};
  ParserOptions opts;
  if (data[1] & 1) opts.max_event_bytes = 64 + (data[1] >> 1) * 16;  // small limits too
  opts.resync_on_blank_line = (data[1] & 2) == 0;
  const std::string_view stream(reinterpret_cast<const char*>(data + 2), size - 2);

  // Whole stream in one feed.
  EventStreamParser whole(opts);
  std::vector<VmmEvent> expected;
  whole.feed(stream, expected);
  const ParserStats whole_stats = whole.stats();
  const bool whole_clean = whole.finish();

  // The same stream in random chunks (1 byte to 4 KiB, biased to small).
  EventStreamParser split(opts);
  std::vector<VmmEvent> got;
  std::size_t pos = 0;
  while (pos < stream.size()) {
    const std::uint32_t r = rng.next();
    std::size_t n = (r & 3) == 0 ? 1 + (r >> 2) % 4096 : 1 + (r >> 2) % 16;
    if (n > stream.size() - pos) n = stream.size() - pos;
    split.feed(stream.substr(pos, n), got);
    pos += n;
  }
  require(split.stats().bytes == stream.size());
  require(split.stats().events == got.size());
  require(got == expected);
  require(split.stats().events == whole_stats.events);
  require(split.stats().invalid == whole_stats.invalid);
  require(split.stats().oversized == whole_stats.oversized);
  require(split.stats().garbage_bytes == whole_stats.garbage_bytes);
  require(split.finish() == whole_clean);

  // Round trip: what CH would write for each event parses back to the same event.
  DomainStateTracker tracker;
  for (const VmmEvent& e : got) {
    const std::string bytes = serialize_like_ch(e);
    EventStreamParser again;  // default limits: re-serialized events may be longer
    std::vector<VmmEvent> back;
    again.feed(bytes, back);
    if (bytes.size() <= ParserOptions{}.max_event_bytes) {
      require(back.size() == 1 && back[0] == e);
      require(again.finish());
    }
    (void)tracker.on_vmm_event(e);
  }
  (void)tracker.on_vmm_exited(VmmExit::from_wait_status(data[0]));
  return 0;
}

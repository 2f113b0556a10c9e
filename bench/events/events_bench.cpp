// events_bench: how fast the launcher can consume Cloud Hypervisor's event-monitor stream.
//
//   events_bench [--events N] [--chunk BYTES] [--rounds R]
//
// Builds a stream of N events serialized exactly as CH writes them (pretty JSON + blank line,
// a mix of lifecycle events with and without properties), then feeds it in reads of BYTES
// (default 4096, a pipe read) through (1) the parser alone, (2) parser → DomainStateTracker →
// EventBus with two subscribers (a counter and a bounded queue drained as it goes). Prints
// the best of R rounds: events/s and MiB/s.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "events/domain_state_tracker.hpp"
#include "events/event_bus.hpp"
#include "events/event_stream_parser.hpp"

using namespace chl::events;
using Clock = std::chrono::steady_clock;

namespace {

std::string make_stream(std::size_t n) {
  // One VM's lifetime repeated: the tracker sees a plausible sequence every time.
  struct E {
    const char* source;
    const char* event;
    const char* key;
    const char* value;
  };
  const E cycle[] = {
      {"vm", "booting", nullptr, nullptr},   {"vm", "booted", nullptr, nullptr},
      {"vm", "pausing", nullptr, nullptr},   {"vm", "paused", nullptr, nullptr},
      {"vm", "resuming", nullptr, nullptr},  {"vm", "resumed", nullptr, nullptr},
      {"vm", "device-removed", "id", "disk2"}, {"vm", "resizing", nullptr, nullptr},
      {"vm", "resized", nullptr, nullptr},   {"vm", "rebooting", nullptr, nullptr},
      {"vm", "rebooted", nullptr, nullptr},  {"vm", "shutdown", nullptr, nullptr},
  };
  std::string s;
  s.reserve(n * 190);
  for (std::size_t i = 0; i < n; ++i) {
    const E& c = cycle[i % std::size(cycle)];
    VmmEvent e;
    e.secs = i / 1000;
    e.nanos = static_cast<std::uint32_t>((i % 1000) * 1000003 % 1000000000);
    e.source = c.source;
    e.event = c.event;
    if (c.key) e.properties = {{c.key, c.value}};
    s += serialize_like_ch(e);
  }
  return s;
}

struct Result {
  double seconds;
  std::size_t events;
};

Result run_parser(const std::string& stream, std::size_t chunk) {
  EventStreamParser p;
  std::size_t n = 0;
  auto t0 = Clock::now();
  for (std::size_t off = 0; off < stream.size(); off += chunk)
    p.feed(std::string_view(stream).substr(off, chunk), [&n](VmmEvent&&) { ++n; });
  p.finish();
  return {std::chrono::duration<double>(Clock::now() - t0).count(), n};
}

Result run_pipeline(const std::string& stream, std::size_t chunk) {
  EventStreamParser p;
  DomainStateTracker t;
  EventBus bus;
  EventQueue q(1024);
  std::size_t counted = 0, drained = 0;
  bus.subscribe([&counted](const DomainEvent&) { ++counted; });
  bus.subscribe([&q](const DomainEvent& e) { q.push(e); });
  std::size_t n = 0;
  auto t0 = Clock::now();
  for (std::size_t off = 0; off < stream.size(); off += chunk) {
    p.feed(std::string_view(stream).substr(off, chunk), [&](VmmEvent&& e) {
      ++n;
      for (const auto& d : t.on_vmm_event(e)) bus.publish(d);
    });
    while (q.pop()) ++drained;  // the socket client writing its queue out
  }
  p.finish();
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (counted != drained) std::fprintf(stderr, "events_bench: queue lost events (%zu vs %zu)\n", counted, drained);
  return {secs, n};
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t events = 200000, chunk = 4096;
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "events_bench: %s needs a value\n", name);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--events")) events = std::strtoull(next("--events"), nullptr, 10);
    else if (!std::strcmp(argv[i], "--chunk")) chunk = std::strtoull(next("--chunk"), nullptr, 10);
    else if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(next("--rounds"));
    else {
      std::fprintf(stderr, "usage: events_bench [--events N] [--chunk BYTES] [--rounds R]\n");
      return 2;
    }
  }
  if (events == 0 || chunk == 0 || rounds <= 0) {
    std::fprintf(stderr, "events_bench: --events, --chunk and --rounds must be positive\n");
    return 2;
  }
  chl::common::log::logger()->set_level(spdlog::level::warn);
  const std::string stream = make_stream(events);
  const double mib = static_cast<double>(stream.size()) / (1024.0 * 1024.0);
  std::printf("stream: %zu events, %.1f MiB (%.0f bytes/event), reads of %zu bytes, best of %d\n", events, mib,
              static_cast<double>(stream.size()) / static_cast<double>(events), chunk, rounds);
  for (int which = 0; which < 2; ++which) {
    Result best{1e9, 0};
    for (int r = 0; r < rounds; ++r) {
      Result res = which == 0 ? run_parser(stream, chunk) : run_pipeline(stream, chunk);
      if (res.events != events) {
        std::fprintf(stderr, "events_bench: parsed %zu events, expected %zu\n", res.events, events);
        return 1;
      }
      if (res.seconds < best.seconds) best = res;
    }
    std::printf("%-34s %10.0f events/s %8.1f MiB/s\n",
                which == 0 ? "parser" : "parser+tracker+bus(2 subscribers)",
                static_cast<double>(best.events) / best.seconds, mib / best.seconds);
    // For bench/run.sh (informational: no peer, no target).
    std::printf("RESULT\t%s\t%s\t%.0f\t\t\tevents/s\tinfo\t\n", which == 0 ? "events_parser" : "events_pipeline",
                which == 0 ? "event-monitor parser" : "events parser+tracker+bus",
                static_cast<double>(best.events) / best.seconds);
  }
  return 0;
}

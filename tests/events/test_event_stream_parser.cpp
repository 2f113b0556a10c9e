// The event-monitor parser against the exact bytes Cloud Hypervisor writes: whole, cut at every
// byte boundary, one byte at a time, merged, with garbage, broken and oversized objects.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>

#include "events/event_stream_parser.hpp"
#include "tests/events/event_fixtures.hpp"

using namespace chl::events;
namespace fx = chl::events::fixtures;

namespace {
std::vector<VmmEvent> parse_all(std::string_view s, ParserOptions o = {}, ParserStats* stats = nullptr) {
  EventStreamParser p(o);
  std::vector<VmmEvent> out;
  p.feed(s, out);
  p.finish();
  if (stats) *stats = p.stats();
  return out;
}

void check_same(const std::vector<VmmEvent>& got, const std::vector<VmmEvent>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == want[i]);
  }
}
}  // namespace

TEST_CASE("parser reads the verbatim start of CH's stream") {
  ParserStats st;
  auto evs = parse_all(fx::kVerbatimStart, {}, &st);
  REQUIRE(evs.size() == 2);
  CHECK(evs[0].secs == 0);
  CHECK(evs[0].nanos == 65748);
  CHECK(evs[0].source == "vmm");
  CHECK(evs[0].event == "starting");
  CHECK(evs[0].properties.is_null());
  CHECK(evs[1].nanos == 11566674);
  CHECK(evs[1].key() == "vm/booting");
  CHECK(st.events == 2);
  CHECK(st.garbage_bytes == 0);
  CHECK(st.invalid == 0);
}

TEST_CASE("serialize_like_ch reproduces CH's bytes exactly") {
  auto evs = parse_all(fx::kVerbatimStart);
  REQUIRE(evs.size() == 2);
  CHECK(serialize_like_ch(evs[0]) + serialize_like_ch(evs[1]) == fx::kVerbatimStart);
}

TEST_CASE("parser yields the same events whatever byte boundary the stream is cut at") {
  const auto want = [] {
    auto v = fx::observed_session();
    for (auto& e : fx::with_properties()) v.push_back(e);
    return v;
  }();
  const std::string stream = fx::kVerbatimStart.substr(0, 0) + fx::stream_of(want);
  for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
    CAPTURE(cut);
    EventStreamParser p;
    std::vector<VmmEvent> got;
    p.feed(std::string_view(stream).substr(0, cut), got);
    // Nothing is delivered before its closing brace has been read.
    CHECK(got.size() <= want.size());
    p.feed(std::string_view(stream).substr(cut), got);
    CHECK(p.finish());
    REQUIRE(got.size() == want.size());
    CHECK(got == want);
    CHECK(p.stats().invalid == 0);
    CHECK(p.stats().garbage_bytes == 0);
  }
}

TEST_CASE("parser fed one byte at a time and in random chunks") {
  const auto want = fx::observed_session();
  const std::string stream = fx::stream_of(want);
  {
    EventStreamParser p;
    std::vector<VmmEvent> got;
    std::size_t objects_closed = 0;
    for (std::size_t i = 0; i < stream.size(); ++i) {
      p.feed(std::string_view(&stream[i], 1), got);
      // An event is delivered exactly when its closing brace is read, not later.
      if (stream[i] == '}' && stream.compare(i + 1, 2, "\n\n") == 0) ++objects_closed;
      CHECK(got.size() == objects_closed);
    }
    CHECK(p.finish());
    check_same(got, want);
  }
  std::mt19937 rng(42);
  for (int round = 0; round < 50; ++round) {
    EventStreamParser p;
    std::vector<VmmEvent> got;
    std::size_t pos = 0;
    while (pos < stream.size()) {
      std::size_t n = std::uniform_int_distribution<std::size_t>(1, 400)(rng);
      n = std::min(n, stream.size() - pos);
      p.feed(std::string_view(stream).substr(pos, n), got);
      pos += n;
    }
    CHECK(p.finish());
    check_same(got, want);
  }
}

TEST_CASE("parser delivers several events merged in one read") {
  const auto a = fx::observed_session();
  const auto b = fx::with_properties();
  std::string merged = fx::stream_of(a) + fx::stream_of(b) + fx::stream_of(a);
  auto got = parse_all(merged);
  std::vector<VmmEvent> want = a;
  want.insert(want.end(), b.begin(), b.end());
  want.insert(want.end(), a.begin(), a.end());
  check_same(got, want);
}

TEST_CASE("parser does not need the blank line: compact objects back to back") {
  auto evs = fx::observed_session();
  std::string s;
  for (const auto& e : evs) s += to_json(e).dump();  // one line each, no separator at all
  check_same(parse_all(s), evs);
}

TEST_CASE("parser keeps braces and quotes inside strings") {
  auto props = fx::with_properties();
  auto got = parse_all(fx::stream_of(props));
  check_same(got, props);
  CHECK(got[3].property("id") == "we}ird\"{id\\");
  CHECK(got[1].property("event") == "panic");
  CHECK(got[0].property("missing").empty());
}

TEST_CASE("parser skips garbage between events and resynchronizes") {
  const auto evs = fx::observed_session();
  std::string s;
  const char* garbage[] = {"garbage\n", "}}}", "[1,2,3]\n", "\x01\x02\xff", "null", "\"a string\"", "]"};
  std::size_t garbage_bytes = 0;
  for (std::size_t i = 0; i < evs.size(); ++i) {
    std::string g = garbage[i % std::size(garbage)];
    s += g;
    garbage_bytes += static_cast<std::size_t>(
        std::count_if(g.begin(), g.end(), [](char c) { return c != '\n' && c != ' '; }));
    s += serialize_like_ch(evs[i]);
  }
  s += "trailing junk";
  garbage_bytes += 13 - 1;  // the space is whitespace
  ParserStats st;
  auto got = parse_all(s, {}, &st);
  check_same(got, evs);
  CHECK(st.garbage_bytes == garbage_bytes);
  CHECK(st.garbage_runs == evs.size() + 1);
  // And cut at every boundary too.
  for (std::size_t cut = 0; cut <= s.size(); cut += 7) {
    EventStreamParser p;
    std::vector<VmmEvent> out;
    p.feed(std::string_view(s).substr(0, cut), out);
    p.feed(std::string_view(s).substr(cut), out);
    p.finish();
    CHECK(out == evs);
  }
}

TEST_CASE("parser skips broken objects and recovers on the next event") {
  const auto good = fx::observed_session();
  const std::string e0 = serialize_like_ch(good[0]);
  const std::string e1 = serialize_like_ch(good[1]);
  SUBCASE("unterminated string: a raw newline ends it") {
    ParserStats st;
    auto got = parse_all("{\"timestamp\": \"unterminated\n\n" + e0 + e1, {}, &st);
    check_same(got, {good[0], good[1]});
    CHECK(st.invalid == 1);
  }
  SUBCASE("unbalanced braces: the blank line ends it") {
    ParserStats st;
    auto got = parse_all("{{{ \"a\": 1\n\n" + e0 + e1, {}, &st);
    check_same(got, {good[0], good[1]});
    CHECK(st.invalid == 1);
  }
  SUBCASE("a truncated object followed at once by the next event: that event is kept") {
    // What the VMM double's garbage injection writes: an event-like object cut short, then
    // the next real event on the following line with no blank line between them.
    ParserStats st;
    auto got = parse_all(e0 + "{\"source\":\"vm\",\"event\":\"booted\"\n" + e1, {}, &st);
    check_same(got, {good[0], good[1]});
    CHECK(st.invalid == 1);
  }
  SUBCASE("balanced but not JSON") {
    ParserStats st;
    auto got = parse_all("{ not json }\n\n" + e0 + e1, {}, &st);
    check_same(got, {good[0], good[1]});
    CHECK(st.invalid == 1);
  }
  SUBCASE("valid JSON but not an event") {
    ParserStats st;
    auto got = parse_all(std::string("{\"a\": 1}\n\n") +
                             "{\"timestamp\":{\"secs\":-1,\"nanos\":0},\"source\":\"vm\",\"event\":\"x\"}\n\n" +
                             "{\"timestamp\":{\"secs\":1,\"nanos\":2},\"source\":\"\",\"event\":\"x\"}\n\n" +
                             "{\"timestamp\":{\"secs\":1,\"nanos\":2000000000},\"source\":\"vm\",\"event\":\"x\"}\n\n" + e0,
                         {}, &st);
    check_same(got, {good[0]});
    CHECK(st.invalid == 4);
  }
  SUBCASE("stream ends inside an event") {
    EventStreamParser p;
    std::vector<VmmEvent> got;
    p.feed(e0 + e1.substr(0, e1.size() / 2), got);
    CHECK(p.in_object());
    CHECK_FALSE(p.finish());
    check_same(got, {good[0]});
    CHECK(p.stats().invalid == 1);
    // Reusable after finish().
    p.feed(e1, got);
    CHECK(got.size() == 2);
  }
}

TEST_CASE("parser skips an oversized event and keeps the next ones") {
  const auto good = fx::observed_session();
  VmmEvent huge = fx::ev(9, 9, "vm", "device-removed", {{"id", std::string(100 * 1024, 'x')}});
  std::string s = serialize_like_ch(good[0]) + serialize_like_ch(huge) + serialize_like_ch(good[1]);
  ParserStats st;
  auto got = parse_all(s, {}, &st);
  check_same(got, {good[0], good[1]});
  CHECK(st.oversized == 1);
  // Fed in small pieces the result is the same and memory stays bounded by the limit.
  EventStreamParser p(ParserOptions{.max_event_bytes = 1024});
  std::vector<VmmEvent> out;
  for (std::size_t pos = 0; pos < s.size(); pos += 100) p.feed(std::string_view(s).substr(pos, 100), out);
  CHECK(p.finish());
  check_same(out, {good[0], good[1]});
  CHECK(p.stats().oversized == 1);
  // An event exactly at the limit passes.
  const std::string one = serialize_like_ch(good[0]);
  const std::size_t object_bytes = one.find_last_of('}') + 1;
  CHECK(parse_all(one, ParserOptions{.max_event_bytes = object_bytes}).size() == 1);
  CHECK(parse_all(one, ParserOptions{.max_event_bytes = object_bytes - 1}).empty());
}

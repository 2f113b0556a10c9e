// EventBus fan-out: order, unsubscribe (also from inside a callback), a slow subscriber with a
// bounded queue never delays the others, RAII subscriptions.
#include <doctest/doctest.h>

#include <stdexcept>

#include "events/event_bus.hpp"

using namespace chl::events;

namespace {
DomainEvent make(const char* cause) {
  DomainEvent e;
  e.type = DomainEventType::Started;
  e.detail = EventDetail::Booted;
  e.state = DomainState::Running;
  e.reason = StateReason::Booted;
  e.cause = cause;
  return e;
}
}  // namespace

TEST_CASE("every subscriber gets every event - in order") {
  EventBus bus;
  std::vector<std::string> a, b;
  bus.subscribe([&](const DomainEvent& e) { a.push_back(e.cause); });
  bus.subscribe([&](const DomainEvent& e) { b.push_back(e.cause); });
  CHECK(bus.subscriber_count() == 2);
  bus.publish(make("one"));
  bus.publish(make("two"));
  CHECK(a == std::vector<std::string>{"one", "two"});
  CHECK(b == a);
  CHECK(bus.published() == 2);
}

TEST_CASE("unsubscribe stops delivery - also from inside a callback") {
  EventBus bus;
  std::vector<std::string> a, b, c;
  EventBus::SubscriptionId idb = 0;
  auto ida = bus.subscribe([&](const DomainEvent& e) {
    a.push_back(e.cause);
    bus.unsubscribe(idb);  // removes a later subscriber during this publish
  });
  idb = bus.subscribe([&](const DomainEvent& e) { b.push_back(e.cause); });
  EventBus::SubscriptionId idc = 0;
  idc = bus.subscribe([&](const DomainEvent& e) {
    c.push_back(e.cause);
    bus.unsubscribe(idc);  // removes itself
  });
  bus.publish(make("one"));
  bus.publish(make("two"));
  CHECK(a == std::vector<std::string>{"one", "two"});
  CHECK(b.empty());
  CHECK(c == std::vector<std::string>{"one"});
  CHECK(bus.unsubscribe(ida));
  CHECK_FALSE(bus.unsubscribe(ida));
  CHECK(bus.subscriber_count() == 0);
}

TEST_CASE("a slow subscriber overflows its own queue and never holds up the others") {
  EventBus bus;
  EventQueue slow(4);  // nobody drains it: a client whose socket is full
  std::size_t fast = 0;
  bus.subscribe([&](const DomainEvent& e) { slow.push(e); });
  bus.subscribe([&](const DomainEvent&) { ++fast; });
  for (int i = 0; i < 100; ++i) bus.publish(make("e"));
  CHECK(fast == 100);
  CHECK(slow.size() == 4);
  CHECK(slow.overflowed());
  CHECK(slow.dropped() == 96);
  // Drained in order.
  EventQueue q(8);
  q.push(make("a"));
  q.push(make("b"));
  CHECK(q.pop()->cause == "a");
  CHECK(q.pop()->cause == "b");
  CHECK_FALSE(q.pop().has_value());
  CHECK_FALSE(q.overflowed());
}

TEST_CASE("a subscriber that throws does not stop delivery to the others") {
  EventBus bus;
  std::size_t after = 0;
  bus.subscribe([](const DomainEvent&) { throw std::runtime_error("boom"); });
  bus.subscribe([&](const DomainEvent&) { ++after; });
  bus.publish(make("x"));
  CHECK(after == 1);
}

TEST_CASE("Subscription unsubscribes when it goes away") {
  EventBus bus;
  std::size_t n = 0;
  {
    Subscription s(bus, [&](const DomainEvent&) { ++n; });
    CHECK(s.active());
    bus.publish(make("x"));
    Subscription moved = std::move(s);
    CHECK_FALSE(s.active());
    bus.publish(make("y"));
  }
  bus.publish(make("z"));
  CHECK(n == 2);
  CHECK(bus.subscriber_count() == 0);
}

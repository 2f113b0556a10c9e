#pragma once
// Fan-out of domain events to subscribers: the command socket's event streams, the log, later
// the KubeVirt notify client. publish() calls every subscriber's callback on the caller's
// thread (the launcher's io_context), in subscription order.
//
// Callbacks must not block: a subscriber that cannot keep up (a slow socket client) queues
// into its own bounded EventQueue and drains it when its transport is writable; when the queue
// overflows the subscriber is told (overflowed()) and should be dropped — it never delays the
// others. Subscribing or unsubscribing from inside a callback is allowed (it takes effect for
// the next publish; an unsubscribed callback is not called again, even in the current one).
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "events/domain_state.hpp"

namespace chl::events {

class EventBus {
 public:
  using Callback = std::function<void(const DomainEvent&)>;
  using SubscriptionId = std::uint64_t;

  SubscriptionId subscribe(Callback cb);
  // Returns false when the id is unknown (already unsubscribed).
  bool unsubscribe(SubscriptionId id);
  void publish(const DomainEvent& e);
  [[nodiscard]] std::size_t subscriber_count() const;
  [[nodiscard]] std::uint64_t published() const;

 private:
  struct Entry {
    SubscriptionId id;
    Callback cb;
    bool active = true;
  };
  mutable std::mutex mu_;  // guards the list only; callbacks run without it
  std::vector<std::shared_ptr<Entry>> subs_;
  SubscriptionId next_id_ = 1;
  std::uint64_t published_ = 0;
};

// A bounded per-subscriber queue. push() never blocks; past `capacity` it drops the event and
// marks the queue overflowed (the owner should disconnect that client: a partial stream of
// state changes would mislead it).
class EventQueue {
 public:
  explicit EventQueue(std::size_t capacity = 1024) : capacity_(capacity) {}
  // Returns false when the event was dropped.
  bool push(const DomainEvent& e);
  std::optional<DomainEvent> pop();
  [[nodiscard]] std::size_t size() const { return q_.size(); }
  [[nodiscard]] bool empty() const { return q_.empty(); }
  [[nodiscard]] bool overflowed() const { return overflowed_; }
  [[nodiscard]] std::uint64_t dropped() const { return dropped_; }

 private:
  std::size_t capacity_;
  std::deque<DomainEvent> q_;
  bool overflowed_ = false;
  std::uint64_t dropped_ = 0;
};

// RAII subscription: unsubscribes on destruction. The bus must outlive it.
class Subscription {
 public:
  Subscription() = default;
  Subscription(EventBus& bus, EventBus::Callback cb) : bus_(&bus), id_(bus.subscribe(std::move(cb))) {}
  Subscription(const Subscription&) = delete;
  Subscription& operator=(const Subscription&) = delete;
  Subscription(Subscription&& o) noexcept : bus_(o.bus_), id_(o.id_) { o.bus_ = nullptr; }
  Subscription& operator=(Subscription&& o) noexcept;
  ~Subscription() { reset(); }
  void reset();
  [[nodiscard]] bool active() const { return bus_ != nullptr; }

 private:
  EventBus* bus_ = nullptr;
  EventBus::SubscriptionId id_ = 0;
};

}  // namespace chl::events

#include "events/event_bus.hpp"

#include <algorithm>
#include <exception>

#include "common/log.hpp"

namespace chl::events {

EventBus::SubscriptionId EventBus::subscribe(Callback cb) {
  std::lock_guard lock(mu_);
  auto entry = std::make_shared<Entry>();
  entry->id = next_id_++;
  entry->cb = std::move(cb);
  subs_.push_back(entry);
  return entry->id;
}

bool EventBus::unsubscribe(SubscriptionId id) {
  std::lock_guard lock(mu_);
  auto it = std::find_if(subs_.begin(), subs_.end(), [id](const auto& e) { return e->id == id; });
  if (it == subs_.end()) return false;
  (*it)->active = false;
  subs_.erase(it);
  return true;
}

void EventBus::publish(const DomainEvent& e) {
  std::vector<std::shared_ptr<Entry>> snapshot;
  {
    std::lock_guard lock(mu_);
    ++published_;
    snapshot = subs_;
  }
  for (const auto& entry : snapshot) {
    if (!entry->active) continue;  // unsubscribed by an earlier callback of this publish
    try {
      entry->cb(e);
    } catch (const std::exception& ex) {
      CHL_LOG_ERROR("events: subscriber {} threw while handling {}: {}", entry->id, e.cause, ex.what());
    }
  }
}

std::size_t EventBus::subscriber_count() const {
  std::lock_guard lock(mu_);
  return subs_.size();
}

std::uint64_t EventBus::published() const {
  std::lock_guard lock(mu_);
  return published_;
}

bool EventQueue::push(const DomainEvent& e) {
  if (q_.size() >= capacity_) {
    overflowed_ = true;
    ++dropped_;
    return false;
  }
  q_.push_back(e);
  return true;
}

std::optional<DomainEvent> EventQueue::pop() {
  if (q_.empty()) return std::nullopt;
  DomainEvent e = std::move(q_.front());
  q_.pop_front();
  return e;
}

Subscription& Subscription::operator=(Subscription&& o) noexcept {
  if (this != &o) {
    reset();
    bus_ = o.bus_;
    id_ = o.id_;
    o.bus_ = nullptr;
  }
  return *this;
}

void Subscription::reset() {
  if (bus_ != nullptr) bus_->unsubscribe(id_);
  bus_ = nullptr;
}

}  // namespace chl::events

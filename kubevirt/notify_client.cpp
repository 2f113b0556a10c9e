#include "kubevirt/notify_client.hpp"

#include <algorithm>

#include "common/log.hpp"
#include "kubevirt/h2_client.hpp"
#include "kubevirt/proto_lite/notify.pb.h"
#include "kubevirt/proto_lite/notify_info.pb.h"

namespace chl::kubevirt {

// Lite messages of the same wire contract (kubevirt/lite_proto.cmake).
namespace notify = ::kubevirt_lite::notify;

std::string_view to_string(DomainEventType t) {
  return t == DomainEventType::Added ? "ADDED" : "MODIFIED";
}

// One HTTP/2 connection, made lazily and dropped on a transient failure (so that a restarted
// virt-handler is reached through a fresh connection); cancel() is the destructor's.
struct NotifyClient::Channel {
  explicit Channel(const std::string& socket) : rpc(socket) {}
  RpcChannel rpc;
  bool negotiated = false;
  void drop() {
    rpc.disconnect();
    negotiated = false;
  }
};

namespace {

// What virt-launcher retries on: the connection, not the answer.
bool transient(GrpcCode c) {
  switch (c) {
    case GrpcCode::Unavailable:
    case GrpcCode::DeadlineExceeded:
    case GrpcCode::Aborted:
    case GrpcCode::Cancelled:
      return true;
    default:
      return false;
  }
}

}  // namespace

NotifyClient::NotifyClient(NotifyClientOptions options)
    : options_(std::move(options)), channel_(std::make_unique<Channel>(options_.socket_path)) {
  worker_ = std::thread([this] { run(); });
}

NotifyClient::~NotifyClient() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    channel_->rpc.cancel();  // the RPC in flight ends at once
  }
  cv_.notify_all();
  done_cv_.notify_all();
  worker_.join();
}

void NotifyClient::send_domain_event(std::string domain_json, DomainEventType type) {
  {
    std::lock_guard lock(mu_);
    // Only the newest undelivered state is kept; the first the handler hears stays an ADDED.
    auto old = std::find_if(queue_.begin(), queue_.end(), [](const Item& i) { return i.domain; });
    if (old != queue_.end()) {
      if (old->type == DomainEventType::Added) type = DomainEventType::Added;
      queue_.erase(old);
      ++counters_.domain_events_coalesced;
    }
    queue_.push_back(Item{true, type, std::move(domain_json), next_seq_++});
  }
  cv_.notify_all();
}

void NotifyClient::send_k8s_event(std::string event_json) {
  {
    std::lock_guard lock(mu_);
    const auto k8s =
        std::count_if(queue_.begin(), queue_.end(), [](const Item& i) { return !i.domain; });
    if (static_cast<std::size_t>(k8s) >= options_.max_pending_k8s_events) {
      auto oldest =
          std::find_if(queue_.begin(), queue_.end(), [](const Item& i) { return !i.domain; });
      queue_.erase(oldest);
      ++counters_.k8s_events_dropped;
      CHL_LOG_WARN("notify: {} Kubernetes events pending, dropping the oldest",
                   options_.max_pending_k8s_events);
    }
    queue_.push_back(Item{false, DomainEventType::Modified, std::move(event_json), next_seq_++});
  }
  cv_.notify_all();
}

bool NotifyClient::flush(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  const std::uint64_t target = next_seq_ - 1;
  hurry_ = true;
  cv_.notify_all();
  // The queue is in enqueue order, so "nothing at or before target is left" is its front.
  return done_cv_.wait_until(lock, deadline, [&] {
    const bool queued = !queue_.empty() && queue_.front().seq <= target;
    const bool flying = in_flight_seq_ != 0 && in_flight_seq_ <= target;
    return stop_ || (!queued && !flying);
  }) && !stop_;
}

bool NotifyClient::flush_last(std::chrono::steady_clock::time_point deadline) {
  std::uint64_t before = 0;
  {
    std::lock_guard lock(mu_);
    last_words_ = true;
    before = undelivered_;
  }
  const bool done = flush(deadline);
  std::lock_guard lock(mu_);
  return done && undelivered_ == before;
}

NotifyCounters NotifyClient::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

void NotifyClient::requeue(Item item) {
  if (item.domain) {
    auto newer = std::find_if(queue_.begin(), queue_.end(), [](const Item& i) { return i.domain; });
    if (newer != queue_.end()) {  // superseded while in flight
      if (item.type == DomainEventType::Added) newer->type = DomainEventType::Added;
      ++counters_.domain_events_coalesced;
      return;
    }
  }
  queue_.push_front(std::move(item));
}

void NotifyClient::run() {
  std::unique_lock lock(mu_);
  auto backoff = options_.initial_backoff;
  bool failing = false;
  while (!stop_) {
    if (queue_.empty()) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      continue;
    }
    Item item = std::move(queue_.front());
    queue_.pop_front();
    in_flight_seq_ = item.seq;
    lock.unlock();
    const Outcome outcome = deliver(item);
    lock.lock();
    in_flight_seq_ = 0;
    const bool give_up = outcome == Outcome::GiveUp || (outcome == Outcome::Unreachable && last_words_);
    if (outcome == Outcome::Delivered || give_up) {
      if (outcome == Outcome::Delivered) {
        ++(item.domain ? counters_.domain_events_delivered : counters_.k8s_events_delivered);
        if (failing) CHL_LOG_INFO("notify: delivering to {} again", options_.socket_path);
        failing = false;
      } else {
        ++undelivered_;
        if (!item.domain) ++counters_.k8s_events_dropped;
        if (outcome == Outcome::Unreachable) {
          ++counters_.unreachable;
          CHL_LOG_WARN("notify: {} is gone and no connection to it is open: the {} event cannot be "
                       "delivered",
                       options_.socket_path, item.domain ? "domain" : "Kubernetes");
        }
      }
      backoff = options_.initial_backoff;
      done_cv_.notify_all();
      continue;
    }
    ++counters_.failed_attempts;
    failing = true;
    requeue(std::move(item));
    done_cv_.notify_all();
    if (!hurry_) cv_.wait_for(lock, backoff, [&] { return stop_ || hurry_; });
    hurry_ = false;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

NotifyClient::Outcome NotifyClient::deliver(const Item& item) {
  Channel& ch = *channel_;
  // Over the connection it has, if the server still keeps it open: virt-handler closes the
  // notify pipe's listener (and so removes the socket file) after DeleteDomain while the
  // connections it accepted are still served (pkg/virt-handler/notify-server/pipe/pipe.go:
  // 104-145), and the last event goes over one of them, as KubeVirt's launcher sends it. With no
  // connection open, call() dials; a dial that fails (no socket yet or any more, or refused) is
  // Unreachable.
  bool dial_failed = false;
  // One RPC with its own deadline, cancellable by the destructor.
  auto call = [&](std::string_view path, const auto& request) {
    const bool had = ch.rpc.connected();
    const auto connects = ch.rpc.connects();
    GrpcReply r = ch.rpc.call(path, request.SerializeAsString(),
                              std::chrono::steady_clock::now() + options_.send_timeout);
    if (ch.rpc.connects() != connects) {
      ch.negotiated = false;
      std::lock_guard lock(mu_);
      ++counters_.connects;
    } else if (!had && r.code == GrpcCode::Unavailable) {
      dial_failed = true;
    }
    return r;
  };

  if (!ch.negotiated) {
    notify::info::NotifyInfoResponse versions;
    GrpcReply r = call("/kubevirt.notify.info.NotifyInfo/Info", notify::info::NotifyInfoRequest{});
    if (r.code == GrpcCode::Ok && !versions.ParseFromString(r.body))
      r = {GrpcCode::Internal, "cannot parse NotifyInfoResponse", {}};
    if (r.code != GrpcCode::Ok && r.code != GrpcCode::Unimplemented) {
      CHL_LOG_DEBUG("notify: version check on {}: {}", options_.socket_path, r.message);
      ch.drop();
      return dial_failed ? Outcome::Unreachable : Outcome::Retry;
    }
    const auto& v = versions.supportednotifyversions();
    if (r.code == GrpcCode::Ok && std::find(v.begin(), v.end(), 1U) == v.end()) {
      CHL_LOG_ERROR("notify: {} does not speak notify version 1", options_.socket_path);
      ch.drop();
      return Outcome::Retry;
    }
    ch.negotiated = true;
  }

  GrpcReply r;
  if (item.domain) {
    notify::v1::DomainEventRequest req;
    req.set_domainjson(item.json);
    req.set_eventtype(std::string(to_string(item.type)));
    r = call("/kubevirt.notify.v1.Notify/HandleDomainEvent", req);
  } else {
    notify::v1::K8sEventRequest req;
    req.set_eventjson(item.json);
    r = call("/kubevirt.notify.v1.Notify/HandleK8sEvent", req);
  }
  notify::v1::Response response;
  if (r.code == GrpcCode::Ok && !response.ParseFromString(r.body))
    r = {GrpcCode::Internal, "cannot parse the answer", {}};
  if (r.code != GrpcCode::Ok) {
    if (transient(r.code)) {
      CHL_LOG_DEBUG("notify: {} failed, reconnecting: {}", options_.socket_path, r.message);
      ch.drop();
      return dial_failed ? Outcome::Unreachable : Outcome::Retry;
    }
    CHL_LOG_ERROR("notify: {} refused a {} event: {}", options_.socket_path,
                  item.domain ? "domain" : "Kubernetes", r.message);
    return Outcome::GiveUp;
  }
  if (!response.success() && !response.message().empty()) {
    CHL_LOG_WARN("notify: virt-handler answered a {} event with: {}",
                 item.domain ? "domain" : "Kubernetes", response.message());
    return Outcome::GiveUp;
  }
  return Outcome::Delivered;
}

}  // namespace chl::kubevirt

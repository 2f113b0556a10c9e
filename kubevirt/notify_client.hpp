#pragma once
// The launcher's side of KubeVirt's notify protocol: a client of virt-handler's
// `<share>/domain-notify-pipe.sock` (kubevirt.notify.v1.Notify) sending the domain's state
// (HandleDomainEvent, ADDED/MODIFIED) and Kubernetes events (HandleK8sEvent).
//
// It never blocks its caller: send_* only enqueue, one worker thread delivers. It connects
// lazily, delivers over the connection it has for as long as the server keeps it open (as
// KubeVirt's notify client reuses its grpc.ClientConn, pkg/virt-launcher/notify-client/client.go:
// 136-140) whether or not the socket file is still there, and retries with backoff while no
// connection can be made or the server fails transiently; of the domain states not yet delivered
// only the newest is kept (an undelivered ADDED stays an ADDED, with the newest content).
// flush(deadline) waits a bounded time for everything enqueued so far to be delivered;
// flush_last(deadline) is the launcher's last words (the final NoState/NonExistent notification
// before it exits): it also stops as soon as they cannot be delivered.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace chl::kubevirt {

enum class DomainEventType { Added, Modified };
std::string_view to_string(DomainEventType t);  // "ADDED" | "MODIFIED"

struct NotifyClientOptions {
  std::string socket_path;  // <share>/domain-notify-pipe.sock
  std::chrono::milliseconds initial_backoff{20};
  std::chrono::milliseconds max_backoff{1000};
  std::chrono::milliseconds send_timeout{5000};  // one RPC, as virt-launcher's
  std::size_t max_pending_k8s_events = 64;       // beyond: the oldest is dropped (logged)
};

struct NotifyCounters {
  std::uint64_t domain_events_delivered = 0;
  std::uint64_t domain_events_coalesced = 0;  // replaced by a newer state before delivery
  std::uint64_t k8s_events_delivered = 0;
  std::uint64_t k8s_events_dropped = 0;  // queue full, or refused by virt-handler
  std::uint64_t connects = 0;            // channels made
  std::uint64_t failed_attempts = 0;     // RPCs that failed and will be retried
  std::uint64_t unreachable = 0;  // given up by flush_last: no connection and none to be made
};

class NotifyClient {
 public:
  explicit NotifyClient(NotifyClientOptions options);
  // Stops the worker at once (an RPC in flight is cancelled); call flush() first to deliver.
  ~NotifyClient();
  NotifyClient(const NotifyClient&) = delete;
  NotifyClient& operator=(const NotifyClient&) = delete;

  // Enqueue the domain's state (api.Domain JSON, to_domain_json). Never blocks on the network.
  void send_domain_event(std::string domain_json, DomainEventType type);
  // Enqueue a core/v1 Event JSON (to_event_json).
  void send_k8s_event(std::string event_json);
  // Wait until everything enqueued before this call is delivered, or until `deadline`.
  // Returns true when delivered. The worker retries at once rather than after its backoff.
  bool flush(std::chrono::steady_clock::time_point deadline);
  // flush() for the launcher's last words: from now on an item that cannot reach virt-handler —
  // no connection open and none to be made (the socket gone or refusing: virt-handler has closed
  // this VMI's notify pipe, which it does after DeleteDomain, pkg/virt-handler/vm.go:1708) — is
  // given up at once rather than retried until `deadline`. True when everything was delivered.
  bool flush_last(std::chrono::steady_clock::time_point deadline);

  NotifyCounters counters() const;

 private:
  struct Item {
    bool domain = false;
    DomainEventType type = DomainEventType::Modified;
    std::string json;
    std::uint64_t seq = 0;  // enqueue order; flush waits for its own
  };
  struct Channel;  // the HTTP/2 side (h2_client.hpp), kept out of this header

  void run();
  // Unreachable: no connection was open and none could be made (retried, except in flush_last).
  enum class Outcome { Delivered, GiveUp, Retry, Unreachable };
  // One delivery attempt (worker thread, mu_ not held).
  Outcome deliver(const Item& item);
  // Put back an item whose delivery failed, unless a newer domain state superseded it.
  void requeue(Item item);

  NotifyClientOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // the worker waits here for work or for its backoff
  std::condition_variable done_cv_;  // flush waits here
  std::deque<Item> queue_;
  std::uint64_t next_seq_ = 1;
  std::uint64_t in_flight_seq_ = 0;  // the item being delivered (out of queue_); 0: none
  bool hurry_ = false;
  bool last_words_ = false;        // flush_last(): an unreachable item is given up
  std::uint64_t undelivered_ = 0;  // items given up (refused, or unreachable at the end)
  bool stop_ = false;
  NotifyCounters counters_;
  std::unique_ptr<Channel> channel_;  // the worker's, but for cancel() by the destructor
  std::thread worker_;
};

}  // namespace chl::kubevirt

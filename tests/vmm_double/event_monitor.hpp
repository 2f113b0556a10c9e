#pragma once
// Cloud Hypervisor's event monitor, as the double writes it: each event is
// serde_json::to_string_pretty of {"timestamp":{"secs","nanos"},"source","event","properties"}
// followed by "\n\n"; timestamps count from the monitor's start. emit() queues; the event loop
// writes on its next turn, after the API answer in hand (CH's monitor thread lags the same way).
// Writes never block: the fd is
// made O_NONBLOCK (as CH does) and pending bytes wait in a bounded buffer until the event loop
// sees POLLOUT; past the bound, whole events are dropped (CH drops them too when a write fails).
#include <chrono>
#include <deque>
#include <optional>
#include <map>
#include <string>

#include "common/unique_fd.hpp"

namespace chl::vmm_double {

class EventMonitor {
 public:
  EventMonitor() = default;
  // Take ownership of `fd` (already open for writing). `garbage`: write junk between events.
  // `lag`: each event is held this long before it is written (CH's monitor thread behind its
  // API under load: the answer of an action long before the action's event).
  void open(common::UniqueFd fd, bool garbage, std::chrono::milliseconds lag = {});
  [[nodiscard]] bool enabled() const { return fd_.valid(); }

  void emit(const std::string& source, const std::string& event,
            const std::map<std::string, std::string>& properties = {});

  // For the event loop: fd to poll for POLLOUT while pending() is true.
  [[nodiscard]] int fd() const { return fd_.get(); }
  [[nodiscard]] bool pending() const { return fd_.valid() && !buf_.empty(); }
  // Write what the fd takes now.
  void flush();
  // Lagged events whose time came join what is to be written; when the next one is due.
  void release_due();
  [[nodiscard]] std::optional<std::chrono::steady_clock::time_point> next_due() const;
  // Before exit: try for at most `budget` to get everything out.
  void drain(std::chrono::milliseconds budget);
  // Close the fd now (fault injection): what is pending is dropped, later events go nowhere.
  void close();
  // Accept no more events; what is pending still goes out (CH's exit racing its monitor thread).
  void stop_accepting() { stopped_ = true; }

 private:
  common::UniqueFd fd_;
  std::string buf_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::string>> held_;  // lagged
  std::chrono::milliseconds lag_{0};
  bool garbage_ = false;
  bool stopped_ = false;
  unsigned garbage_count_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  static constexpr std::size_t kMaxPending = 1 << 20;
};

}  // namespace chl::vmm_double

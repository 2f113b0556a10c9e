#include "tests/vmm_double/event_monitor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "common/syscall.hpp"

namespace chl::vmm_double {

void EventMonitor::open(common::UniqueFd fd, bool garbage, std::chrono::milliseconds lag) {
  fd_ = std::move(fd);
  garbage_ = garbage;
  lag_ = lag;
  start_ = std::chrono::steady_clock::now();
  const int flags = ::fcntl(fd_.get(), F_GETFL);
  if (flags >= 0) (void)::fcntl(fd_.get(), F_SETFL, flags | O_NONBLOCK);
}

void EventMonitor::emit(const std::string& source, const std::string& event,
                        const std::map<std::string, std::string>& properties) {
  if (!fd_.valid() || stopped_) return;
  const auto elapsed = std::chrono::steady_clock::now() - start_;
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(elapsed);
  const auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed - secs);
  nlohmann::ordered_json e;
  e["timestamp"] = {{"secs", static_cast<std::uint64_t>(secs.count())},
                    {"nanos", static_cast<std::uint32_t>(nanos.count())}};
  e["source"] = source;
  e["event"] = event;
  if (properties.empty()) {
    e["properties"] = nullptr;
  } else {
    nlohmann::ordered_json p = nlohmann::ordered_json::object();
    for (const auto& [k, v] : properties) p[k] = v;
    e["properties"] = p;
  }
  std::string text = e.dump(2) + "\n\n";
  if (garbage_) {
    // Junk a reader must survive: a truncated object, bare text, a stray brace, a NUL.
    static const std::string kGarbage[] = {
        "{\"timestamp\": {\"secs\": 1,\n\n", "not json at all\n\n", "}\n\n",
        "{\"source\":\"vm\",\"event\":\"booted\"\n", std::string("\0\x01junk\n\n", 8)};
    const std::size_t pick = garbage_count_++ % 5;
    text += kGarbage[pick];
  }
  if (lag_.count() > 0) {
    held_.emplace_back(std::chrono::steady_clock::now() + lag_, std::move(text));
    return;
  }
  if (buf_.size() + text.size() > kMaxPending) return;  // reader stalled: drop, never block
  // Queued, not written: CH's event_log() sends the event down a channel to its event-monitor
  // thread (event_monitor/src/lib.rs), so the API answer of the action that caused it can reach
  // the client first. The double writes it on its loop's next turn, after the answer: the order
  // a client cannot rely on, every time.
  buf_ += text;
}

void EventMonitor::release_due() {
  const auto now = std::chrono::steady_clock::now();
  while (!held_.empty() && held_.front().first <= now) {
    if (buf_.size() + held_.front().second.size() <= kMaxPending) buf_ += held_.front().second;
    held_.pop_front();
  }
}

std::optional<std::chrono::steady_clock::time_point> EventMonitor::next_due() const {
  if (held_.empty()) return std::nullopt;
  return held_.front().first;
}

void EventMonitor::flush() {
  while (fd_.valid() && !buf_.empty()) {
    const ssize_t n =
        common::retry_eintr([&] { return ::write(fd_.get(), buf_.data(), buf_.size()); });
    if (n > 0) {
      buf_.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // EPIPE or another error: the reader is gone; stop writing events.
    buf_.clear();
    fd_.reset();
    return;
  }
}

void EventMonitor::close() {
  buf_.clear();
  held_.clear();
  fd_.reset();
}

void EventMonitor::drain(std::chrono::milliseconds budget) {
  const auto deadline = std::chrono::steady_clock::now() + budget;
  // At exit the lag is over: what is held goes out first (as CH's last events, when they make it).
  for (auto& [when, text] : held_)
    if (buf_.size() + text.size() <= kMaxPending) buf_ += text;
  held_.clear();
  while (pending()) {
    flush();
    if (!pending()) return;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    pollfd p{fd_.get(), POLLOUT, 0};
    (void)::poll(&p, 1, static_cast<int>(left.count()));
  }
}

}  // namespace chl::vmm_double

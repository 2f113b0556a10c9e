#include "launcher/state_waiters.hpp"

#include "common/log.hpp"

namespace chl::launcher {

void StateWaiters::wait(std::function<bool()> reached, std::chrono::milliseconds bound,
                        std::function<void()> done) {
  if (reached()) return done();
  auto it = waiters_.insert(waiters_.end(), Waiter{std::move(reached), std::move(done),
                                                   std::make_unique<boost::asio::steady_timer>(io_)});
  it->timer->expires_after(bound);
  it->timer->async_wait([this, it, bound](const boost::system::error_code& ec) {
    if (ec) return;  // released before the bound
    CHL_LOG_WARN("the VMM answered but its event did not follow within {} ms: answering anyway",
                 bound.count());
    release(it);
  });
}

void StateWaiters::check() {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    auto next = std::next(it);
    if (it->reached()) release(it);
    it = next;
  }
}

void StateWaiters::release_all() {
  while (!waiters_.empty()) release(waiters_.begin());
}

void StateWaiters::release(std::list<Waiter>::iterator it) {
  auto done = std::move(it->done);
  it->timer->cancel();
  // A queued timer handler sees operation_aborted and touches nothing, so the node can go now.
  waiters_.erase(it);
  done();
}

}  // namespace chl::launcher

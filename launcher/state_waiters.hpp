#pragma once
// Answers that wait for the state they caused. Cloud Hypervisor answers vm.pause and vm.resume
// before the VM's event reaches its event file: event_log() queues the event on a channel that
// the event-monitor thread writes out (event_monitor/src/lib.rs), so the launcher can read the
// HTTP answer before vm/paused or vm/resumed. libvirt sets the domain state before
// virDomainSuspend/virDomainResume return (qemuProcessStopCPUs/qemuProcessStartCPUs), and a
// client asking next ("reboot" right after "resume") must find the VM Running. So the launcher
// holds such an answer until its tracker shows the state, or a bound passes (the answer stands
// then: the event can be lost with a VMM that is dying, which its exit reports).

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <list>
#include <memory>

namespace chl::launcher {

class StateWaiters {
 public:
  explicit StateWaiters(boost::asio::io_context& io) : io_(io) {}
  // Run `done` once `reached()` is true (now, after a later check(), or at the latest after
  // `bound`). On the event loop only.
  void wait(std::function<bool()> reached, std::chrono::milliseconds bound, std::function<void()> done);
  // After every domain event: release the waiters whose state is reached.
  void check();
  // Release every waiter now (teardown: nothing more will change).
  void release_all();
  [[nodiscard]] std::size_t waiting() const { return waiters_.size(); }

 private:
  struct Waiter {
    std::function<bool()> reached;
    std::function<void()> done;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };
  void release(std::list<Waiter>::iterator it);

  boost::asio::io_context& io_;
  std::list<Waiter> waiters_;
};

}  // namespace chl::launcher

#pragma once
// libvirt's event loop for the launcher: libvirt's default implementation (poll(2) on its own
// fds and timers) run on one dedicated thread that sleeps in poll until libvirt has something —
// never a busy loop. Domain event callbacks run on that thread; the driver posts what they
// carry to the launcher's io_context, so the launcher's state is only touched there.
//
// virEventRegisterDefaultImpl is process-wide and must precede the first connection: start()
// does it (once per process) and must be called before virConnectOpen.
#include <atomic>
#include <thread>

#include "common/error.hpp"

namespace chl::libvirt {

// virInitialize, libvirt's errors kept quiet (the launcher reports them with context) and the
// default event implementation registered: once per process, before any connection is opened
// (LibvirtDaemons::ensure's keeper connection, the driver's). Idempotent.
common::Status register_libvirt_event_impl();

class LibvirtEventLoop {
 public:
  LibvirtEventLoop() = default;
  LibvirtEventLoop(const LibvirtEventLoop&) = delete;
  LibvirtEventLoop& operator=(const LibvirtEventLoop&) = delete;
  ~LibvirtEventLoop();  // stop()

  common::Status start();
  // Wake the loop (a zero timeout) and join the thread. Idempotent.
  void stop();
  [[nodiscard]] bool running() const { return thread_.joinable(); }

 private:
  std::atomic<bool> quit_{false};
  std::thread thread_;
};

}  // namespace chl::libvirt

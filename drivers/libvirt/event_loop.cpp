#include "drivers/libvirt/event_loop.hpp"

#include <mutex>

#include "drivers/libvirt/handles.hpp"
#include "common/log.hpp"

namespace chl::libvirt {

namespace {
void wake(int /*timer*/, void* /*opaque*/) {}
// libvirt prints every error to stderr by default; the launcher reports them itself (with
// context) through libvirt_fail(), from virGetLastError().
void quiet(void* /*opaque*/, virErrorPtr /*error*/) {}
}  // namespace

common::Status register_libvirt_event_impl() {
  static std::once_flag once;
  static int registered = -1;
  std::call_once(once, [] {
    if (virInitialize() != 0) return;
    virSetErrorFunc(nullptr, quiet);
    registered = virEventRegisterDefaultImpl();
  });
  if (registered != 0) return libvirt_fail("registering libvirt's event loop");
  return {};
}

common::Status LibvirtEventLoop::start() {
  CHL_TRY_VOID(register_libvirt_event_impl());
  quit_ = false;
  thread_ = std::thread([this] {
    while (!quit_.load()) {
      if (virEventRunDefaultImpl() < 0) {
        CHL_LOG_ERROR("libvirt event loop: {}", libvirt_last_error());
        break;
      }
    }
  });
  return {};
}

void LibvirtEventLoop::stop() {
  if (!thread_.joinable()) return;
  quit_ = true;
  // A timer due now makes virEventRunDefaultImpl return; it is removed once the thread is gone.
  int timer = virEventAddTimeout(0, wake, nullptr, nullptr);
  thread_.join();
  if (timer >= 0) virEventRemoveTimeout(timer);
}

LibvirtEventLoop::~LibvirtEventLoop() { stop(); }

}  // namespace chl::libvirt

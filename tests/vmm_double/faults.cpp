#include "tests/vmm_double/faults.hpp"

#include <cstdlib>
#include <sstream>

namespace chl::vmm_double {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::set<std::string> list(const std::string& s) {
  std::set<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.insert(item);
  }
  return out;
}

int number(const char* name, int fallback) {
  const std::string v = env(name);
  if (v.empty()) return fallback;
  return std::atoi(v.c_str());
}

}  // namespace

Faults Faults::from_env() {
  Faults f;
  f.crash_at = env("VMM_DOUBLE_CRASH_AT");
  f.exit_without_events = env("VMM_DOUBLE_EXIT_WITHOUT_EVENTS");
  f.close_events_at = env("VMM_DOUBLE_CLOSE_EVENTS_AT");
  f.hang = list(env("VMM_DOUBLE_HANG"));
  f.fail = list(env("VMM_DOUBLE_FAIL"));
  const std::string g = env("VMM_DOUBLE_GARBAGE_EVENTS");
  f.garbage_events = !g.empty() && g != "0";
  f.event_lag_ms = number("VMM_DOUBLE_EVENT_LAG_MS", 0);
  f.boot_delay_ms = number("VMM_DOUBLE_BOOT_DELAY_MS", 0);
  f.boot_answer_delay_ms = number("VMM_DOUBLE_BOOT_ANSWER_DELAY_MS", 0);
  f.phase_delay_ms = number("VMM_DOUBLE_PHASE_DELAY_MS", 20);
  f.heartbeat_ms = number("VMM_DOUBLE_HEARTBEAT_MS", 0);
  f.poweroff_teardown_ms = number("VMM_DOUBLE_POWEROFF_TEARDOWN_MS", 0);
  f.vfio_root = env("VMM_DOUBLE_VFIO_ROOT");
  return f;
}

}  // namespace chl::vmm_double

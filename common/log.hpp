#pragma once
// Logging: spdlog writing one JSON object per line, as KubeVirt's components do:
// {"component":"ch-launcher","level":"info","msg":"...","timestamp":"2026-11-22T12:00:00.123456Z",
//  "pos":"launcher.cpp:42","namespace":"default","name":"vm1","uid":"..."}
// Use the CHL_LOG_* macros (they record file:line).
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace chl::common::log {

struct VmiContext {
  std::string namespace_;
  std::string name;
  std::string uid;
};

// Install the process-wide logger writing JSON lines to stderr (or to `path` when given).
void init(const std::string& component, spdlog::level::level_enum level,
          const std::string& path = {});
// Attach the VMI's identity to every following line.
void set_vmi(const VmiContext& vmi);
// Parse "trace|debug|info|warning|error|critical|off"; nullopt-like: returns false if unknown.
bool parse_level(const std::string& text, spdlog::level::level_enum& out);
// The logger the macros use (a default JSON stderr logger if init() was never called).
std::shared_ptr<spdlog::logger>& logger();
// A formatter writing the JSON line above; exposed for tests.
std::unique_ptr<spdlog::formatter> make_json_formatter(const std::string& component,
                                                       const VmiContext& vmi);
// JSON string escaping (without the quotes).
std::string json_escape(std::string_view s);

}  // namespace chl::common::log

#define CHL_LOG_TRACE(...) SPDLOG_LOGGER_TRACE(::chl::common::log::logger(), __VA_ARGS__)
#define CHL_LOG_DEBUG(...) SPDLOG_LOGGER_DEBUG(::chl::common::log::logger(), __VA_ARGS__)
#define CHL_LOG_INFO(...) SPDLOG_LOGGER_INFO(::chl::common::log::logger(), __VA_ARGS__)
#define CHL_LOG_WARN(...) SPDLOG_LOGGER_WARN(::chl::common::log::logger(), __VA_ARGS__)
#define CHL_LOG_ERROR(...) SPDLOG_LOGGER_ERROR(::chl::common::log::logger(), __VA_ARGS__)

#include "common/log.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace chl::common::log {
namespace {

struct State {
  std::mutex mu;
  std::string component = "ch-launcher";
  VmiContext vmi;
};

State& state() {
  static State s;
  return s;
}

const char* level_name(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace: return "trace";
    case spdlog::level::debug: return "debug";
    case spdlog::level::info: return "info";
    case spdlog::level::warn: return "warning";
    case spdlog::level::err: return "error";
    case spdlog::level::critical: return "critical";
    default: return "info";
  }
}

class JsonFormatter final : public spdlog::formatter {
 public:
  JsonFormatter(std::string component, VmiContext vmi)
      : component_(std::move(component)), vmi_(std::move(vmi)) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    std::string line;
    line.reserve(160 + msg.payload.size());
    line += "{\"component\":\"";
    line += json_escape(component_);
    line += "\",\"level\":\"";
    line += level_name(msg.level);
    line += "\",\"msg\":\"";
    line += json_escape(std::string_view(msg.payload.data(), msg.payload.size()));
    line += "\",\"timestamp\":\"";
    line += rfc3339(msg.time);
    line += '"';
    if (!msg.source.empty()) {
      std::string_view file(msg.source.filename);
      if (auto slash = file.rfind('/'); slash != std::string_view::npos) file.remove_prefix(slash + 1);
      line += ",\"pos\":\"";
      line += json_escape(file);
      line += ':';
      line += std::to_string(msg.source.line);
      line += '"';
    }
    if (!vmi_.name.empty()) {
      line += ",\"namespace\":\"" + json_escape(vmi_.namespace_) + "\"";
      line += ",\"name\":\"" + json_escape(vmi_.name) + "\"";
      line += ",\"uid\":\"" + json_escape(vmi_.uid) + "\"";
    }
    line += "}\n";
    dest.append(line.data(), line.data() + line.size());
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>(component_, vmi_);
  }

 private:
  static std::string rfc3339(spdlog::log_clock::time_point tp) {
    auto secs = std::chrono::time_point_cast<std::chrono::seconds>(tp);
    auto micros = std::chrono::duration_cast<std::chrono::microseconds>(tp - secs).count();
    std::time_t t = spdlog::log_clock::to_time_t(tp);
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    char buf[48];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<long>(micros));
    return buf;
  }

  std::string component_;
  VmiContext vmi_;
};

std::shared_ptr<spdlog::logger> make_default() {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto lg = std::make_shared<spdlog::logger>("chl", sink);
  lg->set_formatter(make_json_formatter("ch-launcher", {}));
  lg->set_level(spdlog::level::info);
  lg->flush_on(spdlog::level::trace);
  return lg;
}

}  // namespace

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

std::unique_ptr<spdlog::formatter> make_json_formatter(const std::string& component,
                                                       const VmiContext& vmi) {
  return std::make_unique<JsonFormatter>(component, vmi);
}

std::shared_ptr<spdlog::logger>& logger() {
  static std::shared_ptr<spdlog::logger> lg = make_default();
  return lg;
}

void init(const std::string& component, spdlog::level::level_enum level, const std::string& path) {
  std::lock_guard lock(state().mu);
  state().component = component;
  spdlog::sink_ptr sink;
  if (path.empty()) {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  } else {
    sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path);
  }
  auto lg = std::make_shared<spdlog::logger>("chl", sink);
  lg->set_formatter(make_json_formatter(component, state().vmi));
  lg->set_level(level);
  lg->flush_on(spdlog::level::trace);
  logger() = lg;
}

void set_vmi(const VmiContext& vmi) {
  std::lock_guard lock(state().mu);
  state().vmi = vmi;
  logger()->set_formatter(make_json_formatter(state().component, vmi));
}

bool parse_level(const std::string& text, spdlog::level::level_enum& out) {
  static const std::pair<const char*, spdlog::level::level_enum> table[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warning", spdlog::level::warn},
      {"warn", spdlog::level::warn},   {"error", spdlog::level::err},
      {"critical", spdlog::level::critical}, {"off", spdlog::level::off}};
  for (const auto& [name, lvl] : table) {
    if (text == name) {
      out = lvl;
      return true;
    }
  }
  return false;
}

}  // namespace chl::common::log

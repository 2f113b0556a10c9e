#include "tests/vmm_double/cli.hpp"

#include <cstdlib>

namespace chl::vmm_double {

namespace {

const char* const kUsageTail =
    "\n\nUsage: cloud-hypervisor [OPTIONS]\n\nFor more information, try '--help'.\n";

bool parse_int(const std::string& s, int& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (*end != '\0' || v < 0 || v > 1 << 20) return false;
  out = static_cast<int>(v);
  return true;
}

// "path=P" / "fd=N" (and a bare path when `bare_path`), CH's OptionParser style.
bool parse_socket_arg(const std::string& v, bool bare_path, std::string& path, int& fd,
                      std::string& why) {
  if (v.rfind("path=", 0) == 0) {
    path = v.substr(5);
    if (path.empty()) {
      why = "path is empty";
      return false;
    }
    return true;
  }
  if (v.rfind("fd=", 0) == 0) {
    if (!parse_int(v.substr(3), fd)) {
      why = "invalid fd '" + v.substr(3) + "'";
      return false;
    }
    return true;
  }
  if (bare_path && !v.empty() && v.find('=') == std::string::npos) {
    path = v;
    return true;
  }
  why = "expected path=<path> or fd=<fd>";
  return false;
}

bool valid_console_arg(const std::string& v) {
  return v == "off" || v == "null" || v == "pty" || v == "tty" ||
         (v.rfind("file=", 0) == 0 && v.size() > 5) || (v.rfind("socket=", 0) == 0 && v.size() > 7);
}

}  // namespace

std::string version_line() { return "cloud-hypervisor v52.0.0 (vmm-double test double)"; }

std::string help_text() {
  return "vmm-double: a TEST DOUBLE of Cloud Hypervisor (not a hypervisor; it runs no guest "
         "code).\n"
         "\n"
         "Usage: cloud-hypervisor [OPTIONS]\n"
         "\n"
         "Options:\n"
         "      --api-socket <api-socket>        HTTP API socket: path=</path/to/a/file> or "
         "fd=<fd>\n"
         "      --event-monitor <event-monitor>  File to report events on: path=</path/to/a/file> "
         "or fd=<fd>\n"
         "      --serial <serial>                "
         "off|null|pty|tty|file=</path/to/a/file>|socket=</path/to/a/file>\n"
         "      --console <console>              "
         "off|null|pty|tty|file=</path/to/a/file>|socket=</path/to/a/file>\n"
         "      --seccomp <seccomp>              true|false|log (accepted, no filter is "
         "installed)\n"
         "      --log-file <log-file>            Log file. Standard error is used if not "
         "specified\n"
         "  -v...                                Sets the level of debugging output\n"
         "  -h, --help                           Print help\n"
         "  -V, --version                        Print version\n"
         "\n"
         "Fault injection (environment): VMM_DOUBLE_CRASH_AT, VMM_DOUBLE_EXIT_WITHOUT_EVENTS, "
         "VMM_DOUBLE_HANG,\n"
         "VMM_DOUBLE_FAIL, VMM_DOUBLE_GARBAGE_EVENTS, VMM_DOUBLE_EVENT_LAG_MS, VMM_DOUBLE_BOOT_DELAY_MS, "
         "VMM_DOUBLE_PHASE_DELAY_MS,\n"
         "VMM_DOUBLE_HEARTBEAT_MS — see docs/vmm-double.md.\n";
}

std::optional<CliOptions> parse_cli(const std::vector<std::string>& args, CliError& err) {
  CliOptions o;
  auto fail = [&](const std::string& msg) {
    err.message = "error: " + msg + kUsageTail;
    err.exit_code = 2;
    return std::nullopt;
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    std::string value;
    bool has_inline = false;
    if (a.rfind("--", 0) == 0) {
      if (const auto eq = a.find('='); eq != std::string::npos) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
        has_inline = true;
      }
    }
    auto take = [&](const std::string& display) -> bool {
      if (has_inline) return true;
      if (i + 1 >= args.size() || (args[i + 1].rfind("-", 0) == 0 && args[i + 1].size() > 1)) {
        err.message = "error: a value is required for '" + display +
                      "' but none was supplied\n\nFor more information, try '--help'.\n";
        err.exit_code = 2;
        return false;
      }
      value = args[++i];
      return true;
    };
    if (a == "--api-socket") {
      if (!take("--api-socket <api-socket>")) return std::nullopt;
      std::string why;
      if (!parse_socket_arg(value, true, o.api_path, o.api_fd, why))
        return fail("invalid value '" + value + "' for '--api-socket <api-socket>': " + why);
    } else if (a == "--event-monitor") {
      if (!take("--event-monitor <event-monitor>")) return std::nullopt;
      std::string why;
      if (!parse_socket_arg(value, false, o.event_path, o.event_fd, why))
        return fail("invalid value '" + value + "' for '--event-monitor <event-monitor>': " + why);
    } else if (a == "--serial") {
      if (!take("--serial <serial>")) return std::nullopt;
      if (!valid_console_arg(value))
        return fail("invalid value '" + value + "' for '--serial <serial>'");
      o.serial = value;
    } else if (a == "--console") {
      if (!take("--console <console>")) return std::nullopt;
      if (!valid_console_arg(value))
        return fail("invalid value '" + value + "' for '--console <console>'");
      o.console = value;
    } else if (a == "--seccomp") {
      if (!take("--seccomp <seccomp>")) return std::nullopt;
      if (value != "true" && value != "false" && value != "log") {
        return fail("invalid value '" + value +
                    "' for '--seccomp <seccomp>'\n  [possible values: true, false, log]");
      }
      o.seccomp = value;
    } else if (a == "--log-file") {
      if (!take("--log-file <log-file>")) return std::nullopt;
      o.log_file = value;
    } else if (a == "--version" || a == "-V") {
      o.version = true;
    } else if (a == "--help" || a == "-h") {
      o.help = true;
    } else if (a.size() >= 2 && a[0] == '-' && a[1] == 'v' &&
               a.find_first_not_of('v', 1) == std::string::npos) {
      o.verbosity += static_cast<int>(a.size() - 1);
    } else {
      return fail("unexpected argument '" + args[i] + "' found");
    }
  }
  return o;
}

}  // namespace chl::vmm_double

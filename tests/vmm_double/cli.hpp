#pragma once
// The double's command line: the part of cloud-hypervisor's that the launcher uses.
//   --api-socket path=P | fd=N | P     HTTP API socket (P created and removed at exit)
//   --event-monitor path=P | fd=N      event stream (file truncated, or an inherited fd)
//   --serial off|null|pty|tty|file=P|socket=P   (like CH: only used for a VM configured on the
//   --console off|null|pty|tty|file=P|socket=P   command line, which the double has not; checked
//                                                 and otherwise ignored — the API config rules)
//   --seccomp true|false|log          accepted (the double installs no filter)
//   --log-file P                      where the double's own log lines go (default stderr)
//   -v (repeatable, -vv, -vvv)        more log lines
//   -V, --version                     "cloud-hypervisor v52.0.0 (vmm-double test double)"
//   -h, --help
// Errors print clap's wording ("error: unexpected argument '--foo' found") and exit 2.
#include <optional>
#include <string>
#include <vector>

namespace chl::vmm_double {

struct CliOptions {
  std::string api_path;
  int api_fd = -1;
  std::string event_path;
  int event_fd = -1;
  std::string serial = "null";
  std::string console = "tty";
  std::string seccomp = "true";
  std::string log_file;
  int verbosity = 0;
  bool version = false;
  bool help = false;
};

struct CliError {
  std::string message;  // full text for stderr
  int exit_code = 2;
};

// argv without argv[0]. Either options or an error to print.
std::optional<CliOptions> parse_cli(const std::vector<std::string>& args, CliError& err);

std::string version_line();
std::string help_text();

}  // namespace chl::vmm_double

// `ch-launcher console`: attach this terminal (or a pipe) to a VMI's serial console through the
// bridge's `virt-serial0` socket. The relay itself is console_bridge::ConsoleClient.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/registry.hpp"
#include "cli/run_launcher.hpp"
#include "launcher/state_dir.hpp"
#include "vmi/parser.hpp"
#include "console_bridge/console_client.hpp"

namespace {

constexpr const char* kUsage =
    "usage: ch-launcher console (--state-dir DIR | --socket PATH | --vmi FILE)\n"
    "\n"
    "Attach to the VMI's serial console (the socket DIR/virt-serial0 served by the launcher).\n"
    "On a terminal: raw mode, Ctrl+] leaves, the terminal is restored on exit.\n"
    "With stdin not a terminal (pipe mode): input is sent as is; output is printed until\n"
    "stdin ends (plus half a second) or the VM ends.\n"
    "\n"
    "  --state-dir DIR  the launcher's state directory (holds virt-serial0)\n"
    "  --socket PATH    the console socket itself\n"
    "  --vmi FILE       the VMI manifest: its default state directory\n";

int run_console(const std::vector<std::string>& argv) {
  chl::cli::Args args({"--state-dir", "--socket", "--vmi"}, {});
  if (!args.parse(argv)) return chl::cli::usage_error("console", args.error());
  if (!args.positionals().empty()) {
    return chl::cli::usage_error("console", "unexpected argument '" + args.positionals().front() + "'");
  }
  int given = int(args.has("--state-dir")) + int(args.has("--socket")) + int(args.has("--vmi"));
  if (given != 1) return chl::cli::usage_error("console", "give exactly one of --state-dir, --socket, --vmi");
  chl::console_bridge::ClientOptions opts;
  if (auto dir = args.get("--state-dir")) {
    opts.socket_path = std::filesystem::path(*dir) / "virt-serial0";
  } else if (auto sock = args.get("--socket")) {
    opts.socket_path = *sock;
  } else {
    std::string file = *args.get("--vmi");
    auto text = chl::vmi::read_manifest(file);
    if (!text) return chl::cli::usage_error("console", text.error().message(), 1);
    auto parsed = chl::vmi::parse_vmi(*text);
    const auto& meta = parsed.vmi.metadata;
    if (parsed.fatal || meta.name.empty()) {
      return chl::cli::usage_error("console", "cannot read the VMI's name from " + file, 1);
    }
    opts.socket_path = chl::cli::console_socket_path(
        chl::launcher::default_state_dir(meta.namespace_, meta.name), false, meta.uid);
  }
  auto result = chl::console_bridge::ConsoleClient(opts).run();
  if (!result) {
    std::fprintf(stderr, "ch-launcher console: %s\n", result.error().message().c_str());
    return 1;
  }
  return result->exit_code();
}

static chl::cli::Registrar reg({"console", "attach to a VMI's serial console (Ctrl+] leaves)", kUsage,
                                run_console});

}  // namespace

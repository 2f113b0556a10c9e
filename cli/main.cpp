// ch-launcher: runs a KubeVirt VirtualMachineInstance on Cloud Hypervisor (or QEMU/KVM through
// libvirt). This file only finds the subcommand (registered by cli/*.cpp) and runs it;
// exceptions are caught here and nowhere else.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/registry.hpp"

namespace {

void print_help() {
  std::printf("ch-launcher — run KubeVirt VirtualMachineInstances on Cloud Hypervisor or QEMU/KVM\n\n");
  std::printf("usage: ch-launcher <command> [options]\n\ncommands:\n");
  auto cmds = chl::cli::commands();
  std::sort(cmds.begin(), cmds.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const auto& c : cmds) std::printf("  %-22s %s\n", c.name.c_str(), c.summary.c_str());
  std::printf("\n`ch-launcher help <command>` shows a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // KubeVirt's pod starts /usr/bin/virt-launcher-monitor (or virt-launcher) with virt-launcher's
  // flags: under those names the binary is `ch-launcher virt-launcher`.
  if (argc > 0) {
    std::string self = argv[0];
    self = self.substr(self.find_last_of('/') == std::string::npos ? 0 : self.find_last_of('/') + 1);
    if (self == "virt-launcher" || self == "virt-launcher-monitor") args.insert(args.begin(), "virt-launcher");
  }
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    if (args.size() >= 2) {
      std::string want = args[1];
      for (std::size_t i = 2; i < args.size(); ++i) want += " " + args[i];
      for (const auto& c : chl::cli::commands()) {
        if (c.name == want) {
          std::printf("%s\n", c.usage.c_str());
          return 0;
        }
      }
      std::fprintf(stderr, "ch-launcher: unknown command '%s'\n", want.c_str());
      return 2;
    }
    print_help();
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version" || args[0] == "version") {
    std::printf("ch-launcher %s\n", CHL_VERSION);
    return 0;
  }
  // Longest match first: "disk convert" before "disk".
  const chl::cli::Command* found = nullptr;
  std::size_t words = 0;
  for (const auto& c : chl::cli::commands()) {
    std::size_t n = 1 + static_cast<std::size_t>(std::count(c.name.begin(), c.name.end(), ' '));
    if (n > args.size() || n <= words) continue;
    std::string joined = args[0];
    for (std::size_t i = 1; i < n; ++i) joined += " " + args[i];
    if (joined == c.name) {
      found = &c;
      words = n;
    }
  }
  if (!found) {
    std::fprintf(stderr, "ch-launcher: unknown command '%s' (see `ch-launcher help`)\n", args[0].c_str());
    return 2;
  }
  std::vector<std::string> rest(args.begin() + static_cast<long>(words), args.end());
  if (std::find(rest.begin(), rest.end(), "--help") != rest.end()) {
    std::printf("%s\n", found->usage.c_str());
    return 0;
  }
  try {
    return found->run(rest);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ch-launcher %s: %s\n", found->name.c_str(), e.what());
    return 1;
  }
}

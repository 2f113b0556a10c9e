// `ch-launcher network plan|up`: pod networking on its own (the logic is in network/).
//   plan  what would be wired for a VMI in the current network namespace (nothing changed);
//   up    wire it, serve DHCP, print the taps, wait for SIGINT/SIGTERM, tear down — for trying a
//         hypervisor by hand on the taps (e.g. QEMU -netdev tap,ifname=tap0,script=no).
// Both load the module libchl-network.so (network/network_module.hpp), which holds the code that
// needs libnl-route-3 and libnftables.
#include <signal.h>

#include <cstdio>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "cli/args.hpp"
#include "cli/registry.hpp"
#include "network/module_loader.hpp"
#include "vmi/parser.hpp"
#include "network/vmm_handoff.hpp"
#include "network/wire.hpp"

namespace {

using chl::network::PlanResult;

std::optional<chl::network::NetworkModule> load_module(const std::string& cmd) {
  auto m = chl::network::load_network_module();
  if (!m) {
    std::fprintf(stderr, "ch-launcher %s: %s\n", cmd.c_str(), m.error().message().c_str());
    return std::nullopt;
  }
  return std::move(*m);
}

// The VMI's plans in this namespace; prints refusals and returns nullopt on any problem.
std::optional<PlanResult> plan_for(const std::string& cmd, const chl::cli::Args& args,
                                   const chl::network::NetworkModule& module) {
  auto path = args.get("--vmi");
  if (!path) {
    chl::cli::usage_error(cmd, "--vmi FILE is required");
    return std::nullopt;
  }
  auto text = chl::vmi::read_manifest(*path);
  if (!text) {
    std::fprintf(stderr, "ch-launcher %s: %s\n", cmd.c_str(), text.error().message().c_str());
    return std::nullopt;
  }
  auto parsed = chl::vmi::parse_vmi(*text);
  if (parsed.fatal || !parsed.problems.empty()) {
    for (const auto& p : parsed.problems) std::fprintf(stderr, "%s: %s\n", path->c_str(), to_string(p).c_str());
    return std::nullopt;
  }
  auto facts = module.api->discover_pod(args.get_or("--resolv-conf", "/etc/resolv.conf"));
  if (!facts) {
    std::fprintf(stderr, "ch-launcher %s: %s\n", cmd.c_str(), facts.error().message().c_str());
    return std::nullopt;
  }
  auto r = chl::network::plan_networks(parsed.vmi, *facts, chl::vmi::cpu_topology(parsed.vmi).vcpus());
  if (!r.refusals.empty()) {
    for (const auto& v : r.refusals) std::fprintf(stderr, "%s: %s\n", path->c_str(), to_string(v).c_str());
    return std::nullopt;
  }
  return r;
}

void print_plan(const chl::network::NetworkPlan& p) {
  using namespace chl::network;
  std::printf("%s: %s on %s: bridge %s tap %s mac %s mtu %u queues %u", p.iface_name.c_str(), to_string(p.binding),
              p.pod_iface.c_str(), p.bridge.c_str(), p.tap.c_str(), format_mac(p.mac).c_str(), p.mtu, p.queues);
  if (p.lease.address.address.value != 0)
    std::printf(" lease %s%s%s", format_ipv4_cidr(p.lease.address).c_str(), p.lease.router ? " via " : "",
                p.lease.router ? format_ipv4(*p.lease.router).c_str() : "");
  if (p.binding == PlanBinding::Masquerade) {
    std::printf(" ports ");
    if (p.ports.empty()) std::printf("all");
    for (std::size_t i = 0; i < p.ports.size(); ++i)
      std::printf("%s%s/%u", i ? "," : "", p.ports[i].first.c_str(), p.ports[i].second);
  }
  std::printf("\n");
}

int plan_cmd(const std::vector<std::string>& argv) {
  chl::cli::Args args({"--vmi", "--resolv-conf"}, {});
  if (!args.parse(argv)) return chl::cli::usage_error("network plan", args.error());
  auto module = load_module("network plan");
  if (!module) return 1;
  auto r = plan_for("network plan", args, *module);
  if (!r) return 1;
  for (const auto& p : r->plans) print_plan(p);
  return 0;
}

int up_cmd(const std::vector<std::string>& argv) {
  chl::cli::Args args({"--vmi", "--resolv-conf"}, {});
  if (!args.parse(argv)) return chl::cli::usage_error("network up", args.error());
  // Declared before the io_context and the WiredNetwork: their code is in the module.
  auto module = load_module("network up");
  if (!module) return 1;
  auto r = plan_for("network up", args, *module);
  if (!r) return 1;
  // Block the stop signals before any thread starts, then wait for them with sigwait.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  boost::asio::io_context io;
  auto wired = module->api->wire_pod_network(r->plans, &io);
  if (!wired) {
    std::fprintf(stderr, "ch-launcher network up: %s\n", wired.error().message().c_str());
    return 1;
  }
  // A hypervisor opening the tap by name (QEMU ifname=, libvirt managed='no') cannot attach
  // while we hold its queues (a single-queue tap takes one fd): give them up; the tap is
  // persistent and stays.
  for (auto& w : (*wired)->interfaces()) w.tap_fds.clear();
  for (const auto& p : (*wired)->plans()) print_plan(p);
  for (const auto& w : (*wired)->interfaces())
    std::printf("%s", chl::network::libvirt_interface_xml(w, "").c_str());
  std::printf("ready: SIGINT or SIGTERM tears down\n");
  std::fflush(stdout);
  auto guard = boost::asio::make_work_guard(io);
  std::thread t([&io] { io.run(); });
  int sig = 0;
  sigwait(&stop, &sig);
  guard.reset();
  io.stop();
  t.join();
  auto st = (*wired)->teardown();
  if (!st) {
    std::fprintf(stderr, "ch-launcher network up: teardown: %s\n", st.error().message().c_str());
    return 1;
  }
  return 0;
}

chl::cli::Registrar reg_plan(
    {"network plan", "what pod networking would wire for a VMI in this network namespace",
     "usage: ch-launcher network plan --vmi FILE [--resolv-conf PATH]\n"
     "  One line per interface (binding, bridge, tap, MAC, MTU, queues, lease, ports), or the\n"
     "  refusals with their field paths (exit 1). Nothing is changed.\n",
     plan_cmd});
chl::cli::Registrar reg_up(
    {"network up", "wire a VMI's pod networking here and hold it until SIGINT/SIGTERM",
     "usage: ch-launcher network up --vmi FILE [--resolv-conf PATH]\n"
     "  Builds the bridges, taps, nftables table and DHCP servers in the current network\n"
     "  namespace, prints them, waits for SIGINT or SIGTERM and removes everything.\n",
     up_cmd});

}  // namespace

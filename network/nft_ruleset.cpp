#include "network/nft_ruleset.hpp"

#include <memory>
#include <sstream>

#include <nftables/libnftables.h>

namespace chl::network {

namespace {
std::string table() { return std::string("inet ") + kNftTable; }
}  // namespace

std::string delete_ruleset() {
  // "add" makes the delete succeed when the table is absent (bookworm's nft has no "destroy").
  return "add table " + table() + "\ndelete table " + table() + "\n";
}

std::string masquerade_ruleset(const std::vector<NetworkPlan>& plans) {
  std::ostringstream o;
  o << delete_ruleset();
  bool any = false;
  for (const auto& p : plans) any = any || p.binding == PlanBinding::Masquerade;
  if (!any) return o.str();
  o << "table " << table() << " {\n";
  // Hooks and priorities as KubeVirt's masquerade table ("nat" per family).
  o << "  chain prerouting {\n    type nat hook prerouting priority -100; policy accept;\n";
  for (const auto& p : plans)
    if (p.binding == PlanBinding::Masquerade)
      o << "    iifname \"" << p.pod_iface << "\" jump inbound_" << p.pod_iface << "\n";
  o << "  }\n";
  o << "  chain output {\n    type nat hook output priority -100; policy accept;\n";
  for (const auto& p : plans)
    if (p.binding == PlanBinding::Masquerade) o << "    jump output_" << p.pod_iface << "\n";
  o << "  }\n";
  o << "  chain postrouting {\n    type nat hook postrouting priority 100; policy accept;\n";
  for (const auto& p : plans) {
    if (p.binding != PlanBinding::Masquerade) continue;
    // The guest's own traffic leaves with the pod's address.
    o << "    ip saddr " << format_ipv4(p.guest4) << " counter masquerade\n";
    if (!p.guest6.empty()) o << "    ip6 saddr " << p.guest6 << " counter masquerade\n";
    o << "    oifname \"" << p.bridge << "\" jump postinbound_" << p.pod_iface << "\n";
  }
  o << "  }\n";
  for (const auto& p : plans) {
    if (p.binding != PlanBinding::Masquerade) continue;
    const std::string g4 = format_ipv4(p.guest4);
    const std::string gw4 = format_ipv4(p.gateway4.address);
    std::string gw6 = p.gateway6.substr(0, p.gateway6.find('/'));
    // inbound: what arrives on the pod interface is DNATed to the guest.
    o << "  chain inbound_" << p.pod_iface << " {\n";
    if (p.ports.empty()) {
      o << "    tcp dport { ";
      for (std::size_t i = 0; i < std::size(kReservedPorts); ++i) o << (i ? ", " : "") << kReservedPorts[i];
      o << " } return\n";
      o << "    counter dnat ip to " << g4 << "\n";
      if (!p.guest6.empty()) o << "    counter dnat ip6 to " << p.guest6 << "\n";
    } else {
      for (const auto& [proto, port] : p.ports) {
        o << "    " << proto << " dport " << port << " counter dnat ip to " << g4 << "\n";
        if (!p.guest6.empty()) o << "    " << proto << " dport " << port << " counter dnat ip6 to " << p.guest6 << "\n";
      }
    }
    o << "  }\n";
    // output: the pod's own processes reach the guest on localhost (KubeVirt's rule), and the
    // pod-local source is made the gateway so the guest's answer comes back through us.
    o << "  chain output_" << p.pod_iface << " {\n";
    if (p.ports.empty()) {
      o << "    ip daddr 127.0.0.1 tcp dport { 49152, 49153 } return\n";
      o << "    ip daddr 127.0.0.1 counter dnat ip to " << g4 << "\n";
      if (!p.guest6.empty()) o << "    ip6 daddr ::1 counter dnat ip6 to " << p.guest6 << "\n";
    } else {
      for (const auto& [proto, port] : p.ports) {
        o << "    ip daddr 127.0.0.1 " << proto << " dport " << port << " counter dnat ip to " << g4 << "\n";
        if (!p.guest6.empty())
          o << "    ip6 daddr ::1 " << proto << " dport " << port << " counter dnat ip6 to " << p.guest6 << "\n";
      }
    }
    o << "  }\n";
    o << "  chain postinbound_" << p.pod_iface << " {\n";
    o << "    ip saddr 127.0.0.1 counter snat ip to " << gw4 << "\n";
    if (!p.guest6.empty()) o << "    ip6 saddr ::1 counter snat ip6 to " << gw6 << "\n";
    o << "  }\n";
  }
  o << "}\n";
  return o.str();
}

namespace {
struct CtxDeleter {
  void operator()(nft_ctx* c) const { nft_ctx_free(c); }
};
using Ctx = std::unique_ptr<nft_ctx, CtxDeleter>;

common::Result<Ctx> make_ctx() {
  Ctx ctx(nft_ctx_new(NFT_CTX_DEFAULT));
  if (!ctx) return common::fail(std::errc::not_enough_memory, "libnftables: creating a context");
  if (nft_ctx_buffer_output(ctx.get()) != 0 || nft_ctx_buffer_error(ctx.get()) != 0)
    return common::fail(std::errc::io_error, "libnftables: buffering output");
  return ctx;
}
std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}
}  // namespace

void Nft::CtxDeleter::operator()(::nft_ctx* c) const { nft_ctx_free(c); }

common::Result<Nft> Nft::open() {
  CHL_TRY(auto ctx, make_ctx());
  Nft n;
  n.ctx_.reset(ctx.release());
  return n;
}

common::Status Nft::run(const std::string& commands) {
  if (nft_run_cmd_from_buffer(ctx_.get(), commands.c_str()) != 0) {
    const char* err = nft_ctx_get_error_buffer(ctx_.get());
    return common::fail(std::errc::io_error, "nftables: " + trim(err && *err ? err : "failed"));
  }
  return {};
}

common::Status nft_run(const std::string& commands) {
  CHL_TRY(auto nft, Nft::open());
  return nft.run(commands);
}

common::Result<std::string> nft_list_table() {
  // `list table` of a missing table fails without a message in libnftables 1.0.6: look the
  // table up in `list tables` first.
  auto run = [](const std::string& cmd) -> common::Result<std::string> {
    CHL_TRY(auto ctx, make_ctx());
    if (nft_run_cmd_from_buffer(ctx.get(), cmd.c_str()) != 0) {
      const char* err = nft_ctx_get_error_buffer(ctx.get());
      return common::fail(std::errc::io_error, "nftables: " + cmd + ": " + trim(err && *err ? err : "failed"));
    }
    const char* out = nft_ctx_get_output_buffer(ctx.get());
    return std::string(out ? out : "");
  };
  CHL_TRY(auto tables, run("list tables"));
  if (tables.find("table " + table() + "\n") == std::string::npos) return std::string();
  return run("list table " + table());
}

}  // namespace chl::network

#pragma once
// The nftables ruleset of masquerade bindings, as nft syntax text (pure, unit-tested), and its
// application through libnftables (no `nft` process). One table of our own,
// `inet ch_launcher`, replaced atomically (add + delete + define in one transaction: a restart
// never duplicates rules) and deleted on teardown.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "network/plan.hpp"

struct nft_ctx;

namespace chl::network {

inline constexpr const char* kNftTable = "ch_launcher";

// Ports KubeVirt keeps for itself when it forwards "all ports": libvirt's migration ports
// (LibvirtDirectMigrationPort 49152, LibvirtBlockMigrationPort 49153, from KubeVirt's
// migration proxy; its masquerade code skipped them for the pod's own traffic).
inline constexpr std::uint16_t kReservedPorts[] = {49152, 49153};

// The whole transaction: replace table inet ch_launcher with the rules of `plans`' masquerade
// interfaces (none: just delete it).
std::string masquerade_ruleset(const std::vector<NetworkPlan>& plans);
// The transaction that deletes our table (whether or not it exists).
std::string delete_ruleset();

// A libnftables context (it holds its netlink socket from creation). Used while wiring only:
// the teardown deletes the table with a plain nfnetlink message (pod_teardown.hpp).
class Nft {
 public:
  static common::Result<Nft> open();
  // Run nft commands; the error carries nft's own message.
  common::Status run(const std::string& commands);

 private:
  struct CtxDeleter {
    void operator()(::nft_ctx* c) const;
  };
  std::unique_ptr<::nft_ctx, CtxDeleter> ctx_;
};

// Run nft commands with a context of their own.
common::Status nft_run(const std::string& commands);
// `nft list table inet ch_launcher` through libnftables ("" when absent) — for tests/diagnostics.
common::Result<std::string> nft_list_table();

}  // namespace chl::network

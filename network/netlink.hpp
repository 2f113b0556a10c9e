#pragma once
// The few rtnetlink operations pod networking needs, through libnl-route-3 (no `ip`): links
// (bridge create, enslave, MTU, up/down, delete), IPv4/IPv6 addresses, IPv4 routes, and the
// pod's links with their addresses and routes. Acts in the calling thread's network namespace
// (the socket's, fixed when opened).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "network/mac.hpp"
#include "network/plan.hpp"

struct nl_sock;

namespace chl::network {

struct LinkInfo {
  int index = 0;
  std::string name;
  std::string kind;  // "bridge", "tun", "veth", "" when the kernel gives none
  std::uint32_t mtu = 0;
  int master = 0;    // ifindex of the bridge it is enslaved to, 0 if none
  bool up = false;
  std::string alias;  // IFLA_IFALIAS
};

class Netlink {
 public:
  static common::Result<Netlink> open();

  common::Result<std::optional<LinkInfo>> find_link(const std::string& name);
  // A new bridge (fails with EEXIST if one exists by that name).
  common::Status create_bridge(const std::string& name, std::uint32_t mtu, const Mac* mac);
  // Enslave `name` to bridge `master`; master "" releases it.
  common::Status set_master(const std::string& name, const std::string& master);
  common::Status set_mtu(const std::string& name, std::uint32_t mtu);
  common::Status set_up(const std::string& name, bool up);
  // IFLA_IFALIAS: where a bridge binding keeps the pod interface's original address and
  // routes, so that a restarted launcher (or teardown) can give them back.
  common::Status set_alias(const std::string& name, const std::string& alias);
  // Idempotent: an address already present is success; a missing link on delete is success.
  common::Status add_address(const std::string& name, const std::string& cidr);
  common::Status delete_address(const std::string& name, const std::string& cidr);
  common::Status delete_link(const std::string& name);
  common::Status add_route4(const std::string& name, const Route4& route);
  // Every link of the namespace, with its IPv4 addresses, global IPv6 addresses and the IPv4
  // routes of the main table through it (kernel-made subnet routes left out).
  common::Result<std::vector<PodLink>> list_links();

 private:
  struct SockDeleter {
    void operator()(nl_sock* s) const;
  };
  std::unique_ptr<nl_sock, SockDeleter> sock_;
  common::Result<int> index_of(const std::string& name);
};

// Write a sysctl under /proc/sys ("net/ipv4/ip_forward", "1") in the current netns.
common::Status write_sysctl(const std::string& key, const std::string& value);
// Turn TX checksum offload off on a link (KubeVirt does it on its bridges: a DHCP reply made
// on the bridge with a partial checksum would otherwise reach some guests unchecksummed).
common::Status disable_tx_checksum(const std::string& name);

}  // namespace chl::network

#pragma once
// The pod's DNS, read off its resolv.conf: IPv4 nameservers and search domains.
#include <string>
#include <string_view>
#include <vector>

#include "network/ip.hpp"

namespace chl::network {

struct ResolvConf {
  std::vector<Ipv4> nameservers;
  std::vector<std::string> search;
};

ResolvConf parse_resolv_conf(std::string_view text);
// The file at `path` parsed; a missing or unreadable file gives no DNS ("" = none read).
ResolvConf read_resolv_conf(const std::string& path);

}  // namespace chl::network

#include "network/resolv_conf.hpp"

#include <sstream>

namespace chl::network {

ResolvConf parse_resolv_conf(std::string_view text) {
  ResolvConf rc;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    if (auto c = line.find_first_of("#;"); c != std::string::npos) line.resize(c);
    std::istringstream words(line);
    std::string key;
    if (!(words >> key)) continue;
    if (key == "nameserver") {
      std::string v;
      if (words >> v)
        if (auto ip = parse_ipv4(v)) rc.nameservers.push_back(*ip);  // IPv6 servers: no DHCPv4 slot
    } else if (key == "search" || key == "domain") {
      rc.search.clear();  // the last search/domain line wins (resolv.conf(5))
      std::string d;
      while (words >> d) rc.search.push_back(d);
    }
  }
  return rc;
}

}  // namespace chl::network

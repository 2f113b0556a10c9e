#include "network/resolv_conf.hpp"

#include <cstdio>
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

ResolvConf read_resolv_conf(const std::string& path) {
  if (path.empty()) return {};
  std::string text;
  if (FILE* f = std::fopen(path.c_str(), "re")) {
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    std::fclose(f);
  }
  return parse_resolv_conf(text);
}

}  // namespace chl::network

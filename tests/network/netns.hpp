#pragma once
// Test-only helpers for real kernel networking: named network namespaces made with iproute2's
// `ip netns` (allowed in tests only; the library itself uses netlink), code run inside one on
// a thread of its own (setns), and TCP probes with timeouts.
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.hpp"
#include "tests/support/test_support.hpp"
#include "vmi/vmi.hpp"

namespace chl::test::net {

// `ip netns add NAME`, `ip netns del NAME` on destruction (which also removes its devices).
class Netns {
 public:
  explicit Netns(std::string name) : name_(std::move(name)) {}
  Netns(const Netns&) = delete;
  Netns& operator=(const Netns&) = delete;
  ~Netns();
  // Creates it; "" on success, else why not.
  std::string create();
  [[nodiscard]] const std::string& name() const { return name_; }

 private:
  std::string name_;
  bool made_ = false;
};

// Run `fn` on a new thread that has joined namespace `ns` (setns), and wait for it.
void in_netns(const std::string& ns, const std::function<void()>& fn);

// Pids of the processes in namespace `ns` (named by `ip netns`), by the namespace's inode.
std::vector<long> processes_in(const std::string& ns);

// `ip -n NS args...`; returns "" on success, else the command and its output.
std::string ip(const std::string& ns, const std::vector<std::string>& args);

// A TCP listener on 0.0.0.0:port (ipv6: [::]:port, IPv6 only) made inside `ns`.
common::UniqueFd tcp_listen(const std::string& ns, int port, bool ipv6 = false);
// Accept one connection within `timeout`; the peer's address as text, or "" on timeout.
// Writes `greeting` to the accepted connection.
std::string accept_one(int listener, std::chrono::milliseconds timeout, const std::string& greeting = {});
// Connect from inside `ns` to ip:port (IPv4, or IPv6 when `ip` has a ':') within `timeout`: 0 on success (with `read_back` filled
// with what the server sent before closing), else the errno (ETIMEDOUT on timeout).
int tcp_connect(const std::string& ns, const std::string& ip, int port, std::chrono::milliseconds timeout,
                std::string* read_back = nullptr);

// busybox udhcpc in `guest_ns` on eth0 (files in `dir`); the lease it got as name=value lines
// (ip subnet router dns domain search mtu lease serverid hostname staticroutes), applied to
// eth0 (address and default route). `log` gets udhcpc's exit code and output.
std::map<std::string, std::string> run_udhcpc(const std::string& guest_ns, const chl::test::TempDir& dir,
                                              std::string& log);
// isc-dhcp-client's dhclient -6 on eth0 in `guest_ns` (files in `dir`) until it has a lease or
// `timeout` passes; its script applies the address (nodad) and records the lease, returned as
// "ip6=ADDR/PREFIX search=DOMAINS\n" ("" if none; `log` gets dhclient's output). nullopt: no
// dhclient installed.
std::optional<std::string> run_dhclient6(const std::string& guest_ns, const chl::test::TempDir& dir,
                                         std::chrono::seconds timeout, std::string& log);
// A VMI "vm1" on the pod network "default" with these interfaces (YAML list items indented 6)
// and extra `devices:` keys (indented 6); throws if it does not parse.
chl::vmi::Vmi vmi_with(const std::string& iface_yaml, const std::string& devices_extra = "");

}  // namespace chl::test::net

// network_bench: see CMakeLists.txt. Prints RESULT lines (bench/run.sh's format).
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "vmi/parser.hpp"
#include "common/child_process.hpp"
#include "network/dhcp_server.hpp"
#include "network/wire.hpp"

using namespace chl::network;
using Clock = std::chrono::steady_clock;

namespace {

std::string pid_tag = std::to_string(::getpid());
std::string ns_node = "chlb" + pid_tag + "n", ns_pod = "chlb" + pid_tag + "p",
            ns_guest = "chlb" + pid_tag + "g", ns_direct = "chlb" + pid_tag + "d";

int sh(const std::string& cmd) {
  const int rc = std::system((cmd + " >/dev/null 2>&1").c_str());
  return rc;
}
void must(const std::string& cmd) {
  if (sh(cmd) != 0) {
    std::fprintf(stderr, "network_bench: failed: %s\n", cmd.c_str());
    throw std::runtime_error(cmd);
  }
}
std::string capture(const std::string& cmd) {
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ::pclose(p);
  }
  return out;
}

void in_netns(const std::string& ns, const std::function<void()>& fn) {
  std::exception_ptr thrown;
  std::thread t([&] {
    const std::string path = "/var/run/netns/" + ns;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
      thrown = std::make_exception_ptr(std::runtime_error("setns " + path));
      return;
    }
    ::close(fd);
    try {
      fn();
    } catch (...) {
      thrown = std::current_exception();
    }
  });
  t.join();
  if (thrown) std::rethrow_exception(thrown);
}

long status_kib(const std::string& pid, const char* key) {
  std::ifstream in("/proc/" + pid + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::atol(line.c_str() + std::strlen(key));
  return -1;
}
long pss_kib(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/smaps_rollup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Pss:", 0) == 0) return std::atol(line.c_str() + 4);
  return -1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void result(const char* key, const char* what, double ours, const char* peer_name, double peer, const char* unit) {
  if (peer_name && *peer_name)
    std::printf("RESULT\t%s\t%s\t%.3f\t%s\t%.3f\t%s\tinfo\t\n", key, what, ours, peer_name, peer, unit);
  else
    std::printf("RESULT\t%s\t%s\t%.3f\t\t\t%s\tinfo\t\n", key, what, ours, unit);
  std::fflush(stdout);
}

void cleanup() {
  for (const auto& ns : {ns_node, ns_pod, ns_guest, ns_direct}) sh("ip netns del " + ns);
}

std::vector<NetworkPlan> make_plans() {
  auto parsed = chl::vmi::parse_vmi(R"(apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: bench, uid: b0b0-0001}
spec:
  domain:
    memory: {guest: 128Mi}
    devices:
      interfaces: [{name: default, masquerade: {}}]
  networks: [{name: default, pod: {}}]
)");
  std::vector<NetworkPlan> plans;
  in_netns(ns_pod, [&] {
    auto facts = discover_pod("");
    if (!facts) throw std::runtime_error(facts.error().message());
    facts->dns_servers = {*parse_ipv4("10.96.0.10")};
    auto r = plan_networks(parsed.vmi, *facts, 1);
    if (!r.refusals.empty()) throw std::runtime_error(r.refusals[0].message);
    plans = r.plans;
  });
  return plans;
}

struct IoThread {
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard{io.get_executor()};
  std::thread t{[this] { io.run(); }};
  ~IoThread() {
    guard.reset();
    io.stop();
    t.join();
  }
};

bool udhcpc_gets_lease() {
  return sh("ip netns exec " + ns_guest +
            " /bin/busybox udhcpc -i eth0 -f -q -n -t 6 -T 1 -s /bin/true") == 0;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 20;
  int seconds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--rounds") rounds = std::atoi(argv[i + 1]);
    if (std::string(argv[i]) == "--seconds") seconds = std::atoi(argv[i + 1]);
  }
  if (::geteuid() != 0) {
    std::printf("network_bench: SKIPPED: needs root (network namespaces)\n");
    return 0;
  }
  for (const char* t : {"ip", "iperf3", "dnsmasq"})
    if (!chl::common::find_program(t)) {
      std::printf("network_bench: SKIPPED: %s not installed\n", t);
      return 0;
    }
  try {
    for (const auto& ns : {ns_node, ns_pod, ns_guest, ns_direct}) must("ip netns add " + ns);
    must("ip -n " + ns_node + " link add n-eth0 type veth peer name eth0 netns " + ns_pod);
    must("ip -n " + ns_node + " addr add 192.168.77.1/24 dev n-eth0");
    must("ip -n " + ns_node + " link set n-eth0 up");
    must("ip -n " + ns_node + " link set lo up");
    must("ip -n " + ns_pod + " addr add 192.168.77.2/24 dev eth0");
    must("ip -n " + ns_pod + " link set eth0 up");
    must("ip -n " + ns_pod + " route add default via 192.168.77.1");
    auto plans = make_plans();

    // 1. Setup and teardown time of one masquerade interface (bridge, tap, addresses, nft table).
    std::vector<double> setup, teardown, rewire;
    in_netns(ns_pod, [&] {
      for (int i = 0; i < rounds; ++i) {
        auto t0 = Clock::now();
        auto w = wire_pod_network(plans, nullptr);
        auto t1 = Clock::now();
        if (!w) throw std::runtime_error(w.error().message());
        (*w)->abandon();  // a crashed launcher: the next wiring reuses the devices
        auto t2 = Clock::now();
        auto w2 = wire_pod_network(plans, nullptr);
        auto t3 = Clock::now();
        if (!w2) throw std::runtime_error(w2.error().message());
        if (auto st = (*w2)->teardown(); !st) throw std::runtime_error(st.error().message());
        auto t4 = Clock::now();
        setup.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        rewire.push_back(std::chrono::duration<double, std::milli>(t3 - t2).count());
        teardown.push_back(std::chrono::duration<double, std::milli>(t4 - t3).count());
      }
    });
    result("net_setup_ms", "wire one masquerade interface (median)", median(setup), "", 0, "ms");
    result("net_rewire_ms", "re-wire after a launcher restart, devices reused (median)", median(rewire), "", 0, "ms");
    result("net_teardown_ms", "teardown of one masquerade interface (median)", median(teardown), "", 0, "ms");

    // 2. DHCP: our server's RSS (delta of this process) vs dnsmasq serving the same lease.
    std::unique_ptr<WiredNetwork> wired;
    in_netns(ns_pod, [&] {
      auto w = wire_pod_network(plans, nullptr);
      if (!w) throw std::runtime_error(w.error().message());
      wired = std::move(*w);
    });
    const std::string mac = format_mac(plans[0].mac);
    must("ip -n " + ns_pod + " link add gst0 type veth peer name eth0 netns " + ns_guest);
    must("ip -n " + ns_pod + " link set gst0 master k6t-eth0 up");
    must("ip -n " + ns_guest + " link set eth0 address " + mac + " up");
    const std::string self = std::to_string(::getpid());
    long ours_delta = 0;
    {
      IoThread io;
      const long before = status_kib(self, "VmRSS:");
      std::unique_ptr<DhcpServer> server;
      in_netns(ns_pod, [&] {
        auto s = DhcpServer::start(io.io, plans[0].bridge, plans[0].mac, plans[0].lease);
        if (!s) throw std::runtime_error(s.error().message());
        server = std::move(*s);
      });
      if (!udhcpc_gets_lease()) throw std::runtime_error("udhcpc got no lease from our server");
      ours_delta = status_kib(self, "VmRSS:") - before;
      server.reset();
    }
    const long ours_total = status_kib(self, "VmRSS:");
    std::string lease = "/tmp/chlb" + pid_tag + ".leases";
    chl::common::SpawnOptions so;
    so.argv = {*chl::common::find_program("ip"), "netns", "exec", ns_pod, *chl::common::find_program("dnsmasq"),
               "--keep-in-foreground", "--no-resolv", "--no-hosts", "--port=0", "--interface=k6t-eth0",
               "--bind-interfaces", "--dhcp-range=10.0.2.2,10.0.2.2,255.255.255.0,infinite",
               "--dhcp-host=" + mac + ",10.0.2.2", "--dhcp-option=3,10.0.2.1", "--dhcp-option=6,10.96.0.10",
               "--dhcp-option=26," + std::to_string(plans[0].mtu), "--dhcp-leasefile=" + lease, "--pid-file=",
               "--user=root"};
    auto dnsmasq = chl::common::ChildProcess::spawn(so);
    if (!dnsmasq) throw std::runtime_error(dnsmasq.error().message());
    sh("ip -n " + ns_guest + " addr flush dev eth0");
    if (!udhcpc_gets_lease()) throw std::runtime_error("udhcpc got no lease from dnsmasq");
    const std::string dpid = std::to_string(dnsmasq->pid());
    const long d_rss = status_kib(dpid, "VmRSS:");
    const long d_pss = pss_kib(dpid);
    (void)dnsmasq->kill_and_reap();
    std::remove(lease.c_str());
    result("net_dhcp_rss_kib", "DHCP server memory: ours = RSS growth of the launcher, dnsmasq = its RSS",
           static_cast<double>(ours_delta), "dnsmasq", static_cast<double>(d_rss), "KiB");
    result("net_dhcp_dnsmasq_pss_kib", "dnsmasq PSS (shared pages split)", static_cast<double>(d_pss), "", 0, "KiB");
    result("net_bench_rss_kib", "whole bench process RSS with the server up (context)", static_cast<double>(ours_total), "", 0, "KiB");

    // 3. Throughput guest -> node: through the bridge + masquerade vs a plain veth.
    must("ip -n " + ns_guest + " addr flush dev eth0");
    must("ip -n " + ns_guest + " addr add 10.0.2.2/24 dev eth0");
    must("ip -n " + ns_guest + " route add default via 10.0.2.1");
    must("ip -n " + ns_node + " link add n-direct type veth peer name eth0 netns " + ns_direct);
    must("ip -n " + ns_node + " addr add 192.168.78.1/24 dev n-direct");
    must("ip -n " + ns_node + " link set n-direct up");
    must("ip -n " + ns_direct + " addr add 192.168.78.2/24 dev eth0");
    must("ip -n " + ns_direct + " link set eth0 up");
    chl::common::SpawnOptions srv;
    srv.argv = {*chl::common::find_program("ip"), "netns", "exec", ns_node, *chl::common::find_program("iperf3"), "-s"};
    auto server = chl::common::ChildProcess::spawn(srv);
    if (!server) throw std::runtime_error(server.error().message());
    auto gbps = [&](const std::string& ns, const std::string& to) {
      for (int attempt = 0; attempt < 50; ++attempt) {
        const std::string out = capture("ip netns exec " + ns + " iperf3 -c " + to + " -t " + std::to_string(seconds) +
                                        " -f g 2>&1");
        auto at = out.find("receiver");
        if (at != std::string::npos) {
          auto line_start = out.rfind('\n', at);
          std::istringstream in(out.substr(line_start + 1, at - line_start));
          std::string w, prev;
          while (in >> w) {
            if (w == "Gbits/sec") return std::atof(prev.c_str());
            prev = w;
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // server not listening yet
      }
      return -1.0;
    };
    const double masq = gbps(ns_guest, "192.168.77.1");
    const double plain = gbps(ns_direct, "192.168.78.1");
    (void)server->kill_and_reap();
    result("net_tcp_gbps", "guest->node TCP (iperf3), bridge+masquerade vs plain veth", masq, "veth", plain, "Gbit/s");

    in_netns(ns_pod, [&] {
      if (auto st = wired->teardown(); !st) throw std::runtime_error(st.error().message());
      wired.reset();
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "network_bench: %s\n", e.what());
    cleanup();
    return 1;
  }
  cleanup();
  return 0;
}

#include "tests/network/netns.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <sys/stat.h>
#include <exception>
#include <stdexcept>

#include "common/child_process.hpp"
#include "tests/support/test_support.hpp"
#include "vmi/parser.hpp"

namespace chl::test::net {

Netns::~Netns() {
  if (made_) run_command({"ip", "netns", "del", name_});
}

std::string Netns::create() {
  auto r = run_command({"ip", "netns", "add", name_});
  if (r.exit_code != 0) return "ip netns add " + name_ + ": " + r.output;
  made_ = true;
  return {};
}

void in_netns(const std::string& ns, const std::function<void()>& fn) {
  std::string err;
  std::exception_ptr thrown;  // a failed REQUIRE inside fn is rethrown on the caller's thread
  std::thread t([&] {
    const std::string path = "/var/run/netns/" + ns;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
      err = "joining " + path + ": " + std::strerror(errno);
      if (fd >= 0) ::close(fd);
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
  if (!err.empty()) throw std::runtime_error(err);
}

std::vector<long> processes_in(const std::string& ns) {
  struct stat want {};
  std::vector<long> pids;
  if (::stat(("/run/netns/" + ns).c_str(), &want) != 0) return pids;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    struct stat st {};
    if (::stat((e.path() / "ns" / "net").c_str(), &st) != 0) continue;
    if (st.st_ino == want.st_ino && st.st_dev == want.st_dev) pids.push_back(std::stol(name));
  }
  return pids;
}

std::string ip(const std::string& ns, const std::vector<std::string>& args) {
  std::vector<std::string> argv{"ip", "-n", ns};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_command(argv);
  if (r.exit_code == 0) return {};
  std::string cmd;
  for (const auto& a : argv) cmd += a + " ";
  return cmd + "-> " + r.output;
}

common::UniqueFd tcp_listen(const std::string& ns, int port, bool ipv6) {
  common::UniqueFd fd;
  in_netns(ns, [&] {
    fd.reset(::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (ipv6) {
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
      auto* sa = reinterpret_cast<sockaddr_in6*>(&ss);
      sa->sin6_family = AF_INET6;
      sa->sin6_port = htons(static_cast<std::uint16_t>(port));
      len = sizeof *sa;
    } else {
      auto* sa = reinterpret_cast<sockaddr_in*>(&ss);
      sa->sin_family = AF_INET;
      sa->sin_port = htons(static_cast<std::uint16_t>(port));
      len = sizeof *sa;
    }
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd.get(), 8) != 0) fd.reset();
  });
  return fd;
}

std::string accept_one(int listener, std::chrono::milliseconds timeout, const std::string& greeting) {
  pollfd p{listener, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return {};
  sockaddr_storage peer{};
  socklen_t len = sizeof peer;
  common::UniqueFd c(::accept4(listener, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC));
  if (!c) return {};
  if (!greeting.empty()) (void)!::write(c.get(), greeting.data(), greeting.size());
  char buf[INET6_ADDRSTRLEN];
  if (peer.ss_family == AF_INET6)
    return inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr, buf, sizeof buf) ? buf : "";
  return inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&peer)->sin_addr, buf, sizeof buf) ? buf : "";
}

int tcp_connect(const std::string& ns, const std::string& ip, int port, std::chrono::milliseconds timeout,
                std::string* read_back) {
  const bool ipv6 = ip.find(':') != std::string::npos;
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (ipv6) {
    auto* sa = reinterpret_cast<sockaddr_in6*>(&ss);
    sa->sin6_family = AF_INET6;
    sa->sin6_port = htons(static_cast<std::uint16_t>(port));
    if (inet_pton(AF_INET6, ip.c_str(), &sa->sin6_addr) != 1) return EINVAL;
    len = sizeof *sa;
  } else {
    auto* sa = reinterpret_cast<sockaddr_in*>(&ss);
    sa->sin_family = AF_INET;
    sa->sin_port = htons(static_cast<std::uint16_t>(port));
    if (inet_pton(AF_INET, ip.c_str(), &sa->sin_addr) != 1) return EINVAL;
    len = sizeof *sa;
  }
  common::UniqueFd fd;
  in_netns(ns, [&] { fd.reset(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)); });
  if (!fd) return errno;
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 && errno != EINPROGRESS) return errno;
  pollfd p{fd.get(), POLLOUT, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return ETIMEDOUT;
  int err = 0;
  socklen_t elen = sizeof err;
  ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &elen);
  if (err != 0) return err;
  if (read_back) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[256];
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd r{fd.get(), POLLIN, 0};
      if (::poll(&r, 1, 100) != 1) continue;
      ssize_t n = ::read(fd.get(), buf, sizeof buf);
      if (n <= 0) break;
      read_back->append(buf, static_cast<std::size_t>(n));
      if (read_back->find('\n') != std::string::npos) break;
    }
  }
  return 0;
}

// busybox udhcpc in the guest namespace; the lease it got as name=value lines, applied to eth0.
std::map<std::string, std::string> run_udhcpc(const std::string& guest_ns, const chl::test::TempDir& dir,
                                              std::string& log) {
  const auto script = dir / "udhcpc.sh";
  const auto lease = dir / "lease.txt";
  chl::test::write_file(script, "#!/bin/sh\n[ \"$1\" = bound ] || [ \"$1\" = renew ] || exit 0\n"
                                "for v in ip subnet router dns domain search mtu lease serverid hostname staticroutes; do\n"
                                "  eval echo \"$v=\\$$v\"\ndone > " + lease.string() + "\n"
                                "/usr/sbin/ip addr add $ip/$subnet dev $interface\n"
                                "set -- $router\n/usr/sbin/ip route add default via $1 dev $interface\n");
  ::chmod(script.c_str(), 0755);
  auto r = chl::test::run_command({"ip", "netns", "exec", guest_ns, "/bin/busybox", "udhcpc", "-i", "eth0", "-f",
                                   "-q", "-n", "-t", "6", "-T", "1", "-s", script.string(), "-O", "mtu", "-O",
                                   "staticroutes", "-O", "search"});
  log = "udhcpc exit " + std::to_string(r.exit_code) + ": " + r.output;
  std::map<std::string, std::string> out;
  std::istringstream in(chl::test::read_file(lease));
  std::string line;
  while (std::getline(in, line))
    if (auto eq = line.find('='); eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  return out;
}

std::optional<std::string> run_dhclient6(const std::string& guest_ns, const chl::test::TempDir& dir,
                                         std::chrono::seconds timeout, std::string& log) {
  auto dhclient = chl::test::tool("dhclient");
  if (!dhclient && ::access("/sbin/dhclient", X_OK) == 0) dhclient = "/sbin/dhclient";
  if (!dhclient) return std::nullopt;
  // dhclient binds to eth0's link-local address: wait for its duplicate address detection.
  (void)chl::test::wait_until(timeout, [&] {
    const auto a = chl::test::run_command({"ip", "-n", guest_ns, "-6", "addr", "show", "dev", "eth0", "scope", "link"}).output;
    return a.find("fe80") != std::string::npos && a.find("tentative") == std::string::npos;
  }, std::chrono::milliseconds(100));
  const auto script = dir / "dhclient6.sh";
  const auto lease = dir / "lease6.txt";
  chl::test::write_file(script, "#!/bin/sh\ncase \"$reason\" in BOUND6|REBOOT6|RENEW6) ;; *) exit 0 ;; esac\n"
                                "echo \"ip6=$new_ip6_address/$new_ip6_prefixlen search=$new_dhcp6_domain_search\" >> " +
                                    lease.string() + "\n"
                                "/usr/sbin/ip -6 addr add $new_ip6_address/$new_ip6_prefixlen dev $interface nodad\n");
  ::chmod(script.c_str(), 0755);
  chl::common::SpawnOptions so;
  so.argv = {*chl::test::tool("ip"), "netns", "exec", guest_ns, *dhclient, "-6", "-d", "-v", "-sf",
             script.string(), "-lf", (dir / "dhclient6.leases").string(), "-pf", (dir / "dhclient6.pid").string(),
             "eth0"};
  chl::common::UniqueFd out(::open((dir / "dhclient.log").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  so.stdout_fd = so.stderr_fd = out.get();
  auto client = chl::common::ChildProcess::spawn(so);
  if (!client) {
    log = "dhclient: " + client.error().message();
    return std::string();
  }
  (void)chl::test::wait_until(timeout, [&] { return !chl::test::read_file(lease).empty(); }, std::chrono::milliseconds(100));
  (void)client->kill_and_reap();
  log = chl::test::read_file(dir / "dhclient.log");
  return chl::test::read_file(lease);
}

chl::vmi::Vmi vmi_with(const std::string& iface_yaml, const std::string& devices_extra) {
  auto out = chl::vmi::parse_vmi(R"(apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: vm1, uid: 5a5a-0001}
spec:
  domain:
    memory: {guest: 128Mi}
    devices:
)" + devices_extra + R"(      interfaces:
)" + iface_yaml + R"(
  networks:
  - name: default
    pod: {}
)");
  if (!out.problems.empty()) throw std::runtime_error("vmi_with: the test's VMI does not parse");
  return out.vmi;
}

}  // namespace chl::test::net

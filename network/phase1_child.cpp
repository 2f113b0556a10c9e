#include "network/phase1_child.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "common/child_process.hpp"
#include "common/log.hpp"
#include "common/syscall.hpp"
#include "network/host_namespace.hpp"
#include "network/module_loader.hpp"

namespace chl::network {

using common::Result;
using common::Status;
using nlohmann::json;

namespace {

// ---- the pod facts on the pipe (JSON) ----

json to_json(const PodFacts& f) {
  json links = json::array();
  for (const auto& [name, l] : f.links) {
    json v4 = json::array(), routes = json::array();
    for (const auto& a : l.ipv4) v4.push_back(format_ipv4_cidr(a));
    for (const auto& r : l.routes4)
      routes.push_back({{"dst", format_ipv4_cidr(r.destination)},
                        {"gw", r.gateway ? format_ipv4(*r.gateway) : ""}});
    links.push_back(
        {{"name", l.name}, {"mtu", l.mtu}, {"ipv4", v4}, {"ipv6", l.ipv6}, {"routes4", routes}});
  }
  json dns = json::array();
  for (const auto& d : f.dns_servers) dns.push_back(format_ipv4(d));
  return {{"links", links}, {"dns", dns}, {"search", f.search_domains}, {"sriov", f.sriov_vf_pci}};
}

Result<PodFacts> from_json(const json& j) {
  const auto bad = [](const std::string& what) {
    return common::fail(std::errc::bad_message, "the wiring process's answer: " + what);
  };
  try {
    PodFacts f;
    for (const auto& l : j.at("links")) {
      PodLink link;
      link.name = l.at("name").get<std::string>();
      link.mtu = l.at("mtu").get<std::uint32_t>();
      for (const auto& a : l.at("ipv4")) {
        auto c = parse_ipv4_cidr(a.get<std::string>());
        if (!c) return bad("bad address " + a.dump());
        link.ipv4.push_back(*c);
      }
      link.ipv6 = l.at("ipv6").get<std::vector<std::string>>();
      for (const auto& r : l.at("routes4")) {
        auto dst = parse_ipv4_cidr(r.at("dst").get<std::string>());
        if (!dst) return bad("bad route " + r.dump());
        Route4 route{*dst, std::nullopt};
        if (const auto gw = r.at("gw").get<std::string>(); !gw.empty()) {
          route.gateway = parse_ipv4(gw);
          if (!route.gateway) return bad("bad gateway " + r.dump());
        }
        link.routes4.push_back(route);
      }
      f.links.emplace(link.name, std::move(link));
    }
    for (const auto& d : j.at("dns")) {
      auto ip = parse_ipv4(d.get<std::string>());
      if (!ip) return bad("bad DNS server " + d.dump());
      f.dns_servers.push_back(*ip);
    }
    f.search_domains = j.at("search").get<std::vector<std::string>>();
    f.sriov_vf_pci = j.at("sriov").get<std::map<std::string, std::string>>();
    return f;
  } catch (const json::exception& e) {
    return bad(e.what());
  }
}

// ---- the child ----

std::string host_namespace_refusal() {
  return "this is the host's own network namespace, not a pod's: wiring the VMI's interfaces here "
         "would put a bridge, NAT rules and a DHCP server on the host for the VM's life. Run it in "
         "a pod or a "
         "network namespace of its own (ip netns exec), give the VMI no interfaces "
         "(spec.domain.devices.autoattachPodInterface: false and no interfaces), or pass "
         "--allow-host-network";
}

// Phase 1 itself: {"facts": …} or {"error": "…"}.
json phase1(const vmi::Vmi& vmi, const Phase1Options& o) {
  auto module = load_network_module();
  if (!module) return {{"error", module.error().message()}};
  if (!o.allow_host_network && in_host_network_namespace())
    return {{"error", host_namespace_refusal()}};
  auto facts = module->api->discover_pod(o.resolv_conf);
  if (!facts) return {{"error", facts.error().message()}};
  facts->sriov_vf_pci = o.sriov_vf_pci;
  auto nets = plan_networks(vmi, *facts, vmi::cpu_topology(vmi).vcpus());
  if (nets.refusals.empty()) {
    auto wired = module->api->wire_pod_network(nets.plans, nullptr);
    if (!wired) return {{"error", wired.error().message()}};
    (*wired)->abandon();  // the devices stay for the launcher; closes the child's tap fds
  }
  return {{"facts", to_json(*facts)}};
}

[[noreturn]] void child_main(int out, const vmi::Vmi& vmi, const Phase1Options& o) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  std::string answer;
  int code = 0;
  try {
    const json a = phase1(vmi, o);
    code = a.contains("error") ? 1 : 0;
    answer = a.dump();
  } catch (const std::exception& e) {
    code = 1;
    answer = json{{"error", std::string("wiring: ") + e.what()}}.dump();
  }
  for (std::size_t off = 0; off < answer.size();) {
    const ssize_t n =
        common::retry_eintr([&] { return ::write(out, answer.data() + off, answer.size() - off); });
    if (n <= 0) break;
    off += static_cast<std::size_t>(n);
  }
  common::log::logger()->flush();
  ::_exit(code);
}

// The child's pid: killed and reaped unless waited for.
struct Child {
  pid_t pid = -1;
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    (void)common::retry_eintr([this] { return ::waitpid(pid, nullptr, 0); });
  }
  Result<common::ExitStatus> wait() {
    int st = 0;
    if (common::retry_eintr([&] { return ::waitpid(pid, &st, 0); }) < 0)
      return common::fail_errno("waiting for the wiring process (pid " + std::to_string(pid) + ")");
    pid = -1;
    return common::ExitStatus::from_wait_status(st);
  }
};

class OwnedPodNetwork final : public WiredNetwork {
 public:
  OwnedPodNetwork(std::unique_ptr<WiredNetwork> attached, PodTeardown teardown)
      : attached_(std::move(attached)), teardown_(std::move(teardown)) {}
  ~OwnedPodNetwork() override { (void)teardown(); }
  std::vector<WiredInterface>& interfaces() override { return attached_->interfaces(); }
  [[nodiscard]] const std::vector<NetworkPlan>& plans() const override {
    return attached_->plans();
  }
  [[nodiscard]] std::uint64_t dhcp_answers() const override { return attached_->dhcp_answers(); }
  [[nodiscard]] std::uint64_t dhcp6_answers() const override { return attached_->dhcp6_answers(); }
  [[nodiscard]] std::uint64_t router_adverts() const override {
    return attached_->router_adverts();
  }
  Status teardown() override {
    if (done_) return {};
    done_ = true;
    (void)attached_->teardown();  // phase 2's own fds and sockets: cannot fail
    return teardown_.run(attached_->plans());
  }
  void abandon() override {
    done_ = true;
    attached_->abandon();
  }

 private:
  std::unique_ptr<WiredNetwork> attached_;
  PodTeardown teardown_;
  bool done_ = false;
};

}  // namespace

Result<PodFacts> wire_in_child(const vmi::Vmi& vmi, const Phase1Options& options) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) < 0) return common::fail_errno("starting the wiring process: pipe");
  common::UniqueFd in(fds[0]), out(fds[1]);
  common::log::logger()->flush();  // nothing buffered is written twice
  Child child;
  child.pid = ::fork();
  if (child.pid < 0) return common::fail_errno("starting the wiring process: fork");
  if (child.pid == 0) {
    in.reset();
    child_main(out.get(), vmi, options);
  }
  out.reset();
  std::string answer;
  char buf[4096];
  for (;;) {
    const ssize_t n = common::retry_eintr([&] { return ::read(in.get(), buf, sizeof buf); });
    if (n < 0) return common::fail_errno("reading the wiring process's answer");
    if (n == 0) break;
    answer.append(buf, static_cast<std::size_t>(n));
  }
  const pid_t pid = child.pid;
  CHL_TRY(auto status, child.wait());
  const json a = json::parse(answer, nullptr, false);
  if (a.is_discarded() || !a.is_object())
    return common::fail(std::errc::bad_message,
                        "the wiring process (pid " + std::to_string(pid) +
                            ") ended without an answer: " + status.describe());
  if (a.contains("error")) return common::fail(std::errc::io_error, a["error"].get<std::string>());
  if (!status.success() || !a.contains("facts"))
    return common::fail(std::errc::bad_message, "the wiring process (pid " + std::to_string(pid) +
                                                    ") ended without facts: " + status.describe());
  return from_json(a["facts"]);
}

std::unique_ptr<WiredNetwork> own_pod_network(std::unique_ptr<WiredNetwork> attached,
                                              PodTeardown teardown) {
  return std::make_unique<OwnedPodNetwork>(std::move(attached), std::move(teardown));
}

}  // namespace chl::network

// webhook_bench: chl-webhook under a request storm, on loopback only (bounded: N reviews per
// mode and 120 s in all). The binary is started as the Deployment starts it, with a certificate
// from scripts/webhook-cert.sh; the client verifies it (tests/webhook/tls_client.hpp). Figures:
// admission latency p50/p99 (request written → AdmissionReview read) over N reviews on one
// keep-alive connection, and over N new connections (TCP connect + TLS handshake + review each);
// RSS idle after start and after the storm.
//   webhook_bench CHL_WEBHOOK [--n N]
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.hpp"
#include "tests/webhook/tls_client.hpp"

using Clock = std::chrono::steady_clock;
using chl::test::webhook::TlsClient;

namespace {

long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

unsigned short free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return 0;
  ::close(fd);
  return ntohs(a.sin_port);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: webhook_bench CHL_WEBHOOK [--n N]\n");
    return 2;
  }
  const std::string binary = argv[1];
  int n = 1000;
  for (int i = 2; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--n") n = std::max(1, std::atoi(argv[i + 1]));
  char tmpl[] = "/tmp/chl-hook-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return 1;
  const std::string dir = tmpl;
  const std::string script = std::string(CHL_SOURCE_DIR) + "/scripts/webhook-cert.sh";
  if (std::system(("bash '" + script + "' '" + dir + "' >/dev/null").c_str()) != 0) {
    std::fprintf(stderr, "webhook_bench: %s failed (openssl installed?)\n", script.c_str());
    return 1;
  }
  // The review: a golden launcher pod (the guest-agent-ping one: the most to patch), labelled.
  nlohmann::json pod;
  const std::string golden =
      std::string(CHL_SOURCE_DIR) +
      "/../shared/reference/kubevirt-launcher-pods/vmi-probe-guestagentping.json";
  if (std::ifstream(golden)) {
    pod = nlohmann::json::parse(read_all(golden));
  } else {
    pod = {
        {"metadata",
         {{"name", "p"}, {"namespace", "default"}, {"labels", {{"kubevirt.io", "virt-launcher"}}}}},
        {"spec",
         {{"containers",
           {{{"name", "compute"},
             {"image", "i"},
             {"command", {"/usr/bin/virt-launcher-monitor"}}}}}}}};
  }
  pod["metadata"]["labels"]["ch-launcher/hypervisor"] = "cloud-hypervisor";
  const std::string review = nlohmann::json{
      {"apiVersion", "admission.k8s.io/v1"},
      {"kind", "AdmissionReview"},
      {"request",
       {{"uid", "bench"},
        {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
        {"operation", "CREATE"},
        {"namespace", "default"},
        {"object", pod}}}}.dump();

  const unsigned short port = free_port();
  chl::common::SpawnOptions o;
  o.argv = {binary,
            "--listen=127.0.0.1:" + std::to_string(port),
            "--cert=" + dir + "/tls.crt",
            "--key=" + dir + "/tls.key",
            "--bundle-image=registry.example/ch-launcher:bench",
            "--log-level=warning"};
  auto child = chl::common::ChildProcess::spawn(o);
  if (!child) {
    std::fprintf(stderr, "webhook_bench: %s\n", child.error().message().c_str());
    return 1;
  }
  const std::string ca = dir + "/ca.crt";
  const std::string host = "chl-webhook.chl-webhook.svc";
  TlsClient probe(ca, host);
  const auto start = Clock::now();
  while (!probe.connect(port)) {
    if (Clock::now() - start > std::chrono::seconds(20)) {
      std::fprintf(stderr, "webhook_bench: the webhook does not answer: %s\n",
                   probe.error().c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  probe.disconnect();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const long idle_rss = rss_kib(child->pid());

  const auto deadline = Clock::now() + std::chrono::seconds(120);
  auto ok = [](const std::optional<chl::test::webhook::HttpReply>& r) {
    return r && r->status == 200 &&
           r->body.find("\"patchType\":\"JSONPatch\"") != std::string::npos;
  };
  std::vector<double> keep, fresh;
  TlsClient c(ca, host);
  if (!c.connect(port)) return 1;
  for (int i = 0; i < n && Clock::now() < deadline; ++i) {
    const auto t0 = Clock::now();
    const auto r = c.request("POST", "/mutate?timeout=5s", review);
    const auto t1 = Clock::now();
    if (!ok(r)) {
      std::fprintf(stderr, "webhook_bench: review %d over keep-alive failed\n", i);
      return 1;
    }
    keep.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  c.disconnect();
  for (int i = 0; i < n && Clock::now() < deadline; ++i) {
    const auto t0 = Clock::now();
    TlsClient each(ca, host);
    if (!each.connect(port)) {
      std::fprintf(stderr, "webhook_bench: connection %d: %s\n", i, each.error().c_str());
      return 1;
    }
    const auto r = each.request("POST", "/mutate?timeout=5s", review, false);
    const auto t1 = Clock::now();
    if (!ok(r)) {
      std::fprintf(stderr, "webhook_bench: review %d on a new connection failed\n", i);
      return 1;
    }
    fresh.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  const long storm_rss = rss_kib(child->pid());
  (void)child->signal(SIGTERM);
  (void)child->wait_for(std::chrono::seconds(10));
  (void)std::system(("rm -rf '" + dir + "'").c_str());

  std::printf("webhook: %zu reviews keep-alive, %zu on new connections; review body %zu bytes\n",
              keep.size(), fresh.size(), review.size());
  std::printf(
      "RESULT\twebhook_keepalive_p50\twebhook admission latency p50 (%zu reviews, one keep-alive "
      "TLS connection)\t%.0f\t\t\tus\tabs_le\t2000\n",
      keep.size(), percentile(keep, 0.50));
  std::printf(
      "RESULT\twebhook_keepalive_p99\twebhook admission latency p99 (%zu reviews, one keep-alive "
      "TLS connection)\t%.0f\t\t\tus\tabs_le\t10000\n",
      keep.size(), percentile(keep, 0.99));
  std::printf(
      "RESULT\twebhook_newconn_p50\twebhook admission latency p50 (%zu reviews, a new TLS "
      "connection each)\t%.0f\t\t\tus\tabs_le\t10000\n",
      fresh.size(), percentile(fresh, 0.50));
  std::printf(
      "RESULT\twebhook_newconn_p99\twebhook admission latency p99 (%zu reviews, a new TLS "
      "connection each)\t%.0f\t\t\tus\tabs_le\t50000\n",
      fresh.size(), percentile(fresh, 0.99));
  std::printf(
      "RESULT\twebhook_idle_rss\twebhook RSS, idle after start\t%.1f\t\t\tMiB\tabs_le\t16\n",
      static_cast<double>(idle_rss) / 1024.0);
  std::printf("RESULT\twebhook_storm_rss\twebhook RSS after the storm\t%.1f\t\t\tMiB\tinfo\t\n",
              static_cast<double>(storm_rss) / 1024.0);
  return 0;
}

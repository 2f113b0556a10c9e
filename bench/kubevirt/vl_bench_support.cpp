#include "bench/kubevirt/vl_bench_support.hpp"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "kubevirt/cmd_server.hpp"

extern char** environ;

namespace chl::bench {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string vl_vmi_json(const std::string& name, const std::string& uid) {
  return R"({"kind":"VirtualMachineInstance","apiVersion":"kubevirt.io/v1",
    "metadata":{"name":")" +
         name + R"(","namespace":"default","uid":")" + uid + R"("},
    "spec":{"domain":{"resources":{},"cpu":{"cores":1,"sockets":1,"maxSockets":4,"threads":1,"model":"host-model"},
      "memory":{"guest":"64Mi"},"machine":{"type":"q35"},
      "firmware":{"uuid":"0b8a3c6e-8f0e-4f4e-9d5e-1c2b3a4d5e6f","kernelBoot":{"kernelArgs":"console=ttyS0",
        "container":{"image":"registry.example/pvh:1","kernelPath":"/boot/guest.elf"}}},
      "features":{"acpi":{"enabled":true}},"devices":{"autoattachPodInterface":false}},
      "terminationGracePeriodSeconds":10,"architecture":"amd64"},
    "status":{"phase":"Scheduled","runtimeUser":107}})";
}

common::ChildProcess spawn_logged(const std::vector<std::string>& argv, const fs::path& out) {
  common::SpawnOptions so;
  so.argv = argv;
  for (char** e = environ; *e; ++e) so.env.emplace_back(*e);
  const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::fprintf(stderr, "open %s failed\n", out.c_str());
    std::exit(1);
  }
  so.stdout_fd = fd;
  so.stderr_fd = fd;
  so.new_session = false;
  auto c = common::ChildProcess::spawn(so);
  ::close(fd);
  if (!c) {
    std::fprintf(stderr, "spawn: %s\n", c.error().message().c_str());
    std::exit(1);
  }
  return std::move(*c);
}

VlPod start_vl_pod(const fs::path& dir, const std::string& launcher, const std::string& vmm,
                   const fs::path& container_disks, const std::string& name) {
  VlPod p;
  p.dir = dir;
  fs::create_directories(dir / "share");
  p.notify = std::make_unique<test::TestNotifyServer>(dir / "share" / "domain-notify-pipe.sock");
  p.child = spawn_logged(
      {launcher, "virt-launcher", "--name", name, "--namespace", "default", "--kubevirt-share-dir",
       (dir / "share").string(), "--private-dir", (dir / "private").string(),
       "--ephemeral-disk-dir", (dir / "eph").string(), "--container-disk-dir",
       container_disks.string(), "--vmm-binary", vmm, "--hypervisor", "cloud-hypervisor"},
      dir / "out");
  const auto sock = kubevirt::ready_socket_path(dir / "share");
  const auto give_up = std::chrono::steady_clock::now() + 60s;
  while (!fs::exists(sock)) {
    if (std::chrono::steady_clock::now() > give_up) {
      std::fprintf(stderr, "%s never appeared (launcher log: %s)\n", sock.c_str(),
                   (dir / "out").c_str());
      std::exit(1);
    }
    std::this_thread::sleep_for(200us);
  }
  auto channel = grpc::CreateChannel("unix:" + sock.string(), grpc::InsecureChannelCredentials());
  channel->WaitForConnected(std::chrono::system_clock::now() + 5s);  // set-up is not the Sync
  p.cmd = ::kubevirt::cmd::v1::Cmd::NewStub(channel);
  return p;
}

bool has_domain_status(const test::TestNotifyServer& n, const std::string& status,
                       const std::string& reason) {
  for (const auto& e : n.received())
    if (!e.k8s && e.json["Status"].value("Status", "") == status &&
        (reason.empty() || e.json["Status"].value("Reason", "") == reason))
      return true;
  return false;
}

bool wait_domain_status(const test::TestNotifyServer& n, const std::string& status,
                        std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto seen = n.received().size();
    if (has_domain_status(n, status)) return true;
    if (std::chrono::steady_clock::now() > end) return false;
    (void)n.wait_for(seen + 1, 100ms);  // wakes on the next notification
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

namespace {
long status_field(const fs::path& file, const std::string& key) {
  std::ifstream f(file);
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(key.size()));
  return -1;
}
long sum_over_tasks(pid_t pid, const std::string& key) {
  long sum = 0;
  std::error_code ec;
  for (const auto& t : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    const long v = status_field(t.path() / "status", key);
    if (v > 0) sum += v;
  }
  return ec ? -1 : sum;
}
}  // namespace

long rss_kib(pid_t pid) {
  return status_field("/proc/" + std::to_string(pid) + "/status", "VmRSS:");
}
long pss_kib(pid_t pid) {
  return status_field("/proc/" + std::to_string(pid) + "/smaps_rollup", "Pss:");
}
long ctxt_switches(pid_t pid) {
  const long v = sum_over_tasks(pid, "voluntary_ctxt_switches:");
  const long nv = sum_over_tasks(pid, "nonvoluntary_ctxt_switches:");
  return v < 0 || nv < 0 ? -1 : v + nv;
}
long voluntary_ctxt_switches(pid_t pid) { return sum_over_tasks(pid, "voluntary_ctxt_switches:"); }

long cpu_ticks(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto close = s.rfind(')');  // comm may hold spaces
  if (close == std::string::npos) return -1;
  std::istringstream in(s.substr(close + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {  // fields 14 and 15 (proc(5))
    if (i == 14) utime = std::stol(field);
    if (i == 15) stime = std::stol(field);
  }
  return utime + stime;
}

long run_time_ns(pid_t pid) {
  long sum = 0;
  std::error_code ec;
  for (const auto& t : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream f(t.path() / "schedstat");
    long ns = 0;
    if (f >> ns) sum += ns;
  }
  return ec ? -1 : sum;
}

std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& t : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream f(t.path() / "children");
    pid_t c;
    while (f >> c) out.push_back(c);
  }
  return out;
}

}  // namespace chl::bench

#pragma once
// Two pods with their own libvirt for live migration on the QEMU/libvirt path: the fixture of
// tests/kubevirt/test_virt_launcher_migration_qemu.cpp and bench/kubevirt/bench_migration_qemu.cpp
// (see the test's opening comment). Header-only, for tests and benches.
#include <sys/wait.h>

#include <regex>

#include "tests/kubevirt/migration_proxy.hpp"
#include "tests/kubevirt/migration_reads.hpp"
#include "tests/kubevirt/virt_launcher_harness.hpp"

namespace {

using namespace chl::test::migration;

constexpr const char* kMigrationUid = "9a8b7c6d-bbbb-4ccc-8ddd-0123456789ab";

// The VMI as virt-handler sends it: LiveMigratable (virt-controller's condition), and once a
// migration is under way, status.migrationState.
inline std::string migratable_vmi(const std::string& base = vmi_json()) {
  auto j = nlohmann::json::parse(base);
  j["status"]["conditions"] = nlohmann::json::array({{{"type", "LiveMigratable"},
                                                      {"status", "True"},
                                                      {"lastProbeTime", nullptr},
                                                      {"lastTransitionTime", nullptr}}});
  return j.dump();
}
inline std::string migrating_vmi(const std::string& base = vmi_json()) {
  auto j = nlohmann::json::parse(migratable_vmi(base));
  j["status"]["migrationState"] = {{"migrationUid", kMigrationUid},
                                   {"sourceNode", "node01"},
                                   {"targetNode", "node02"},
                                   {"targetPod", "virt-launcher-testvm-target"}};
  return j.dump();
}

inline bool target_ended(const chl::test::TestNotifyServer& n) {
  for (const auto& d : domains(n))
    if (!migration_of(d)["EndTimestamp"].is_null()) return true;
  return false;
}

// The pid in a pid file, if that process lives.
inline std::optional<pid_t> live_pid(const fs::path& f) {
  std::ifstream in(f);
  long pid = 0;
  if (!(in >> pid) || pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) != 0) return std::nullopt;
  return static_cast<pid_t>(pid);
}

struct TwoPods {
  TempDir shared{"chl-mig-pod"};  // the path every pod sees its own directory at
  Pod src;
  Pod dst;
  chl::test::TestNotifyServer src_notify{src.share() / "domain-notify-pipe.sock"};
  chl::test::TestNotifyServer dst_notify{dst.share() / "domain-notify-pipe.sock"};
  std::unique_ptr<v1::Cmd::Stub> src_cmd;
  std::unique_ptr<v1::Cmd::Stub> dst_cmd;
  std::unique_ptr<chl::test::MigrationProxy> libvirt_proxy;  // port 0: the target's libvirt
  std::unique_ptr<chl::test::MigrationProxy> proxy;          // 49152: QEMU's stream
  std::string base = vmi_json();  // the VMI (migratable_vmi / migrating_vmi add the status)
  // Each pod in a network namespace of its own (start_in_netns); none: the host's.
  std::unique_ptr<PodNetns> src_ns, dst_ns;

  fs::path proxy_dir(const Pod& p) const { return p.share() / "migrationproxy"; }

  void start() {
    ::setenv("POD_NAME", "virt-launcher-testvm-target", 1);
    for (Pod* p : {&src, &dst}) p->mount_as = shared.path() / "pod";
    fs::create_directories(shared.path() / "pod");
    src_cmd = src.serve();
    dst_cmd = dst.serve();
    v1::VMIRequest req;
    req.mutable_vmi()->set_vmijson(migratable_vmi(base));
    v1::Response r;
    REQUIRE(call([&](auto& c) { return src_cmd->SyncVirtualMachine(&c, req, &r); }, 300s).ok());
    REQUIRE_MESSAGE(r.success(), r.message() << "\n" << src.output());
  }
  // start() with `vmi`, each pod in its own network namespace wired by virt-handler's phase 1
  // (masquerade: tap0 and k6t-eth0 in each, as the CH suite's start_in_netns), each launcher
  // (and so its libvirtd and QEMU) in its pod's namespace. "" when started, else why to skip.
  std::string start_in_netns(const std::string& vmi) {
    base = vmi;
    src_ns = std::make_unique<PodNetns>("ms");
    dst_ns = std::make_unique<PodNetns>("md");
    const auto ip_tool = chl::test::tool("ip");
    if (!ip_tool) return "no ip(8) for the pods' network namespaces";
    for (auto [pn, pod] : {std::pair{src_ns.get(), &src}, std::pair{dst_ns.get(), &dst}}) {
      if (auto why = pn->up(); !why.empty()) return why;
      chl::test::net::Phase1 p1{pn->ns.name()};
      if (auto e = chl::test::net::kubevirt_phase1_masquerade(p1); !e.empty())
        return "virt-handler's phase 1: " + e;
      pod->prefix = {*ip_tool, "netns", "exec", pn->ns.name()};
    }
    start();
    return {};
  }
  // SyncMigrationTarget, then virt-handler's proxies (handleTargetMigrationProxy, then the
  // source's StartSourceListener).
  void prepare_target() {
    v1::VMIRequest req;
    req.mutable_vmi()->set_vmijson(migrating_vmi(base));
    v1::Response r;
    REQUIRE(call([&](auto& c) { return dst_cmd->SyncMigrationTarget(&c, req, &r); }, 20s).ok());
    REQUIRE_MESSAGE(r.success(), r.message() << "\n" << dst.output());
    const auto target_libvirt = dst.dir.path() / "libvirt-run" / "virtqemud-sock";
    REQUIRE_MESSAGE(chl::common::unix_socket_answers(target_libvirt), dst.output());
    auto a = chl::test::MigrationProxy::start(proxy_dir(src) / (std::string(kUid) + "-source.sock"),
                                              target_libvirt);
    REQUIRE_MESSAGE(a, (a ? "" : a.error().message()));
    libvirt_proxy = std::move(*a);
    auto b = chl::test::MigrationProxy::start(
        proxy_dir(src) / (std::string(kUid) + "-49152-source.sock"),
        proxy_dir(dst) / (std::string(kUid) + "-49152-source.sock"));
    REQUIRE_MESSAGE(b, (b ? "" : b.error().message()));
    proxy = std::move(*b);
  }
  // MigrationOptions as virt-handler marshals them (KubeVirt's defaults), CompletionTimeoutPerGiB
  // and ProgressTimeout aside.
  v1::Response migrate(int completion_timeout_per_gib = 150, int progress_timeout = 150) {
    v1::MigrationRequest req;
    req.mutable_vmi()->set_vmijson(migrating_vmi(base));
    req.set_options(R"({"Bandwidth":"0Mi","ProgressTimeout":)" + std::to_string(progress_timeout) +
                    R"(,"CompletionTimeoutPerGiB":)" + std::to_string(completion_timeout_per_gib) +
                    R"(,"UnsafeMigration":false,"AllowAutoConverge":false,"AllowPostCopy":false})");
    v1::Response r;
    REQUIRE(call([&](auto& c) { return src_cmd->MigrateVirtualMachine(&c, req, &r); }, 20s).ok());
    return r;
  }
  std::string outputs() const {
    return "--- source\n" + src.output() + "\n--- target\n" + dst.output();
  }
  // What the pods ran that a failed case may leave: QEMU, libvirtd and virtlogd (in a real
  // cluster they die with the pod).
  ~TwoPods() {
    for (Pod* p : {&src, &dst}) {
      if (p->child.running()) (void)p->child.kill_and_reap();
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(p->dir.path() / "libvirt-run" / "qemu", ec))
        if (e.path().extension() == ".pid")
          if (auto pid = live_pid(e.path())) ::kill(*pid, SIGKILL);
      for (const char* f : {"libvirtd.pid", "virtlogd.pid"})
        if (auto pid = live_pid(p->dir.path() / "chl-run" / "libvirt" / f)) ::kill(*pid, SIGTERM);
    }
  }
};

// Whether two pods with their own libvirt can run here; false (having said why) otherwise.
inline bool pods_runnable() {
  if (!guest_runnable()) return false;
  if (::geteuid() != 0) {
    chl::test::skip("needs root (each pod's own mount namespace and libvirtd)");
    return false;
  }
  if (!chl::test::tool("unshare")) {
    chl::test::skip("no unshare(1) for the pods' mount namespaces");
    return false;
  }
  return true;
}

}  // namespace

// Live migration in virt-launcher mode on Cloud Hypervisor: two launchers on one machine, each in
// its own pod-like directories (virt_launcher_harness.hpp), a stand-in of virt-handler's migration
// proxy between the pods' migrationproxy sockets (migration_proxy.hpp: unix -> TCP on 127.0.0.1
// -> unix, no TLS), and the gRPC calls in the order virt-handler makes them: Sync on the source,
// SyncMigrationTarget on the target, MigrateVirtualMachine on the source, then Finalize (twice)
// on the target. The VMM double, or a real cloud-hypervisor (CLOUD_HYPERVISOR_BIN). The case with
// a NIC puts each pod in its own network namespace after virt-handler's phase 1, both launchers
// uid 107 without capabilities (the proxy stand-in stays in the host's namespace and reaches the
// pods' sockets by path, as virt-handler's does); the others, with no NIC, share the host's.
#include <cstdlib>
#include <regex>
#include <thread>

#include "tests/guest_agent/scripted_agent.hpp"
#include "tests/kubevirt/migration_proxy.hpp"
#include "tests/kubevirt/migration_reads.hpp"
#include "tests/kubevirt/virt_launcher_harness.hpp"
#include "tests/support/real_vmm_limits.hpp"
#include "vmm_api/client.hpp"

namespace {

using namespace chl::test::migration;

constexpr const char* kMigrationUid = "5f1e2d3c-aaaa-4bbb-8ccc-0123456789ab";

// The VMI as virt-handler sends it once a migration is under way (status.migrationState).
std::string migrating_vmi(const std::string& base = vmi_json()) {
  auto j = nlohmann::json::parse(base);
  j["status"]["migrationState"] = {{"migrationUid", kMigrationUid},
                                   {"sourceNode", "node01"},
                                   {"targetNode", "node02"},
                                   {"targetPod", "virt-launcher-testvm-target"}};
  return j.dump();
}

fs::path proxy_socket(const Pod& pod) {
  return pod.share() / "migrationproxy" / (std::string(kUid) + "-49152-source.sock");
}

std::string abort_status(const nlohmann::json& domain_doc) {
  const auto m = migration_of(domain_doc);
  return m.is_object() ? m.value("AbortStatus", "") : "";
}

// GuestPing as virt-probe sends it (cmd-client GuestPing): true when it answered success.
bool guest_ping(v1::Cmd::Stub& cmd) {
  v1::GuestPingRequest req;
  req.set_domainname("default_testvm");
  req.set_timeoutseconds(1);
  v1::GuestPingResponse out;
  return call([&](auto& c) { return cmd.GuestPing(&c, req, &out); }, 10s).ok() &&
         out.response().success();
}

// The files under `dir` named `name` (the pod's generated media live in its state directory).
std::vector<fs::path> files_named(const fs::path& dir, const std::string& name) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec))
    if (it->path().filename() == name) out.push_back(it->path());
  return out;
}

// A running source launcher, a target launcher, and the proxy between their pods.
struct TwoPods {
  Pod src;
  Pod dst;
  chl::test::TestNotifyServer src_notify{src.share() / "domain-notify-pipe.sock"};
  chl::test::TestNotifyServer dst_notify{dst.share() / "domain-notify-pipe.sock"};
  std::unique_ptr<v1::Cmd::Stub> src_cmd;
  std::unique_ptr<v1::Cmd::Stub> dst_cmd;
  std::unique_ptr<chl::test::MigrationProxy> proxy;

  // More lines for the source VMM's wrapper (the double only), e.g. its vsock's agent.
  std::string src_vmm_env;
  // Each pod in a network namespace of its own, as Kubernetes gives them (empty: the host's).
  std::unique_ptr<PodNetns> src_ns, dst_ns;

  // Both pods in their own network namespaces, wired by virt-handler's phase 1 (masquerade, a
  // tap tap0 owned by 107 with a kernel-chosen MAC in each), both launchers uid 107 without
  // capabilities (PodNetns::start_non_root). "" when started, else why the test must skip.
  std::string start_in_netns(const std::string& vmi) {
    src_ns = std::make_unique<PodNetns>("s");
    dst_ns = std::make_unique<PodNetns>("d");
    for (auto* pn : {src_ns.get(), dst_ns.get()}) {
      if (auto why = pn->up(); !why.empty()) return why;
      chl::test::net::Phase1 p1{pn->ns.name()};
      if (auto e = chl::test::net::kubevirt_phase1_masquerade(p1); !e.empty())
        return "virt-handler's phase 1: " + e;
    }
    wrap_vmm();
    if (auto why = src_ns->start_non_root(src, src_cmd); !why.empty()) return why;
    if (auto why = dst_ns->start_non_root(dst, dst_cmd); !why.empty()) return why;
    sync_source(vmi);
    return {};
  }

  // Start both, run the VMI on the source.
  void start(const std::string& vmi = vmi_json()) {
    wrap_vmm();
    src_cmd = src.serve();
    dst_cmd = dst.serve();
    sync_source(vmi);
  }
  void wrap_vmm() {
    // The pods' name as the downward API gives it (SignalTargetPodCleanup compares it).
    ::setenv("POD_NAME", "virt-launcher-testvm-target", 1);
    if (!chl::test::using_real_vmm()) {
      // The double's guest ticks every 50 ms (the PVH test guest every 5 s); the launcher gives
      // its VMM a clean environment, so the setting travels in a wrapper.
      for (Pod* pod : {&src, &dst}) {
        const auto w = pod->dir.path() / "vmm-wrapper.sh";
        chl::test::write_file(w, "#!/bin/sh\nexport VMM_DOUBLE_HEARTBEAT_MS=50\n" +
                                     (pod == &src ? src_vmm_env : std::string()) + "exec '" +
                                     chl::test::vmm_binary() + "' \"$@\"\n");
        fs::permissions(w, fs::perms::owner_all);
        pod->vmm_binary = w.string();
      }
    }
  }
  void sync_source(const std::string& vmi) {
    v1::VMIRequest req;
    req.mutable_vmi()->set_vmijson(vmi);
    v1::Response r;
    REQUIRE(call([&](auto& c) { return src_cmd->SyncVirtualMachine(&c, req, &r); }).ok());
    REQUIRE_MESSAGE(r.success(), r.message() << "\n" << src.output());
  }
  // SyncMigrationTarget on the target, then the proxy (virt-handler starts it after the target
  // is ready: handleTargetMigrationProxy).
  void prepare_target(const std::string& vmi = migrating_vmi()) {
    v1::VMIRequest req;
    req.mutable_vmi()->set_vmijson(vmi);
    v1::Response r;
    REQUIRE(call([&](auto& c) { return dst_cmd->SyncMigrationTarget(&c, req, &r); }).ok());
    REQUIRE_MESSAGE(r.success(), r.message() << "\n" << dst.output());
    REQUIRE(fs::exists(proxy_socket(dst)));
    auto p = chl::test::MigrationProxy::start(proxy_socket(src), proxy_socket(dst));
    REQUIRE_MESSAGE(p, (p ? "" : p.error().message()));
    proxy = std::move(*p);
    // virt-handler's StartSourceListener chowns its sockets to 107 (migration-source.go).
    (void)::chown(proxy_socket(src).parent_path().c_str(), 107, 107);
    (void)::chown(proxy_socket(src).c_str(), 107, 107);
  }
  // MigrationOptions as virt-handler marshals them (cmd-client/client.go:81; Bandwidth is a
  // resource.Quantity, a string).
  static std::string options(const std::string& bandwidth = "0", int progress_timeout = 150) {
    return R"({"Bandwidth":")" + bandwidth + R"(","ProgressTimeout":)" +
           std::to_string(progress_timeout) +
           R"(,"CompletionTimeoutPerGiB":150,"UnsafeMigration":false,"AllowAutoConverge":false,)"
           R"("AllowPostCopy":false})";
  }
  v1::Response migrate(const std::string& vmi = migrating_vmi(),
                       const std::string& opts = options()) {
    v1::MigrationRequest req;
    req.mutable_vmi()->set_vmijson(vmi);
    req.set_options(opts);
    v1::Response r;
    REQUIRE(call([&](auto& c) { return src_cmd->MigrateVirtualMachine(&c, req, &r); }, 20s).ok());
    return r;
  }
};

// virt-handler's Cancel of a migration the proxy holds, the stream released: AbortStatus
// Succeeded on the source.
void cancel_held_migration(TwoPods& p) {
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(migrating_vmi());
  v1::Response cr;
  REQUIRE(
      call([&](auto& c) { return p.src_cmd->CancelVirtualMachineMigration(&c, vmi, &cr); }).ok());
  p.proxy->release();
  REQUIRE(
      chl::test::wait_until(30s, [&] { return abort_status(domain(*p.src_cmd)) == "Succeeded"; }));
}

// On a real CH that cannot save vCPU state on this machine (tests/support/real_vmm_limits.hpp:
// proven by the VMM alone, no launcher), a migration MigrateVirtualMachine started fails at its
// end, when CH takes the vCPUs' state: the source's migration metadata ends Failed with CH's
// chain (GetNestedState) and an EndTimestamp, and the VM runs on in the source in `state`. Checks
// that, says which part of the test cannot run and why, and returns true; false on the double
// or where CH can migrate (the test goes on).
bool migration_refused_here(TwoPods& p, const std::string& part, const std::string& state = "Running") {
  const auto& why = chl::test::real_vmm_cannot_save_vcpu_state();
  if (!why) return false;
  REQUIRE_MESSAGE(chl::test::wait_until(120s,
                                        [&] {
                                          const auto m = migration_of(domain(*p.src_cmd));
                                          return m.is_object() && m["Failed"] == true;
                                        }),
                  p.src.output());
  const auto d = domain(*p.src_cmd);
  const auto m = migration_of(d);
  CHECK_MESSAGE(m["FailureReason"].get<std::string>().find("GetNestedState") != std::string::npos,
                m.dump());
  CHECK_FALSE(m["EndTimestamp"].is_null());
  CHECK(d["Status"]["Status"] == state);
  CHECK_FALSE(has_state(p.src_notify, "MODIFIED Shutoff/Migrated"));
  chl::test::skip_part(part + ": " + *why);
  return true;
}

}  // namespace

TEST_CASE(
    "virt-launcher migration (CH): the target receives and runs the VM, the guest continues, the "
    "source ends Shutoff/Migrated, Finalize twice") {
  if (kQemu || !guest_runnable()) return;
  TwoPods p;
  p.start();
  const auto src_console = p.src.priv() / kUid / "virt-serial0";
  REQUIRE(chl::test::wait_until(10s, [&] { return fs::exists(src_console); }));
  const auto beat = chl::test::using_real_vmm() ? 15s : 5s;
  const std::string before = chl::test::read_socket_until(src_console, "heartbeat 2", beat);
  REQUIRE_MESSAGE(before.find("heartbeat 2") != std::string::npos, before);

  p.prepare_target();
  // The target's domain appears at once: ADDED, Paused/Migration, with the migration's UID.
  REQUIRE(chl::test::wait_until(10s, [&] { return !domains(p.dst_notify).empty(); }));
  {
    const auto first = p.dst_notify.received().front();
    CHECK(first.event_type == "ADDED");
    CHECK(first.json["Status"]["Status"] == "Paused");
    CHECK(first.json["Status"]["Reason"] == "Migration");
    CHECK(migration_of(first.json)["UID"] == kMigrationUid);
    CHECK(migration_of(first.json)["EndTimestamp"].is_null());
  }
  // A re-sent SyncMigrationTarget changes nothing.
  {
    v1::VMIRequest req;
    req.mutable_vmi()->set_vmijson(migrating_vmi());
    v1::Response r;
    REQUIRE(call([&](auto& c) { return p.dst_cmd->SyncMigrationTarget(&c, req, &r); }).ok());
    CHECK_MESSAGE(r.success(), r.message());
  }

  // Answers at once, migrates in the background: an order, not a figure — the answer comes while
  // the migration stream is held (past its first MiB), so before the migration can end.
  p.proxy->stall_after(1 << 20);
  const auto r = p.migrate();
  CHECK_MESSAGE(r.success(), r.message() << "\n" << p.src.output());
  // (On a machine where the VMM cannot migrate at all, the migration may have failed already.)
  if (!chl::test::real_vmm_cannot_save_vcpu_state())
    CHECK(migration_of(domain(*p.src_cmd))["EndTimestamp"].is_null());
  p.proxy->release();
  if (migration_refused_here(p, "the migration's completion, the guest going on in the target")) return;

  // The target: Running with EndTimestamp, and EndTimestamp never before Running.
  REQUIRE_MESSAGE(chl::test::wait_until(60s,
                                        [&] {
                                          for (const auto& d : domains(p.dst_notify))
                                            if (!migration_of(d)["EndTimestamp"].is_null())
                                              return true;
                                          return false;
                                        }),
                  p.dst.output() << "\n"
                                 << p.src.output());
  for (const auto& d : domains(p.dst_notify)) {
    if (migration_of(d)["EndTimestamp"].is_null()) continue;
    CHECK(d["Status"]["Status"] == "Running");
    CHECK(migration_of(d)["Completed"] == true);
    CHECK(migration_of(d)["Failed"] == false);
  }
  // The source: StartTimestamp/Mode as soon as it began, then Shutoff/Migrated with EndTimestamp.
  REQUIRE_MESSAGE(chl::test::wait_until(
                      30s, [&] { return has_state(p.src_notify, "MODIFIED Shutoff/Migrated"); }),
                  p.src.output());
  check_source_succeeded(p.src_notify, kMigrationUid);
  CHECK(p.proxy->forwarded() >= 64ull << 20);  // the guest's memory went through the proxy

  // The guest continues on the target: its console there, its heartbeat counting on.
  const auto dst_console = p.dst.priv() / kUid / "virt-serial0";
  REQUIRE(chl::test::wait_until(10s, [&] { return fs::exists(dst_console); }));
  const std::string after = read_heartbeat(dst_console, beat);
  std::smatch m;
  REQUIRE_MESSAGE(std::regex_search(after, m, std::regex("heartbeat (\\d+)")), after);
  const unsigned first_on_target = static_cast<unsigned>(std::stoul(m[1]));
  CHECK_MESSAGE(first_on_target > 2, after);  // not started over at 1
  CHECK(first_on_target > last_heartbeat(before));

  // FinalizeVirtualMachineMigration: after the ack, and again in the final cleanup.
  for (int i = 0; i < 2; ++i) {
    v1::VMIRequest req;
    req.mutable_vmi()->set_vmijson(migrating_vmi());
    v1::Response fr;
    REQUIRE(call([&](auto& c) {
              return p.dst_cmd->FinalizeVirtualMachineMigration(&c, req, &fr);
            }).ok());
    CHECK_MESSAGE(fr.success(), fr.message());
  }
  // The target owns the VM now: a later Sync adopts it (no second VM).
  {
    v1::VMIRequest req;
    req.mutable_vmi()->set_vmijson(migrating_vmi());
    v1::Response sr;
    REQUIRE(call([&](auto& c) { return p.dst_cmd->SyncVirtualMachine(&c, req, &sr); }).ok());
    CHECK_MESSAGE(sr.success(), sr.message());
    CHECK(domain(*p.dst_cmd)["Status"]["Status"] == "Running");
  }
  // The source's VMM left after the migration; its Shutoff domain stays until virt-handler's
  // DeleteVirtualMachine (vm.go, after Shutoff/Migrated), then the launcher ends with exit 0.
  {
    v1::VMIRequest req;
    req.mutable_vmi()->set_vmijson(migrating_vmi());
    v1::Response dr;
    REQUIRE(call([&](auto& c) { return p.src_cmd->DeleteVirtualMachine(&c, req, &dr); }).ok());
    CHECK_MESSAGE(dr.success(), dr.message());
  }
  auto st = p.src.child.wait_for(30s);
  REQUIRE(st);
  REQUIRE(*st);
  CHECK_MESSAGE(((*st)->exited && (*st)->code == 0), p.src.output());
}

TEST_CASE(
    "virt-launcher migration (CH): a writable local disk is refused before anything moves, with "
    "the reason in the domain and a Warning") {
  if (kQemu || !guest_runnable()) return;
  auto j = nlohmann::json::parse(vmi_json());
  j["spec"]["volumes"] =
      nlohmann::json::array({{{"name", "scratch"}, {"emptyDisk", {{"capacity", "16Mi"}}}}});
  j["spec"]["domain"]["devices"]["disks"] =
      nlohmann::json::array({{{"name", "scratch"}, {"disk", {{"bus", "virtio"}}}}});
  TwoPods p;
  p.start(j.dump());
  p.prepare_target(migrating_vmi(j.dump()));
  const auto r = p.migrate(migrating_vmi(j.dump()));
  CHECK_FALSE(r.success());
  CHECK_MESSAGE(r.message().find("volume scratch") != std::string::npos, r.message());
  const auto d = domain(*p.src_cmd);
  CHECK(d["Status"]["Status"] == "Running");
  const auto m = migration_of(d);
  CHECK(m["Failed"] == true);
  CHECK(m["FailureReason"].get<std::string>().find("volume scratch") != std::string::npos);
  CHECK_FALSE(m["EndTimestamp"].is_null());
  // The Warning reaches virt-handler's notify server shortly after (the notify client queues).
  CHECK(chl::test::wait_until(10s, [&] {
    for (const auto& n : p.src_notify.received())
      if (n.k8s && n.json.dump().find("volume scratch") != std::string::npos) return true;
    return false;
  }));
  CHECK(p.proxy->forwarded() == 0);  // nothing moved
}

TEST_CASE(
    "virt-launcher migration (CH): the target pod killed mid-stream - the source fails the "
    "migration with a reason and runs on") {
  if (kQemu || !guest_runnable()) return;
  TwoPods p;
  p.start();
  p.prepare_target();
  p.proxy->stall_after(1 << 20);
  const auto r = p.migrate();
  REQUIRE_MESSAGE(r.success(), r.message());
  REQUIRE(chl::test::wait_until(20s, [&] { return p.proxy->forwarded() >= (1u << 20); }));
  // GetDomain and GetDomainStats answer while the VMM's API is held by the migration.
  CHECK(migration_of(domain(*p.src_cmd))["EndTimestamp"].is_null());
  {
    v1::EmptyRequest empty;
    v1::DomainStatsResponse stats;
    REQUIRE(call([&](auto& c) { return p.src_cmd->GetDomainStats(&c, empty, &stats); }).ok());
    CHECK(stats.response().success());
    // Answered while the migration is still held (an order: it could not have waited for it).
    CHECK(migration_of(domain(*p.src_cmd))["EndTimestamp"].is_null());
  }
  // GuestPing answers success on both sides while the migration runs (manager.go GuestPing:
  // isLiveMigrationInProgress), whether or not a guest agent is there to answer.
  CHECK(guest_ping(*p.src_cmd));
  CHECK(guest_ping(*p.dst_cmd));
  (void)p.dst.child.kill_and_reap();  // the target pod dies (its VMM with it)
  p.proxy->release();
  REQUIRE_MESSAGE(chl::test::wait_until(30s,
                                        [&] {
                                          const auto m = migration_of(domain(*p.src_cmd));
                                          return m.is_object() && m["Failed"] == true;
                                        }),
                  p.src.output());
  const auto d = domain(*p.src_cmd);
  CHECK(d["Status"]["Status"] == "Running");
  const auto m = migration_of(d);
  CHECK_FALSE(m["FailureReason"].get<std::string>().empty());
  CHECK_FALSE(m["EndTimestamp"].is_null());
  // The VM still answers: pause and resume work.
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(vmi_json());
  v1::Response pr;
  REQUIRE(call([&](auto& c) { return p.src_cmd->PauseVirtualMachine(&c, vmi, &pr); }).ok());
  CHECK_MESSAGE(pr.success(), pr.message());
}

TEST_CASE(
    "virt-launcher migration (CH): a paused VM arrives paused - Paused/User with EndTimestamp, "
    "then unpaused on the target") {
  if (kQemu || !guest_runnable()) return;
  TwoPods p;
  p.start();
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(vmi_json());
  v1::Response r;
  REQUIRE(call([&](auto& c) { return p.src_cmd->PauseVirtualMachine(&c, vmi, &r); }).ok());
  REQUIRE_MESSAGE(r.success(), r.message());
  p.prepare_target();
  r = p.migrate();
  REQUIRE_MESSAGE(r.success(), r.message());
  if (migration_refused_here(p, "the paused VM arriving paused in the target", "Paused")) return;
  REQUIRE_MESSAGE(chl::test::wait_until(60s,
                                        [&] {
                                          for (const auto& d : domains(p.dst_notify))
                                            if (!migration_of(d)["EndTimestamp"].is_null())
                                              return true;
                                          return false;
                                        }),
                  p.dst.output());
  for (const auto& d : domains(p.dst_notify)) {
    if (migration_of(d)["EndTimestamp"].is_null()) continue;
    CHECK(d["Status"]["Status"] == "Paused");
    CHECK(d["Status"]["Reason"] == "User");
  }
  REQUIRE(chl::test::wait_until(
      30s, [&] { return has_state(p.src_notify, "MODIFIED Shutoff/Migrated"); }));
  REQUIRE(call([&](auto& c) { return p.dst_cmd->UnpauseVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  CHECK(chl::test::wait_until(10s,
                              [&] { return domain(*p.dst_cmd)["Status"]["Status"] == "Running"; }));
}

TEST_CASE(
    "virt-launcher migration (CH): abort - refused with no migration, Aborting then Succeeded "
    "during one (the stream cut), the VM runs on") {
  if (kQemu || !guest_runnable()) return;
  TwoPods p;
  p.start();
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(migrating_vmi());
  v1::Response r;
  // Before any migration: nothing to abort.
  REQUIRE(
      call([&](auto& c) { return p.src_cmd->CancelVirtualMachineMigration(&c, vmi, &r); }).ok());
  CHECK_FALSE(r.success());
  CHECK(migration_of(domain(*p.src_cmd)).is_null());

  p.prepare_target();
  p.proxy->stall_after(1 << 20);  // the stream waits after 1 MiB: the migration is under way
  r = p.migrate();
  REQUIRE_MESSAGE(r.success(), r.message());
  REQUIRE(chl::test::wait_until(20s, [&] { return p.proxy->forwarded() >= (1u << 20); }));
  REQUIRE(
      call([&](auto& c) { return p.src_cmd->CancelVirtualMachineMigration(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  // Aborting at once (or already Succeeded: the cut is quick). The notify client sends the
  // newest state only, so virt-handler may never see Aborting go by; GetDomain shows it.
  const std::string right_after = abort_status(domain(*p.src_cmd));
  CHECK_MESSAGE((right_after == "Aborting" || right_after == "Succeeded"), right_after);
  REQUIRE_MESSAGE(
      chl::test::wait_until(30s, [&] { return abort_status(domain(*p.src_cmd)) == "Succeeded"; }),
      p.src.output());
  check_source_aborted(*p.src_cmd);
  // The target's receive failed: nothing runs there; virt-handler's SignalTargetPodCleanup ends
  // the target pod's launcher (it is the migration's targetPod).
  p.proxy->release();
  cleanup_target(*p.dst_cmd, p.dst.child, vmi);
}

TEST_CASE(
    "virt-launcher migration (CH): GuestPing fails without a guest agent before the migration, "
    "answers success during it on both sides") {
  if (kQemu || !guest_runnable()) return;
  TwoPods p;
  p.start();
  // The test VMI has no guest agent: outside a migration virt-probe's ping fails.
  const bool before = guest_ping(*p.src_cmd);
  p.prepare_target();
  p.proxy->stall_after(1 << 20);
  const auto r = p.migrate();
  REQUIRE_MESSAGE(r.success(), r.message());
  REQUIRE(chl::test::wait_until(20s, [&] { return p.proxy->forwarded() >= (1u << 20); }));
  CHECK_MESSAGE(guest_ping(*p.src_cmd), p.src.output());
  CHECK_MESSAGE(guest_ping(*p.dst_cmd), p.dst.output());
  // Not held behind the VMM's API: both answered while the migration is still held.
  CHECK(migration_of(domain(*p.src_cmd))["EndTimestamp"].is_null());
  if (before) MESSAGE("a guest agent answered before the migration too");
  cancel_held_migration(p);
  // Over (aborted): a ping the agent cannot answer fails again.
  if (!before) CHECK_FALSE(guest_ping(*p.src_cmd));
}

TEST_CASE(
    "virt-launcher migration (CH): ProgressTimeout - a stream standing still aborts the "
    "migration as KubeVirt's launcher reports it, the VM runs on") {
  if (kQemu || !guest_runnable()) return;
  TwoPods p;
  p.start();
  p.prepare_target();
  p.proxy->stall_after(1 << 20);  // the proxy stops reading: no byte moves any more
  const auto r = p.migrate(migrating_vmi(), TwoPods::options("0", 2));
  REQUIRE_MESSAGE(r.success(), r.message());
  // live-migration-source.go: the monitor's cancelMigration (AbortStatus Aborting, then
  // Succeeded), setMigrationResult(failed) with "Live migration has been aborted".
  REQUIRE_MESSAGE(
      chl::test::wait_until(30s, [&] { return abort_status(domain(*p.src_cmd)) == "Succeeded"; }),
      p.src.output());
  check_source_aborted(*p.src_cmd);
  CHECK_MESSAGE(p.src.output().find("Aborting migration: stuck for") != std::string::npos,
                p.src.output());
  p.proxy->release();
}

TEST_CASE(
    "virt-launcher migration (CH): cloud-init media, declared writable as most VMIs do - they "
    "migrate, the target regenerates them byte-identical to the source's") {
  if (kQemu || !guest_runnable()) return;
  auto j = nlohmann::json::parse(vmi_json());
  j["spec"]["volumes"] = nlohmann::json::array(
      {{{"name", "cloudinitdisk"},
        {"cloudInitNoCloud",
         {{"userData", "#cloud-config\npassword: migrate-me\nchpasswd: {expire: false}\n"},
          {"networkData", "version: 2\nethernets: {eth0: {dhcp4: true}}\n"}}}}});
  j["spec"]["domain"]["devices"]["disks"] =
      nlohmann::json::array({{{"name", "cloudinitdisk"}, {"disk", {{"bus", "virtio"}}}}});
  TwoPods p;
  p.start(j.dump());
  const auto src_media = files_named(p.src.dir.path(), "cloudinitdisk.iso");
  REQUIRE_MESSAGE(src_media.size() == 1, p.src.output());
  const std::string before = chl::test::read_file(src_media[0]);
  // Built at different times on the two pods: the timestamps must not tell.
  std::this_thread::sleep_for(1100ms);
  p.prepare_target(migrating_vmi(j.dump()));
  const auto r = p.migrate(migrating_vmi(j.dump()));
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << p.src.output());
  if (migration_refused_here(p, "the media on the target after a completed migration")) return;
  REQUIRE_MESSAGE(chl::test::wait_until(
                      60s, [&] { return has_state(p.src_notify, "MODIFIED Shutoff/Migrated"); }),
                  p.src.output() << "\n"
                                 << p.dst.output());
  const auto dst_media = files_named(p.dst.dir.path(), "cloudinitdisk.iso");
  REQUIRE_MESSAGE(dst_media.size() == 1, p.dst.output());
  const std::string after = chl::test::read_file(dst_media[0]);
  CHECK(before.size() > 0);
  CHECK(after.size() == before.size());
  CHECK_MESSAGE(after == before, "the target's cloud-init media differ from the source's");
}

TEST_CASE(
    "virt-launcher migration (CH): a VM with a masquerade NIC, each pod in its own network "
    "namespace, both launchers uid 107 without capabilities - the target's VMM opens its own "
    "tap by name, the guest keeps its MAC") {
  if (kQemu || !guest_runnable()) return;
  auto j = nlohmann::json::parse(vmi_json());
  j["spec"]["domain"]["devices"]["interfaces"] = nlohmann::json::parse(
      R"([{"name": "default", "masquerade": {}, "macAddress": "02:00:00:aa:bb:cc"}])");
  j["spec"]["networks"] = nlohmann::json::parse(R"([{"name": "default", "pod": {}}])");
  TwoPods p;
  if (auto why = p.start_in_netns(j.dump()); !why.empty()) {
    chl::test::skip(why);
    return;
  }
  REQUIRE_MESSAGE(chl::test::wait_until(30s, [&] { return reported_running(p.src_notify); }),
                  states_text(p.src_notify) << "\n"
                                            << p.src.output());
  // The source's VMM has the tap by name (CH's open_tap; vm.add-net without fds).
  CHECK_MESSAGE(
      p.src.output().find("interface default attached (phase 2): tap tap0 mac 02:00:00:aa:bb:cc") !=
          std::string::npos,
      p.src.output());
  const auto mac_in = [](const PodNetns& pn) {
    const std::string out =
        chl::test::run_command({"ip", "-n", pn.ns.name(), "-o", "link", "show", "tap0"}).output;
    std::smatch m;
    return std::regex_search(out, m, std::regex("link/ether ([0-9a-f:]{17})")) ? m[1].str()
                                                                               : std::string();
  };
  const std::string src_tap = mac_in(*p.src_ns), dst_tap = mac_in(*p.dst_ns);
  REQUIRE_FALSE(src_tap.empty());
  REQUIRE_FALSE(dst_tap.empty());
  CHECK(src_tap != dst_tap);  // two taps, two kernel-chosen MACs (virt-handler sets none)

  p.prepare_target(migrating_vmi(j.dump()));
  const auto r = p.migrate(migrating_vmi(j.dump()));
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << p.src.output());
  if (migration_refused_here(p, "the VM with its NIC running in the target")) return;
  REQUIRE_MESSAGE(chl::test::wait_until(60s,
                                        [&] {
                                          for (const auto& d : domains(p.dst_notify))
                                            if (!migration_of(d)["EndTimestamp"].is_null())
                                              return true;
                                          return false;
                                        }),
                  p.dst.output() << "\n"
                                 << p.src.output());
  REQUIRE(chl::test::wait_until(
      30s, [&] { return has_state(p.src_notify, "MODIFIED Shutoff/Migrated"); }));
  const auto d = domain(*p.dst_cmd);
  CHECK(d["Status"]["Status"] == "Running");
  // The guest keeps its MAC on the target.
  const auto ifaces = d["Spec"]["Devices"]["Interfaces"];
  REQUIRE_MESSAGE((ifaces.is_array() && ifaces.size() == 1), d.dump());
  CHECK(ifaces[0]["MAC"]["MAC"] == "02:00:00:aa:bb:cc");
  // The target's VMM opened the target pod's tap0 by name and took that tap's own MAC as
  // host_mac (the relay left it to it), not the source tap's: nothing needed CAP_NET_ADMIN.
  chl::vmm_api::Client api((p.dst.ephemeral() / "ch-launcher" / "ch-api.sock").string());
  auto info = api.vm_info();
  REQUIRE_MESSAGE(info, (info ? "" : info.error().message()));
  REQUIRE(info->config.net);
  REQUIRE(info->config.net->size() == 1);
  const auto& net = info->config.net->front();
  CHECK(net.tap.value_or("") == "tap0");
  CHECK(net.mac.value_or("") == "02:00:00:aa:bb:cc");
  CHECK(net.host_mac.value_or("") == dst_tap);
  CHECK_MESSAGE(
      p.src.output().find("host_mac of 1 tap NIC(s) left to the target") != std::string::npos,
      p.src.output());
  // The target pod served phase 2 for the received VM (its DHCP on the target's bridge).
  CHECK_MESSAGE(
      p.dst.output().find("interface default attached (phase 2): tap tap0 mac 02:00:00:aa:bb:cc") !=
          std::string::npos,
      p.dst.output());
}

TEST_CASE(
    "virt-launcher migration (CH): FreezeVirtualMachine during a migration answers success:false "
    "with KubeVirt's reason and the guest is not frozen, once the migration ended it freezes") {
  if (kQemu || !guest_runnable()) return;
  if (const auto no_agent = chl::test::real_vmm_has_no_guest_agent()) {
    chl::test::skip(*no_agent);
    return;
  }
  TwoPods p;
  // The double's pretend guest bridges vsock port 1024 to a scripted agent: a host qemu-ga must
  // never freeze (test_virt_launcher_agent_ops.cpp).
  const auto qga = p.src.dir.path() / "qga.sock";
  chl::test::ScriptedAgent agent(qga);
  p.src_vmm_env = "export VMM_DOUBLE_VSOCK_LISTEN='1024=" + qga.string() + "'\n";
  p.start();
  v1::FreezeRequest f;
  f.mutable_vmi()->set_vmijson(vmi_json());
  f.set_unfreezetimeoutseconds(0);
  const auto freeze = [&] {
    v1::Response r;
    REQUIRE(call([&](auto& c) { return p.src_cmd->FreezeVirtualMachine(&c, f, &r); }, 70s).ok());
    return r;
  };
  REQUIRE_MESSAGE(chl::test::wait_until(20s, [&] { return guest_ping(*p.src_cmd); }),
                  p.src.output());  // the agent is connected
  p.prepare_target();
  p.proxy->stall_after(1 << 20);  // the migration is held mid-stream
  const auto r = p.migrate();
  REQUIRE_MESSAGE(r.success(), r.message());
  REQUIRE(chl::test::wait_until(20s, [&] { return p.proxy->forwarded() >= (1u << 20); }));
  // KubeVirt's FreezeVMI (pkg/virt-launcher/virtwrap/manager.go) refuses during a migration.
  const auto during = freeze();
  CHECK_FALSE(during.success());
  CHECK_MESSAGE(during.message().find("Failed to freeze VMI, VMI is currently during migration") !=
                    std::string::npos,
                during.message());
  CHECK(agent.calls_of("guest-fsfreeze-freeze").empty());
  CHECK(agent.freeze_state() != "frozen");
  // The migration ends (aborted here); the VM runs on the source, which freezes it now.
  cancel_held_migration(p);
  const auto after = freeze();
  CHECK_MESSAGE(after.success(), after.message() << "\n" << p.src.output());
  CHECK(agent.freeze_state() == "frozen");
  CHECK(agent.calls_of("guest-fsfreeze-freeze").size() == 1);
  v1::VMIRequest u;
  u.mutable_vmi()->set_vmijson(vmi_json());
  v1::Response ur;
  REQUIRE(call([&](auto& c) { return p.src_cmd->UnfreezeVirtualMachine(&c, u, &ur); }, 70s).ok());
  CHECK_MESSAGE(ur.success(), ur.message());
  CHECK(agent.freeze_state() != "frozen");
}

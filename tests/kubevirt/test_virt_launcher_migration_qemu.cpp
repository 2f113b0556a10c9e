// Live migration in virt-launcher mode on the QEMU/libvirt path (docs/kubevirt/migration.md, "Live
// migration"): a real migration, QEMU to QEMU between two libvirt daemons, as KubeVirt's
// virt-launcher does it. Two launchers on one machine, each in its own pod: its own mount
// namespace in which its pod directory is seen at one shared path (as every pod sees
// /var/run/kubevirt) and /run/libvirt, /var/lib/libvirt... are its own, so each launcher runs its
// own libvirtd (virt_launcher_harness.hpp, Pod::mount_as). Between the pods, stand-ins of
// virt-handler's migration proxies (migration_proxy.hpp) as migration-source.go /
// migration-target.go make them: <uid>-source.sock to the target's libvirt
// (/var/run/libvirt/virtqemud-sock) and <uid>-49152-source.sock to the target QEMU's socket.
// The gRPC calls in virt-handler's order. The PVH test guest, under KVM or TCG as the other qemu
// tests choose; its heartbeat must go on, counting on, on the target's console.
#include "tests/kubevirt/migration_qemu_pods.hpp"

TEST_CASE(
    "virt-launcher migration (qemu-kvm): libvirt moves the running VM to the target pod's "
    "libvirtd, "
    "the guest counts on there, the source ends Shutoff/Migrated, Finalize twice, Sync adopts") {
  if (!pods_runnable()) return;
  TwoPods p;
  p.start();
  const auto src_console = p.src.priv() / kUid / "virt-serial0";
  REQUIRE(chl::test::wait_until(30s, [&] { return fs::exists(src_console); }));
  const std::string before = chl::test::read_socket_until(src_console, "heartbeat 2", 60s);
  REQUIRE_MESSAGE(before.find("heartbeat 2") != std::string::npos, before << p.outputs());

  p.prepare_target();
  REQUIRE(chl::test::wait_until(10s, [&] { return !domains(p.dst_notify).empty(); }));
  {
    const auto first = p.dst_notify.received().front();
    CHECK(first.event_type == "ADDED");
    CHECK(first.json["Status"]["Status"] == "Paused");
    CHECK(first.json["Status"]["Reason"] == "Migration");
    CHECK(migration_of(first.json)["UID"] == kMigrationUid);
  }
  // Answers at once, migrates in the background: an order, not a figure — the answer comes while
  // QEMU's stream is held (past 256 KiB), so before the migration can end.
  p.proxy->stall_after(256 << 10);
  const auto r = p.migrate();
  CHECK_MESSAGE(r.success(), r.message() << p.outputs());
  CHECK(migration_of(domain(*p.src_cmd))["EndTimestamp"].is_null());
  p.proxy->release();

  REQUIRE_MESSAGE(chl::test::wait_until(120s, [&] { return target_ended(p.dst_notify); }),
                  p.outputs());
  for (const auto& d : domains(p.dst_notify)) {
    if (migration_of(d)["EndTimestamp"].is_null()) continue;
    CHECK(d["Status"]["Status"] == "Running");  // EndTimestamp only once it runs
    CHECK(migration_of(d)["Failed"] == false);
  }
  REQUIRE_MESSAGE(chl::test::wait_until(
                      30s, [&] { return has_state(p.src_notify, "MODIFIED Shutoff/Migrated"); }),
                  p.outputs());
  check_source_succeeded(p.src_notify, kMigrationUid);
  // The guest's memory went through QEMU's proxy (QEMU sends the untouched, zero, pages of the
  // 64 MiB as a flag each, not as data).
  CHECK(p.proxy->forwarded() >= 512u << 10);
  CHECK(p.libvirt_proxy->forwarded() > 0);  // and libvirt's own talk through the other

  // The guest continues on the target: its console there, its heartbeat counting on.
  const auto dst_console = p.dst.priv() / kUid / "virt-serial0";
  REQUIRE(chl::test::wait_until(10s, [&] { return fs::exists(dst_console); }));
  const std::string after = read_heartbeat(dst_console, 30s);
  std::smatch m;
  REQUIRE_MESSAGE(std::regex_search(after, m, std::regex("heartbeat (\\d+)")),
                  after << p.outputs());
  CHECK_MESSAGE(static_cast<unsigned>(std::stoul(m[1])) > last_heartbeat(before), before << "\n--\n"
                                                                                         << after);

  for (int i = 0; i < 2; ++i) {
    v1::VMIRequest req;
    req.mutable_vmi()->set_vmijson(migrating_vmi());
    v1::Response fr;
    REQUIRE(call([&](auto& c) {
              return p.dst_cmd->FinalizeVirtualMachineMigration(&c, req, &fr);
            }).ok());
    CHECK_MESSAGE(fr.success(), fr.message());
  }
  const auto qemu_pid = live_pid(p.dst.dir.path() / "libvirt-run" / "qemu" / "default_testvm.pid");
  REQUIRE(qemu_pid);
  {
    v1::VMIRequest req;
    req.mutable_vmi()->set_vmijson(migrating_vmi());
    v1::Response sr;
    REQUIRE(call([&](auto& c) { return p.dst_cmd->SyncVirtualMachine(&c, req, &sr); }).ok());
    CHECK_MESSAGE(sr.success(), sr.message());
    CHECK(domain(*p.dst_cmd)["Status"]["Status"] == "Running");
    // The same QEMU: adopted, not created again.
    CHECK(live_pid(p.dst.dir.path() / "libvirt-run" / "qemu" / "default_testvm.pid") == qemu_pid);
    int added = 0;
    for (const auto& n : p.dst_notify.received()) added += !n.k8s && n.event_type == "ADDED";
    CHECK(added == 1);
  }
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
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(migrating_vmi());
  kill_and_delete(*p.dst_cmd, vmi);
}

TEST_CASE(
    "virt-launcher migration (qemu-kvm): a paused VM arrives paused - Paused/User with "
    "EndTimestamp, "
    "then unpaused on the target") {
  if (!pods_runnable()) return;
  TwoPods p;
  p.start();
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(migratable_vmi());
  v1::Response r;
  REQUIRE(call([&](auto& c) { return p.src_cmd->PauseVirtualMachine(&c, vmi, &r); }).ok());
  REQUIRE_MESSAGE(r.success(), r.message());
  p.prepare_target();
  r = p.migrate();
  REQUIRE_MESSAGE(r.success(), r.message());
  REQUIRE_MESSAGE(chl::test::wait_until(120s, [&] { return target_ended(p.dst_notify); }),
                  p.outputs());
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
  // It runs: the heartbeat comes on the target's console.
  const std::string after =
      read_heartbeat(p.dst.priv() / kUid / "virt-serial0", 30s);
  CHECK_MESSAGE(after.find("heartbeat") != std::string::npos, after);
}

TEST_CASE(
    "virt-launcher migration (qemu-kvm): abort - refused with no migration, Aborting then "
    "Succeeded "
    "during one (virDomainAbortJob), the VM runs on, SignalTargetPodCleanup ends the target") {
  if (!pods_runnable()) return;
  TwoPods p;
  p.start();
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(migrating_vmi());
  v1::Response r;
  REQUIRE(
      call([&](auto& c) { return p.src_cmd->CancelVirtualMachineMigration(&c, vmi, &r); }).ok());
  CHECK_FALSE(r.success());
  CHECK(migration_of(domain(*p.src_cmd)).is_null());

  p.prepare_target();
  p.proxy->stall_after(256 << 10);  // QEMU's stream waits after 256 KiB: the migration is under way
  r = p.migrate();
  REQUIRE_MESSAGE(r.success(), r.message());
  REQUIRE_MESSAGE(chl::test::wait_until(60s, [&] { return p.proxy->forwarded() >= (256u << 10); }),
                  p.outputs());
  REQUIRE(
      call([&](auto& c) { return p.src_cmd->CancelVirtualMachineMigration(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message() << p.outputs());
  REQUIRE_MESSAGE(chl::test::wait_until(60s,
                                        [&] {
                                          const auto m = migration_of(domain(*p.src_cmd));
                                          return m.is_object() &&
                                                 m.value("AbortStatus", "") == "Succeeded";
                                        }),
                  p.outputs());
  check_source_aborted(*p.src_cmd);
  // The guest runs on here: its heartbeat goes on on the source's console.
  const std::string beat =
      read_heartbeat(p.src.priv() / kUid / "virt-serial0", 30s);
  CHECK_MESSAGE(beat.find("heartbeat") != std::string::npos, beat);
  p.proxy->release();
  cleanup_target(*p.dst_cmd, p.dst.child, vmi);
}

TEST_CASE(
    "virt-launcher migration (qemu-kvm): the target pod killed mid-migration - the source fails "
    "the "
    "migration with a reason and runs on") {
  if (!pods_runnable()) return;
  TwoPods p;
  p.start();
  p.prepare_target();
  p.proxy->stall_after(256 << 10);
  const auto r = p.migrate();
  REQUIRE_MESSAGE(r.success(), r.message());
  REQUIRE_MESSAGE(chl::test::wait_until(60s, [&] { return p.proxy->forwarded() >= (256u << 10); }),
                  p.outputs());
  CHECK(migration_of(domain(*p.src_cmd))["EndTimestamp"].is_null());
  // The target pod dies: its launcher, its QEMU and its libvirt daemons.
  (void)p.dst.child.kill_and_reap();
  if (auto pid = live_pid(p.dst.dir.path() / "libvirt-run" / "qemu" / "default_testvm.pid"))
    ::kill(*pid, SIGKILL);
  for (const char* f : {"libvirtd.pid", "virtlogd.pid"})
    if (auto pid = live_pid(p.dst.dir.path() / "chl-run" / "libvirt" / f)) ::kill(*pid, SIGKILL);
  p.proxy->release();
  // Bounded by libvirt, not by us: the source's libvirtd learns of the target's end from its
  // connections (end of file at once; otherwise its keepalive to the target, 5 s x 5 by default
  // in qemu.conf), then cancels QEMU's job; under TCG on a loaded CI machine that took over 60 s.
  REQUIRE_MESSAGE(chl::test::wait_until(150s,
                                        [&] {
                                          const auto m = migration_of(domain(*p.src_cmd));
                                          return m.is_object() && m["Failed"] == true;
                                        }),
                  p.outputs());
  const auto d = domain(*p.src_cmd);
  CHECK(d["Status"]["Status"] == "Running");
  const auto m = migration_of(d);
  CHECK_FALSE(m["FailureReason"].get<std::string>().empty());
  CHECK_FALSE(m["EndTimestamp"].is_null());
  const std::string beat =
      read_heartbeat(p.src.priv() / kUid / "virt-serial0", 30s);
  CHECK_MESSAGE(beat.find("heartbeat") != std::string::npos, beat);
}

TEST_CASE(
    "virt-launcher migration (qemu-kvm): a writable disk that is not shared storage is refused "
    "before "
    "anything moves, with the reason in the domain") {
  if (!pods_runnable()) return;
  TwoPods p;
  p.start();
  auto j = nlohmann::json::parse(migrating_vmi());
  j["spec"]["volumes"] =
      nlohmann::json::array({{{"name", "scratch"}, {"emptyDisk", {{"capacity", "16Mi"}}}}});
  j["spec"]["domain"]["devices"]["disks"] =
      nlohmann::json::array({{{"name", "scratch"}, {"disk", {{"bus", "virtio"}}}}});
  v1::MigrationRequest req;
  req.mutable_vmi()->set_vmijson(j.dump());
  req.set_options(R"({"Bandwidth":"0Mi","ProgressTimeout":150,"CompletionTimeoutPerGiB":150})");
  v1::Response r;
  REQUIRE(call([&](auto& c) { return p.src_cmd->MigrateVirtualMachine(&c, req, &r); }, 20s).ok());
  CHECK_FALSE(r.success());
  CHECK_MESSAGE(r.message().find("volume scratch") != std::string::npos, r.message());
  const auto d = domain(*p.src_cmd);
  CHECK(d["Status"]["Status"] == "Running");
  const auto m = migration_of(d);
  CHECK(m["Failed"] == true);
  CHECK(m["FailureReason"].get<std::string>().find("volume scratch") != std::string::npos);
}

namespace {
// A migration whose stream stalls after 256 KiB, with CompletionTimeoutPerGiB `per_gib` and
// ProgressTimeout `progress_timeout`: the launcher's monitor aborts it. Returns the source's
// migration metadata once Failed, having checked what both aborts share
// (inflightMigrationAborted: AbortStatus Succeeded, EndTimestamp, the VM Running); the stream is
// released and the guest's heartbeat read on the source afterwards.
nlohmann::json aborted_by_monitor(TwoPods& p, int per_gib, int progress_timeout = 150) {
  p.start();
  p.prepare_target();
  p.proxy->stall_after(256 << 10);  // the stream waits for ever: the migration cannot finish
  const auto r = p.migrate(per_gib, progress_timeout);
  REQUIRE_MESSAGE(r.success(), r.message());
  REQUIRE_MESSAGE(chl::test::wait_until(60s,
                                        [&] {
                                          const auto m = migration_of(domain(*p.src_cmd));
                                          return m.is_object() && m["Failed"] == true;
                                        }),
                  p.outputs());
  const auto d = domain(*p.src_cmd);
  CHECK(d["Status"]["Status"] == "Running");
  auto m = migration_of(d);
  CHECK(m["AbortStatus"] == "Succeeded");  // inflightMigrationAborted's abortStatus
  CHECK_FALSE(m["EndTimestamp"].is_null());
  p.proxy->release();
  const std::string beat =
      read_heartbeat(p.src.priv() / kUid / "virt-serial0", 30s);
  CHECK_MESSAGE(beat.find("heartbeat") != std::string::npos, beat);
  return m;
}
}  // namespace

TEST_CASE(
    "virt-launcher migration (qemu-kvm): CompletionTimeoutPerGiB - a migration not done within "
    "its time is aborted by the launcher's monitor, Failed with KubeVirt's reason, the VM runs "
    "on") {
  if (!pods_runnable()) return;
  TwoPods p;
  // 2 s per GiB, the 64 MiB guest counting as 1 GiB.
  const auto m = aborted_by_monitor(p, 2);
  CHECK(m["FailureReason"] ==
        "Live migration is not completed after 2 seconds and has been aborted");
}

TEST_CASE(
    "virt-launcher migration (qemu-kvm): ProgressTimeout - a migration whose remaining data stops "
    "shrinking is aborted by the launcher's monitor, Failed with KubeVirt's reason, the VM runs "
    "on") {
  if (!pods_runnable()) return;
  TwoPods p;
  // ProgressTimeout 2 s, CompletionTimeoutPerGiB far beyond the test: only the progress check
  // can end it (live-migration-source.go, isMigrationProgressing).
  const auto m = aborted_by_monitor(p, 1000, 2);
  const std::string reason = m["FailureReason"].get<std::string>();
  std::smatch sm;
  REQUIRE_MESSAGE(
      std::regex_search(reason, sm,
                        std::regex("Live migration stuck for (\\d+) seconds and has been aborted")),
      reason);
  CHECK(std::stoi(sm[1]) > 2);   // progressDelay > progressTimeout, in whole seconds
  CHECK(reason == sm[0].str());  // the monitor's message bare, as KubeVirt sets it
}

namespace {
// The inode of a network namespace: of a process (/proc/PID/ns/net) or a named one
// (/run/netns/NAME).
ino_t netns_inode(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? st.st_ino : 0;
}
// The tap a process has attached (tun's fdinfo: "iff:\t<name>"), "" when none.
std::string attached_tap(pid_t pid) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fdinfo", ec)) {
    const std::string info = chl::test::read_file(e.path());
    std::smatch m;
    if (std::regex_search(info, m, std::regex("iff:\\s*(\\S+)"))) return m[1];
  }
  return {};
}
}  // namespace

TEST_CASE(
    "virt-launcher migration (qemu-kvm): a masquerade NIC, each pod in its own network namespace "
    "after virt-handler's phase 1 - the target's QEMU runs on the target pod's tap0, the guest "
    "keeps its MAC, virt-handler reads the same interface from the target") {
  if (!pods_runnable()) return;
  auto j = nlohmann::json::parse(vmi_json());
  // No macAddress: the MAC the source's libvirt chose must be the one the target keeps.
  j["spec"]["domain"]["devices"]["interfaces"] =
      nlohmann::json::parse(R"([{"name": "default", "masquerade": {}}])");
  j["spec"]["networks"] = nlohmann::json::parse(R"([{"name": "default", "pod": {}}])");
  TwoPods p;
  if (auto why = p.start_in_netns(j.dump()); !why.empty()) {
    chl::test::skip(why);
    return;
  }
  const auto src_ifaces = domain(*p.src_cmd)["Spec"]["Devices"]["Interfaces"];
  REQUIRE_MESSAGE((src_ifaces.is_array() && src_ifaces.size() == 1), src_ifaces.dump());
  const std::string mac = src_ifaces[0]["MAC"]["MAC"].get<std::string>();
  REQUIRE_FALSE(mac.empty());
  const auto qemu_pidfile = [](const Pod& pod) {
    return pod.dir.path() / "libvirt-run" / "qemu" / "default_testvm.pid";
  };
  const auto src_qemu = live_pid(qemu_pidfile(p.src));
  REQUIRE(src_qemu);
  CHECK(attached_tap(*src_qemu) == "tap0");

  p.prepare_target();
  const auto r = p.migrate();
  REQUIRE_MESSAGE(r.success(), r.message() << p.outputs());
  REQUIRE_MESSAGE(chl::test::wait_until(120s, [&] { return target_ended(p.dst_notify); }),
                  p.outputs());
  REQUIRE_MESSAGE(chl::test::wait_until(
                      30s, [&] { return has_state(p.src_notify, "MODIFIED Shutoff/Migrated"); }),
                  p.outputs());

  // The target's QEMU: in the target pod's network namespace, on that pod's tap0 (phase 1's).
  const auto dst_qemu = live_pid(qemu_pidfile(p.dst));
  REQUIRE(dst_qemu);
  const ino_t dst_ns = netns_inode("/run/netns/" + p.dst_ns->ns.name());
  REQUIRE(dst_ns != 0);
  CHECK(netns_inode("/proc/" + std::to_string(*dst_qemu) + "/ns/net") == dst_ns);
  CHECK(dst_ns != netns_inode("/run/netns/" + p.src_ns->ns.name()));
  CHECK(attached_tap(*dst_qemu) == "tap0");
  // The target's live domain: the same guest MAC on the pod's tap, libvirt opening it by name.
  std::string text;
  auto handler_vmi = chl::test::HandlerVmi::from_vmi_json(j);
  handler_vmi.pod_ips = {{"default", {"10.244.0.5"}}};
  handler_vmi.guest_macs["default"] = mac;
  const auto read = get_domain(*p.dst_cmd, handler_vmi, &text);
  const auto doc = nlohmann::json::parse(text);
  CHECK(doc["Status"]["Status"] == "Running");
  const auto& ifaces = doc["Spec"]["Devices"]["Interfaces"];
  REQUIRE_MESSAGE((ifaces.is_array() && ifaces.size() == 1), text);
  CHECK(ifaces[0]["MAC"]["MAC"] == mac);
  CHECK(ifaces[0]["Type"] == "ethernet");
  CHECK(ifaces[0]["Target"] == nlohmann::json({{"Device", "tap0"}, {"Managed", "no"}}));
  CHECK(ifaces[0]["Alias"]["Name"] == "default");
  // As virt-handler derives the VMI's interfaces from it: the same MAC, the pod's address.
  REQUIRE(read.status.synced);
  const auto* def = read.status.interface("default");
  REQUIRE(def);
  CHECK(def->mac == mac);
  CHECK(def->ip == "10.244.0.5");
  // The guest runs on there (the PVH guest has no network driver: no traffic to check).
  const std::string after =
      read_heartbeat(p.dst.priv() / kUid / "virt-serial0", 30s);
  CHECK_MESSAGE(after.find("heartbeat") != std::string::npos, after);
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(migrating_vmi(j.dump()));
  v1::Response dr;
  (void)call([&](auto& c) { return p.src_cmd->DeleteVirtualMachine(&c, vmi, &dr); });
  kill_and_delete(*p.dst_cmd, vmi);
}

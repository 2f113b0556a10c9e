// ch-launcher in virt-launcher mode, driven as an unchanged virt-handler drives a launcher pod:
// the built binary started with virt-launcher's flags (unknown ones included), our gRPC client
// on <share>/sockets/launcher-sock and our notify server behind domain-notify-pipe.sock, the
// VMI as virt-handler sends it (defaulted, with status), KubeVirt's pod paths (the kernel-boot
// artifacts under <container-disk-dir>/kernel-boot/). Built twice: test_virt_launcher drives
// Cloud Hypervisor (the VMM double, or a real cloud-hypervisor with CLOUD_HYPERVISOR_BIN; lane
// vmm), test_virt_launcher_qemu the libvirt path with --hypervisor kvm (real libvirtd and QEMU,
// the PVH guest; lane qemu).
#include "tests/kubevirt/virt_launcher_harness.hpp"
#include "tests/support/virtiofsd.hpp"

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): Info, Sync, ADDED then Running, GetDomain/Stats, pause, console, shutdown, final NoState, exit 0") {
  if (!guest_runnable()) return;
  Pod pod;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  pod.start();
  const auto sock = chl::kubevirt::ready_socket_path(pod.share());
  REQUIRE_MESSAGE(chl::test::wait_until(10s, [&] { return fs::exists(sock); }), pod.output());
  CHECK_FALSE(fs::exists(chl::kubevirt::init_socket_path(pod.share())));  // renamed: ready
  CHECK(pod.output().find("--a-flag-from-a-newer-kubevirt accepted and ignored") != std::string::npos);

  auto channel = grpc::CreateChannel("unix:" + sock.string(), grpc::InsecureChannelCredentials());
  auto info = ::kubevirt::cmd::info::CmdInfo::NewStub(channel);
  auto cmd = v1::Cmd::NewStub(channel);

  ::kubevirt::cmd::info::CmdInfoRequest ireq;
  ::kubevirt::cmd::info::CmdInfoResponse versions;
  REQUIRE(call([&](auto& c) { return info->Info(&c, ireq, &versions); }).ok());
  REQUIRE(versions.supportedcmdversions_size() >= 1);
  CHECK(versions.supportedcmdversions(0) == 1);

  // Before any Sync: no domain.
  v1::EmptyRequest empty;
  v1::DomainResponse dom;
  REQUIRE(call([&](auto& c) { return cmd->GetDomain(&c, empty, &dom); }).ok());
  CHECK(dom.domain().empty());

  // A VMI the hypervisor cannot serve: refused, naming the field; the launcher keeps serving.
  v1::VMIRequest bad;
  bad.mutable_vmi()->set_vmijson(vmi_json(true));
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, bad, &r); }).ok());
  CHECK_FALSE(r.success());
  CHECK_MESSAGE(r.message().find("spec.domain.devices.gpus[0].claimName") != std::string::npos, r.message());

  // An interface virt-handler left for a binding plugin's managed tap: refused, naming it.
  {
    v1::VMIRequest managed;
    managed.mutable_vmi()->set_vmijson(vmi_json());
    (*managed.mutable_options()->mutable_interfacedomainattachment())["default"] = "managedTap";
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, managed, &r); }).ok());
    CHECK_FALSE(r.success());
    CHECK_MESSAGE(r.message().find("options.interfaceDomainAttachment[default]: 'managedTap' is not supported") != std::string::npos,
                  r.message());
  }

  // The VMI for another pod: refused.
  v1::VMIRequest other;
  auto oj = nlohmann::json::parse(vmi_json());
  oj["metadata"]["uid"] = "someone-else";
  other.mutable_vmi()->set_vmijson(oj.dump());
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, other, &r); }).ok());
  CHECK_FALSE(r.success());

  // A container disk the pod does not have (no <container-disk-dir>/disk_0.img): the launch
  // fails before anything runs, Sync says why, and the launcher waits for the next Sync.
  {
    v1::VMIRequest nodisk;
    auto nj = nlohmann::json::parse(vmi_json());
    nj["spec"]["volumes"] = nlohmann::json::array({{{"name", "root"}, {"containerDisk", {{"image", "example/root:1"}}}}});
    nj["spec"]["domain"]["devices"]["disks"] = nlohmann::json::array({{{"name", "root"}, {"disk", {{"bus", "virtio"}}}}});
    nodisk.mutable_vmi()->set_vmijson(nj.dump());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, nodisk, &r); }).ok());
    CHECK_FALSE(r.success());
    CHECK_MESSAGE(r.message().find("disk_0.img") != std::string::npos, r.message());
  }

  // The real one: Sync answers once the domain runs.
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(vmi_json());
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  const auto sync_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  MESSAGE("Sync -> success in " << sync_ms.count() << " ms");
  REQUIRE_MESSAGE(chl::test::wait_until(kQemu ? 60s : 30s, [&] { return reported_running(notify); }),
                  states_text(notify) << "\n" << pod.output());
  auto seq = states(notify.received());
  REQUIRE_FALSE(seq.empty());
  CHECK(seq.front() == "ADDED Shutoff/Unknown");  // defined first, as virt-launcher does
  // A second Sync of the same VMI changes nothing and succeeds.
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  CHECK(r.success());
  // One the running VM cannot take: refused naming the field, nothing changed.
  {
    v1::VMIRequest bigger;
    auto bj = nlohmann::json::parse(vmi_json());
    bj["spec"]["domain"]["memory"]["guest"] = "128Mi";
    bigger.mutable_vmi()->set_vmijson(bj.dump());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, bigger, &r); }).ok());
    CHECK_FALSE(r.success());
    CHECK_MESSAGE(r.message().find("spec.domain.memory.guest") != std::string::npos, r.message());
  }
  // A filesystem added to the running VMI: KubeVirt hotplugs none either (virtiofs needs its
  // container in the pod from the start): refused naming it, nothing changed.
  {
    v1::VMIRequest with_fs;
    auto fj = nlohmann::json::parse(vmi_json());
    fj["spec"]["domain"]["devices"]["filesystems"] = nlohmann::json::array({{{"name", "shared"}, {"virtiofs", nlohmann::json::object()}}});
    fj["spec"]["volumes"].push_back({{"name", "shared"}, {"persistentVolumeClaim", {{"claimName", "shared"}}}});
    with_fs.mutable_vmi()->set_vmijson(fj.dump());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, with_fs, &r); }).ok());
    CHECK_FALSE(r.success());
    CHECK_MESSAGE(r.message().find("the running VM cannot take these changes: spec.domain.devices.filesystems") !=
                      std::string::npos,
                  r.message());
    CHECK_MESSAGE(r.message().find("nothing was changed") != std::string::npos, r.message());
  }

  // CPU hotplug as virt-handler does it: a Sync with more sockets (within maxSockets 4) is
  // accepted, then SyncVirtualMachineCPUs resizes the VM (Cloud Hypervisor's vm.resize; the
  // libvirt path says it does not); past maxSockets, or a changed core count, is refused naming it.
  {
    v1::VMIRequest more;
    auto mj = nlohmann::json::parse(vmi_json());
    mj["spec"]["domain"]["cpu"]["sockets"] = 2;
    more.mutable_vmi()->set_vmijson(mj.dump());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, more, &r); }).ok());
    CHECK_MESSAGE(r.success(), r.message());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachineCPUs(&c, more, &r); }).ok());
    CHECK_MESSAGE(r.success(), r.message());  // CH's vm.resize, libvirt's virDomainSetVcpusFlags
    {
      v1::EmptyRequest e;
      v1::DomainStatsResponse s2;
      REQUIRE(call([&](auto& c) { return cmd->GetDomainStats(&c, e, &s2); }).ok());
      CHECK(nlohmann::json::parse(s2.domainstats())["Vcpu"].size() == 2);
      v1::DomainResponse d2;
      REQUIRE(call([&](auto& c) { return cmd->GetDomain(&c, e, &d2); }).ok());
      CHECK(nlohmann::json::parse(d2.domain())["Spec"]["VCPU"]["CPUs"] == 2);
    }
    mj["spec"]["domain"]["cpu"]["sockets"] = 5;
    more.mutable_vmi()->set_vmijson(mj.dump());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachineCPUs(&c, more, &r); }).ok());
    CHECK_FALSE(r.success());
    CHECK_MESSAGE(r.message().find("spec.domain.cpu.sockets: 5 is more than the 4 (maxSockets)") != std::string::npos, r.message());
    mj["spec"]["domain"]["cpu"]["sockets"] = 2;
    mj["spec"]["domain"]["cpu"]["cores"] = 2;
    more.mutable_vmi()->set_vmijson(mj.dump());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachineCPUs(&c, more, &r); }).ok());
    CHECK_FALSE(r.success());
    CHECK_MESSAGE(r.message().find("spec.domain.cpu.cores: 2 (was 1): only sockets can change") != std::string::npos, r.message());
    // No maxGuest in this VMI: no memory headroom, so more memory is refused naming it.
    mj["spec"]["domain"]["cpu"]["cores"] = 1;
    mj["spec"]["domain"]["memory"]["guest"] = "128Mi";
    more.mutable_vmi()->set_vmijson(mj.dump());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachineMemory(&c, more, &r); }).ok());
    CHECK_FALSE(r.success());
    CHECK_MESSAGE(r.message().find("(maxGuest) the VM was started with") != std::string::npos, r.message());
  }

  // Volume hotplug as virt-handler does it: a hotplug volume (status.volumeStatus[].hotplugVolume)
  // mounted into the pod (<hotplug-disk-dir>/<volume>.img, phase HotplugVolumeMounted) is
  // attached by the next Sync (the libvirt path: on the virtio-scsi controller, as KubeVirt),
  // and detached by a Sync without it; one not mounted is refused naming it.
  {
    fs::create_directories(pod.hotplug());
    { std::ofstream(pod.hotplug() / "hp1.img").put('\0'); }
    fs::resize_file(pod.hotplug() / "hp1.img", 1 << 20);
    auto hj = nlohmann::json::parse(vmi_json());
    const auto status_json = [&] { return pod.status_text(); };
    hj["spec"]["volumes"] = nlohmann::json::parse(R"([{"name": "hp1", "persistentVolumeClaim": {"claimName": "hp1-pvc", "hotpluggable": true}}])");
    hj["spec"]["domain"]["devices"]["disks"] = nlohmann::json::parse(R"([{"name": "hp1", "disk": {"bus": "scsi"}}])");
    hj["status"]["volumeStatus"] = nlohmann::json::parse(
        R"([{"name": "hp1", "target": "", "phase": "HotplugVolumeMounted", "hotplugVolume": {"attachPodName": "hp-volume-abcde", "attachPodUID": "u1"}}])");
    v1::VMIRequest plug;
    plug.mutable_vmi()->set_vmijson(hj.dump());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, plug, &r); }).ok());
    {
      CHECK_MESSAGE(r.success(), r.message() << "\n" << pod.output());
      CHECK_MESSAGE(status_json().find((pod.hotplug() / "hp1.img").string()) != std::string::npos, status_json());
      std::string d2;
      const auto hot = get_domain(*cmd, chl::test::HandlerVmi::from_vmi_json(hj), &d2);
      CHECK_MESSAGE(d2.find(R"("Alias":{"Name":"hp1","UserDefined":true})") != std::string::npos,
                    d2);
      REQUIRE(hot.status.volume("hp1"));
      CHECK_MESSAGE(!hot.status.volume("hp1")->target.empty(),
                    d2);  // Target.Device: Ready (vm.go:488-520)
      CHECK(hot.status.volume("hp1")->phase == "Ready");
      // Another, not mounted: refused naming it; hp1 stays.
      auto nj = hj;
      nj["spec"]["volumes"].push_back({{"name", "hp2"}, {"persistentVolumeClaim", {{"claimName", "hp2-pvc"}, {"hotpluggable", true}}}});
      nj["spec"]["domain"]["devices"]["disks"].push_back({{"name", "hp2"}, {"disk", {{"bus", "scsi"}}}});
      nj["status"]["volumeStatus"].push_back(
          {{"name", "hp2"}, {"phase", "HotplugVolumeMounted"}, {"hotplugVolume", {{"attachPodName", "hp-volume-abcde"}}}});
      v1::VMIRequest missing;
      missing.mutable_vmi()->set_vmijson(nj.dump());
      REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, missing, &r); }).ok());
      CHECK_FALSE(r.success());
      CHECK_MESSAGE(r.message().find("hotplug volume hp2: not mounted into the pod") != std::string::npos, r.message());
      CHECK(status_json().find("hp1.img") != std::string::npos);
      // Unplugged: the VMI without it. CH drops the disk from its config at once (vmm/src/vm.rs
      // Vm::remove_device) but keeps the device until the guest ejects it (ACPI PCI hotplug:
      // device_manager.rs eject_device, vm/device-removed); the project's PVH guest ejects, and
      // only then does the domain lose the disk -- as virt-launcher's domain loses it on
      // libvirt's DEVICE_REMOVED -- so virt-handler's volume status (the stand-in's) has no
      // target any more. QEMU unplugs a SCSI disk itself.
      REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
      CHECK_MESSAGE(r.success(), r.message());
      CHECK_MESSAGE(status_json().find("hp1.img") == std::string::npos, status_json());
      if (!kQemu && chl::test::using_real_vmm() && !chl::test::is_project_pvh_guest(chl::test::guest_kernel())) {
        chl::test::skip_part("another guest (CHL_TEST_GUEST_KERNEL) may never eject the unplugged disk; "
                             "Cloud Hypervisor keeps it until then");
      } else {
        std::string d3;
        const auto detached = [&] {
          const auto now = get_domain(*cmd, chl::test::HandlerVmi::from_vmi_json(hj), &d3);
          return d3.find(R"("Name":"hp1")") == std::string::npos && now.status.volume("hp1") &&
                 now.status.volume("hp1")->target.empty();
        };
        CHECK_MESSAGE(chl::test::wait_until(60s, detached), d3 << "\n" << pod.output());
      }
    }
  }

  // The launcher confined itself once the VMM ran, gRPC transport and all (its own command socket
  // moved into the state directory under the ephemeral-disk dir).
  {
    const std::string st = pod.status_text();
    CHECK_MESSAGE(st.find("\"seccomp\":\"enforce\"") != std::string::npos, st);
  }
  REQUIRE(call([&](auto& c) { return cmd->GetDomain(&c, empty, &dom); }).ok());
  auto d = nlohmann::json::parse(dom.domain());
  CHECK(d["Status"]["Status"] == "Running");
  CHECK(d["ObjectMeta"]["name"] == "testvm");
  CHECK(d["Spec"]["Name"] == "default_testvm");

  v1::DomainStatsResponse stats;
  REQUIRE(call([&](auto& c) { return cmd->GetDomainStats(&c, empty, &stats); }).ok());
  REQUIRE_MESSAGE(stats.response().success(), stats.response().message());
  auto sj = nlohmann::json::parse(stats.domainstats());
  dump("GetDomain.json", d);
  dump("GetDomainStats.json", sj);
  CHECK(sj["Name"] == "default_testvm");
  CHECK(sj["Vcpu"].size() == 2);  // after the CPU hotplug above
  CHECK(sj["Cpu"]["TimeSet"] == true);  // the VMM process's CPU time, from /proc
  CHECK(sj["Memory"]["RSSSet"] == true);

  v1::QemuVersionResponse ver;
  REQUIRE(call([&](auto& c) { return cmd->GetQemuVersion(&c, empty, &ver); }).ok());
  CHECK_MESSAGE(ver.response().success(), ver.response().message());
  CHECK_FALSE(ver.version().empty());

  REQUIRE(call([&](auto& c) { return cmd->PauseVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  CHECK(chl::test::wait_until(10s, [&] { return has_state(notify, "MODIFIED Paused/User"); }));
  REQUIRE(call([&](auto& c) { return cmd->UnpauseVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());

  // virtctl console arrives on <private-dir>/<uid>/virt-serial0: the guest's boot output.
  const auto console = pod.priv() / kUid / "virt-serial0";
  REQUIRE(chl::test::wait_until(10s, [&] { return fs::exists(console); }));
  {
    const std::string got = chl::test::read_socket_until(console, "kv-flow", 10s);
    CHECK_MESSAGE(got.find("kv-flow") != std::string::npos, got);
  }

  // Unsupported RPCs answer at once.
  v1::Response mig;
  v1::MigrationRequest mreq;
  REQUIRE(call([&](auto& c) { return cmd->MigrateVirtualMachine(&c, mreq, &mig); }).ok());
  CHECK_FALSE(mig.success());

  // Shutdown: the ACPI power button; the project's PVH guest powers off (on a real CH too: it
  // finds CH's GED, docs/guests.md); another guest under a real CH may not — then Kill;
  // DeleteDomain; the launcher ends.
  REQUIRE(call([&](auto& c) { return cmd->ShutdownVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  const bool cooperative = kQemu || chl::test::is_project_pvh_guest(chl::test::guest_kernel());
  const auto off = [&] { return has_state(notify, "MODIFIED Shutoff/Shutdown") || has_state(notify, "MODIFIED Shutoff/Destroyed"); };
  if (cooperative) {
    CHECK_MESSAGE(chl::test::wait_until(60s, [&] { return has_state(notify, "MODIFIED Shutoff/Shutdown"); }),
                  states_text(notify) << "\n" << pod.output());
  }
  if (!chl::test::wait_until(cooperative ? 1s : 10s, off)) {
    REQUIRE(call([&](auto& c) { return cmd->KillVirtualMachine(&c, vmi, &r); }).ok());
    CHECK_MESSAGE(r.success(), r.message());
  }
  REQUIRE_MESSAGE(chl::test::wait_until(30s, off), pod.output());
  REQUIRE(call([&](auto& c) { return cmd->DeleteVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  auto st = pod.child.wait_for(kQemu ? 120s : 60s);
  REQUIRE(st);
  REQUIRE(*st);
  CHECK_MESSAGE(((*st)->exited && (*st)->code == 0), (*st)->describe() << "\n" << pod.output());  // exit 0 however the VM ended
  // The final notification: MODIFIED NoState/NonExistent with deletionTimestamp; never DELETED.
  auto got = notify.received();
  for (std::size_t i = 0; i < got.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "%02zu-%s.json", i, got[i].k8s ? "k8s-event" : got[i].event_type.c_str());
    dump(name, got[i].json);
  }
  REQUIRE_FALSE(got.empty());
  std::optional<chl::test::ReceivedNotification> last;
  for (const auto& n : got) {
    CHECK(n.event_type != "DELETED");
    if (!n.k8s) last = n;
  }
  REQUIRE(last);
  CHECK(last->event_type == "MODIFIED");
  CHECK(last->json["Status"]["Status"] == "NoState");
  CHECK(last->json["Status"]["Reason"] == "NonExistent");
  CHECK(last->json["ObjectMeta"].contains("deletionTimestamp"));
  CHECK_FALSE(fs::exists(sock));  // the server is gone with the launcher
}

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): SIGTERM before any Sync ends the launcher at once, exit 0, nothing left") {
  if (!guest_runnable()) return;
  Pod pod;
  pod.start();
  const auto sock = chl::kubevirt::ready_socket_path(pod.share());
  REQUIRE_MESSAGE(chl::test::wait_until(10s, [&] { return fs::exists(sock); }), pod.output());
  REQUIRE(::kill(pod.child.pid(), SIGTERM) == 0);
  auto st = pod.child.wait_for(10s);
  REQUIRE(st);
  REQUIRE(*st);
  CHECK_MESSAGE(((*st)->exited && (*st)->code == 0), pod.output());
  CHECK_FALSE(fs::exists(sock));
}

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): --hypervisor is KubeVirt's kernel hypervisor, CHL_VMM names the VMM on it") {
  if (kQemu) return;  // one hypervisor's run says it
  chl::test::TempDir dir("chl-vl-hv");
  const std::string share = (dir.path() / "share").string();
  // Without CHL_VMM (as outside the image), hyperv-direct has no VMM: exit 2 naming it.
  auto r = chl::test::run_command({"env", "-u", "CHL_VMM", chl::test::launcher_binary(), "virt-launcher",
                                   "--hypervisor", "hyperv-direct", "--kubevirt-share-dir", share});
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.output.find("--hypervisor hyperv-direct needs Cloud Hypervisor (CHL_VMM=cloud-hypervisor)") != std::string::npos,
                r.output);
  r = chl::test::run_command({"env", "CHL_VMM=firecracker", chl::test::launcher_binary(), "virt-launcher",
                              "--hypervisor", "kvm", "--kubevirt-share-dir", share});
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.output.find("CHL_VMM takes cloud-hypervisor or qemu-kvm, got firecracker") != std::string::npos, r.output);
  // With CHL_VMM=cloud-hypervisor (the image), KubeVirt's default `kvm` is Cloud Hypervisor: the
  // launcher says so at start, and a SIGTERM before any Sync ends it with 0.
  Pod pod;
  pod.hypervisor = "kvm";
  const char* before = std::getenv("CHL_VMM");
  ::setenv("CHL_VMM", "cloud-hypervisor", 1);
  pod.start();
  if (before) ::setenv("CHL_VMM", before, 1);
  else ::unsetenv("CHL_VMM");
  const auto sock = chl::kubevirt::ready_socket_path(pod.share());
  REQUIRE_MESSAGE(chl::test::wait_until(10s, [&] { return fs::exists(sock); }), pod.output());
  REQUIRE(::kill(pod.child.pid(), SIGTERM) == 0);
  auto st = pod.child.wait_for(10s);
  REQUIRE(st);
  REQUIRE(*st);
  CHECK(((*st)->exited && (*st)->code == 0));
  CHECK_MESSAGE(pod.output().find("--hypervisor kvm: Cloud Hypervisor on /dev/kvm (CHL_VMM=cloud-hypervisor)") != std::string::npos, pod.output());
}

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): memory hotplug within maxGuest — Sync accepts the new size, SyncVirtualMachineMemory resizes, a step CH cannot add, beyond maxGuest or less is refused") {
  if (!guest_runnable()) return;
  Pod pod;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  auto cmd = pod.serve();
  auto j = nlohmann::json::parse(vmi_json());
  j["spec"]["domain"]["memory"] = {{"guest", "128Mi"}, {"maxGuest", "512Mi"}};
  j["status"]["memory"] = {{"guestAtBoot", "128Mi"}, {"guestCurrent", "128Mi"}, {"guestRequested", "128Mi"}};
  // Two disks, one of them among Sync's preallocatedVolumes: Cloud Hypervisor keeps that one
  // allocated (sparse: false), as KubeVirt leaves discard off for it.
  j["spec"]["volumes"] = nlohmann::json::parse(R"([{"name": "pre", "emptyDisk": {"capacity": "4Mi"}},
                                                   {"name": "thin", "emptyDisk": {"capacity": "4Mi"}}])");
  j["spec"]["domain"]["devices"]["disks"] = nlohmann::json::parse(R"([{"name": "pre", "disk": {"bus": "virtio"}},
                                                                       {"name": "thin", "disk": {"bus": "virtio"}}])");
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(j.dump());
  vmi.mutable_options()->add_preallocatedvolumes("pre");
  vmi.mutable_options()->set_memballoonstatsperiod(10);  // no balloon on Cloud Hypervisor: nothing to set
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  const auto status = [&] { return pod.status(); };
  if (!kQemu) {
    // Sync answers at the Running event, which comes before the VMM's answer to the boot call;
    // the status read at once still has the VM's config (the next case). Read with contains()/
    // at(): a const json's operator[] on a missing key is undefined (it read as null against a
    // real CH v52 in issue 33, hiding what the status said instead).
    const auto st = status();
    REQUIRE_MESSAGE((st.is_object() && st.contains("info") && st["info"].is_object() &&
                     st["info"].contains("config")),
                    st.dump());
    std::map<std::string, bool> sparse;
    for (const auto& d : st.at("info").at("config").value("disks", nlohmann::json::array()))
      sparse[d.value("id", "")] = d.value("sparse", true);
    CHECK_MESSAGE(sparse.count("pre"), st.dump());
    CHECK_FALSE(sparse["pre"]);
    CHECK(sparse["thin"]);
  }
  j["spec"]["domain"]["memory"]["guest"] = "256Mi";
  vmi.mutable_vmi()->set_vmijson(j.dump());
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message());
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachineMemory(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  v1::EmptyRequest empty;
  v1::DomainResponse dom;
  REQUIRE(call([&](auto& c) { return cmd->GetDomain(&c, empty, &dom); }).ok());
  CHECK(nlohmann::json::parse(dom.domain())["Spec"]["Memory"]["Value"] == 256 * 1024);
  j["spec"]["domain"]["memory"]["guest"] = "320Mi";
  vmi.mutable_vmi()->set_vmijson(j.dump());
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachineMemory(&c, vmi, &r); }).ok());
  if (kQemu) {
    // libvirt: a virtio-mem device of the headroom (512 - 128 MiB), 128 MiB requested after the
    // first resize, 192 MiB after this one (2 MiB blocks: 64 MiB more is fine).
    CHECK_MESSAGE(r.success(), r.message() << "\n" << pod.output());
    const auto st = status();
    CHECK_MESSAGE(st["info"]["virtio_mem"]["size_kib"] == 384 * 1024, st.dump());
    CHECK_MESSAGE(st["info"]["virtio_mem"]["requested_kib"] == 192 * 1024, st.dump());
  } else {
    // Cloud Hypervisor adds memory in 128 MiB steps: 64 MiB more is refused saying so.
    CHECK_FALSE(r.success());
    CHECK_MESSAGE(r.message().find("adds memory in steps of 128 MiB: 64 MiB more (256 to 320 MiB) is not one") != std::string::npos,
                  r.message());
  }
  for (const char* size : {"1Gi", "64Mi"}) {
    j["spec"]["domain"]["memory"]["guest"] = size;
    vmi.mutable_vmi()->set_vmijson(j.dump());
    REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachineMemory(&c, vmi, &r); }).ok());
    CHECK_FALSE(r.success());
    CHECK_MESSAGE(r.message().find("spec.domain.memory.guest") != std::string::npos, r.message());
  }
  kill_and_delete(*cmd, vmi);
  auto st = pod.child.wait_for(30s);
  REQUIRE(st);
  CHECK(*st);
}

// Issue 33's memory-hotplug row: Cloud Hypervisor emits `booted` before it answers vm.boot
// (vmm/src/lib.rs, Vmm::vm_boot), and Sync answers at that event, so a status read at once
// raced the boot call and had no VM info. The double holds its 204 (VMM_DOUBLE_BOOT_ANSWER_DELAY_MS)
// to widen the window; a real CH runs as it is and the status must be whole all the same.
TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): a status read as soon as Sync answers carries the VMM's info, though the VMM answered vm.boot after its booted event") {
  if (kQemu) return;  // the VMM's boot answer is Cloud Hypervisor's
  if (!guest_runnable()) return;
  Pod pod;
  if (!chl::test::using_real_vmm()) {  // the launcher gives its VMM a clean environment
    const fs::path wrapper = pod.dir.path() / "vmm-slow-answer.sh";
    {
      std::ofstream f(wrapper);
      f << "#!/bin/sh\nexport VMM_DOUBLE_BOOT_ANSWER_DELAY_MS=700\nexec '" << chl::test::vmm_binary() << "' \"$@\"\n";
    }
    fs::permissions(wrapper, fs::perms::owner_all);
    pod.vmm_binary = wrapper.string();
  }
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  auto cmd = pod.serve();
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(vmi_json());
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  const auto st = pod.status();  // once, no wait
  REQUIRE_MESSAGE((st.is_object() && st.contains("info") && st.at("info").is_object()), st.dump());
  CHECK_MESSAGE(st.at("info").value("state", "") == "Running", st.dump());
  CHECK_MESSAGE(st.at("info").contains("config"), st.dump());
  kill_and_delete(*cmd, vmi);
  auto end = pod.child.wait_for(30s);
  REQUIRE(end);
  CHECK(*end);
}

// A first Sync that already carries hotplug volumes (a VM restarted with persisted ones, a
// migration target): the domain is created without them and the ones virt-handler has mounted
// are attached before the Sync answers, as KubeVirt's converter includes only mounted ones; one
// not mounted yet is attached by the Sync after its mount.
TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): a first Sync with hotplug volumes attaches the mounted ones, a later Sync the rest") {
  if (!guest_runnable()) return;
  Pod pod;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  fs::create_directories(pod.hotplug());
  auto make_volume = [&](const std::string& name) {
    { std::ofstream(pod.hotplug() / (name + ".img")).put('\0'); }
    fs::resize_file(pod.hotplug() / (name + ".img"), 1 << 20);
  };
  make_volume("hp1");
  auto cmd = pod.serve();
  const auto status_json = [&] { return pod.status_text(); };
  auto j = nlohmann::json::parse(vmi_json());
  j["spec"]["volumes"] = nlohmann::json::parse(R"([
    {"name": "hp1", "persistentVolumeClaim": {"claimName": "hp1-pvc", "hotpluggable": true}},
    {"name": "hp2", "dataVolume": {"name": "hp2-dv", "hotpluggable": true}}])");
  j["spec"]["domain"]["devices"]["disks"] = nlohmann::json::parse(R"([
    {"name": "hp1", "disk": {"bus": "scsi"}, "serial": "hp1"}, {"name": "hp2", "disk": {"bus": "scsi"}}])");
  j["status"]["volumeStatus"] = nlohmann::json::parse(R"([
    {"name": "hp1", "target": "", "phase": "HotplugVolumeMounted", "hotplugVolume": {"attachPodName": "hp-volume-x", "attachPodUID": "u1"}},
    {"name": "hp2", "target": "", "phase": "AttachedToNode", "hotplugVolume": {"attachPodName": "hp-volume-x", "attachPodUID": "u1"}}])");
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(j.dump());
  notify.expect_vmi(
      chl::test::HandlerVmi::from_vmi_json(j));  // every event read with its volumeStatus
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }, 120s).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  CHECK_MESSAGE(status_json().find((pod.hotplug() / "hp1.img").string()) != std::string::npos, status_json());
  CHECK(status_json().find("hp2") == std::string::npos);
  std::string text;
  // virt-handler's reading: hp1 attached with the VMM's target, so Ready (vm.go:488-520); hp2
  // not in the domain, its phase as it was.
  auto read = get_domain(*cmd, chl::test::HandlerVmi::from_vmi_json(j), &text);
  CHECK_MESSAGE(text.find(R"("Alias":{"Name":"hp1","UserDefined":true})") != std::string::npos,
                text);
  CHECK(text.find(R"("Name":"hp2")") == std::string::npos);
  REQUIRE(read.status.volume("hp1"));
  CHECK_MESSAGE(!read.status.volume("hp1")->target.empty(), text);
  CHECK(read.status.volume("hp1")->phase == "Ready");
  CHECK(read.status.volume("hp2")->phase == "AttachedToNode");
  CHECK(read.status.volume("hp2")->target.empty());

  // hp2 mounted: the next Sync attaches it; hp1 stays as it was.
  make_volume("hp2");
  j["status"]["volumeStatus"][1]["phase"] = "HotplugVolumeMounted";
  vmi.mutable_vmi()->set_vmijson(j.dump());
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  CHECK_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  const std::string st = status_json();
  CHECK_MESSAGE(st.find((pod.hotplug() / "hp2.img").string()) != std::string::npos, st);
  CHECK_MESSAGE(st.find((pod.hotplug() / "hp1.img").string()) != std::string::npos, st);
  REQUIRE(chl::test::wait_until(10s, [&] {
    for (const auto& n : notify.received())
      if (n.json.dump().find(R"("Name":"hp2")") != std::string::npos) return true;
    return false;
  }));
  notify.expect_vmi(chl::test::HandlerVmi::from_vmi_json(j));
  read = get_domain(*cmd, chl::test::HandlerVmi::from_vmi_json(j), &text);
  for (const char* v : {"hp1", "hp2"}) {
    CAPTURE(v);
    REQUIRE(read.status.volume(v));
    CHECK_MESSAGE(!read.status.volume(v)->target.empty(), text);
    CHECK(read.status.volume(v)->phase == "Ready");
  }
  CHECK(read.status.volume("hp1")->target != read.status.volume("hp2")->target);
  kill_and_delete(*cmd, vmi);
  auto ended = pod.child.wait_for(kQemu ? 120s : 30s);
  REQUIRE(ended);
  CHECK(*ended);
}

TEST_CASE("virt-launcher mode (" CHL_VL_HYPERVISOR "): a virtiofs filesystem — the VM connects to the virtiofs container's socket under the share dir, the domain shows it") {
  if (!guest_runnable()) return;
  std::string why;
  auto bin = chl::test::find_virtiofsd(&why);
  if (!bin) {
    chl::test::skip(why);
    return;
  }
  Pod pod;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  // KubeVirt's virtiofs-data container: its socket in the emptyDir under the share directory.
  const fs::path socks = pod.share() / "virtiofs-containers";
  fs::create_directories(socks);
  fs::create_directories(pod.dir.path() / "pvc");
  auto daemon = chl::test::start_virtiofsd(*bin, socks / "data.sock", pod.dir.path() / "pvc", pod.dir.path() / "vfs.log");
  auto cmd = pod.serve();
  auto j = nlohmann::json::parse(vmi_json());
  j["spec"]["domain"]["devices"]["filesystems"] = nlohmann::json::array({{{"name", "data"}, {"virtiofs", nlohmann::json::object()}}});
  j["spec"]["volumes"] = nlohmann::json::array({{{"name", "data"}, {"persistentVolumeClaim", {{"claimName", "data"}}}}});
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(j.dump());
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }, 120s).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  CHECK_MESSAGE(daemon.running(), chl::test::read_file(daemon.log));  // the VM holds its connection
  v1::EmptyRequest empty;
  v1::DomainResponse dom;
  REQUIRE(call([&](auto& c) { return cmd->GetDomain(&c, empty, &dom); }).ok());
  const auto fss = nlohmann::json::parse(dom.domain())["Spec"]["Devices"]["Filesystems"];
  REQUIRE_MESSAGE(fss.is_array(), dom.domain());
  REQUIRE(fss.size() == 1);
  CHECK(fss[0]["Source"]["Socket"] == (socks / "data.sock").string());
  CHECK(fss[0]["Target"]["Dir"] == "data");
  CHECK(fss[0]["Driver"]["Type"] == "virtiofs");
  kill_and_delete(*cmd, vmi);
  auto ended = pod.child.wait_for(kQemu ? 120s : 30s);
  REQUIRE(ended);
  CHECK(*ended);
  // The VM is gone: virtiofsd lost its frontend and ended.
  CHECK(chl::test::wait_until(20s, [&] { return !daemon.running(); }, 50ms));
}

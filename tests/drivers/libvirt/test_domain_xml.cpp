// VMI -> libvirt domain XML for qemu-kvm (domain_xml.hpp): every example VMI renders XML that
// libvirt's own schema accepts (virt-xml-validate from libvirt-clients), with the name, uuid,
// boot, disks, console and seclabel the launcher relies on. No daemon, no QEMU.
#include <doctest/doctest.h>

#include "drivers/libvirt/domain_xml.hpp"
#include "launcher/plan.hpp"
#include "vmi/validator.hpp"
#include "vmi/parser.hpp"
#include "tests/support/test_support.hpp"

using namespace chl::launcher; using namespace chl::libvirt; using namespace chl::vmi;
using chl::test::source_dir;

namespace {

struct Case {
  const char* vmi;
  std::vector<std::pair<std::string, std::string>> volumes;
  const char* cpu_set = "";
  bool pod_layout = false;
};

// The golden VMIs of test_vmi_plan.cpp, with the same volume files.
const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"containerdisk-cloudinit.yaml", {{"containerdisk", "/images/fedora-40.qcow2"}}},
      {"masquerade.yaml", {}, "", true},
      {"ephemeral.yaml", {{"containerdisk", "/images/cirros.img"}}},
      {"empty-disk.yaml", {{"containerdisk", "/images/ubuntu-24.04.qcow2"}}},
      {"host-disk.yaml", {}},
      {"pvc.json", {}, "", true},
      {"kernel-boot.yaml",
       {{"containerdisk", "/images/alpine.img"}, {"kernel-boot", "/kernel-root"}}},
      {"efi.yaml", {{"containerdisk", "/images/alpine.img"}}},
      {"hugepages.yaml", {{"containerdisk", "/images/fedora-40.qcow2"}}},
      {"dedicated-cpus.yaml", {{"containerdisk", "/images/fedora-40.qcow2"}}, "4-7"},
      {"multi-disk-nic.yaml",
       {{"data", "/pvc/data/disk.img"},
        {"root", "/images/debian-12.qcow2"},
        {"app-config", "/configmaps/app-settings"}}},
      {"virtiofs.yaml", {{"containerdisk", "/images/fedora-40.qcow2"}}},
      {"virtiofs-pvc-hugepages.yaml", {{"containerdisk", "/images/fedora-40.qcow2"}}},
  };
  return c;
}

struct Rendered {
  Vmi vmi;
  LaunchPlan plan;
  std::string xml;
};

Rendered render_text(const std::string& text, const Case& c, Accel accel = Accel::Tcg) {
  auto checked = check_vmi(text, "qemu-kvm");
  if (!checked) {
    std::string all;
    for (const auto& v : checked.error()) all += to_string(v) + "\n";
    FAIL(c.vmi << " does not validate for qemu-kvm:\n" << all);
  }
  PlanInputs in;
  for (const auto& [k, v] : c.volumes) in.volume_paths[k] = v;
  in.pod_layout = c.pod_layout;
  in.state_dir = "/run/ch-launcher/test/vm";
  if (*c.cpu_set) in.cpu_set = parse_cpu_list(c.cpu_set);
  auto plan = plan_launch(checked->vmi, *checked->caps, in);
  if (!plan) {
    std::string all;
    for (const auto& v : plan.error()) all += to_string(v) + "\n";
    FAIL(c.vmi << ": plan failed:\n" << all);
  }
  DomainXmlOptions xo;
  xo.accel = accel;
  xo.run_as = std::make_pair(uid_t{0}, gid_t{0});
  xo.state_dir = in.state_dir;  // the schema checks cover the <metadata> element too
  std::string xml = to_domain_xml(checked->vmi, *plan, xo);
  return {checked->vmi, std::move(*plan), std::move(xml)};
}

Rendered render_file(const Case& c, Accel accel = Accel::Tcg) {
  auto text = read_manifest((source_dir() / "tests/vmis" / c.vmi).string());
  REQUIRE_MESSAGE(text.has_value(), c.vmi);
  // The example VMIs name no hypervisor or cloud-hypervisor; qemu-kvm is what is rendered here.
  std::string t = *text;
  for (auto pos = t.find("hypervisor: cloud-hypervisor"); pos != std::string::npos;
       pos = t.find("hypervisor: cloud-hypervisor"))
    t.replace(pos, std::strlen("hypervisor: cloud-hypervisor"), "hypervisor: qemu-kvm");
  return render_text(t, c, accel);
}

// virt-xml-validate's verdict ("" = valid), or nullopt when the tool is missing.
std::optional<std::string> schema_errors(const std::string& xml, const std::string& name) {
  auto tool = chl::test::tool("virt-xml-validate");
  if (!tool) return std::nullopt;
  chl::test::TempDir dir("chl-domxml");
  auto path = dir.path() / (name + ".xml");
  chl::test::write_file(path, xml);
  auto r = chl::test::run_command({*tool, path.string(), "domain"});
  if (r.exit_code == 0) return std::string();
  return r.output.empty() ? std::string("exit ") + std::to_string(r.exit_code) : r.output;
}

bool has(const std::string& xml, const std::string& what) {
  return xml.find(what) != std::string::npos;
}

std::size_t count_of(const std::string& xml, const std::string& what) {
  std::size_t n = 0;
  for (auto pos = xml.find(what); pos != std::string::npos; pos = xml.find(what, pos + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("domain XML: every example VMI renders XML libvirt's schema accepts, under KVM and TCG") {
  bool validated = false;
  for (const auto& c : cases()) {
    for (Accel a : {Accel::Tcg, Accel::Kvm}) {
      CAPTURE(c.vmi);
      CAPTURE(to_string(a));
      Rendered r = render_file(c, a);
      CHECK(
          has(r.xml, "<name>" + r.vmi.metadata.namespace_ + "_" + r.vmi.metadata.name + "</name>"));
      CHECK(has(r.xml, a == Accel::Kvm ? "<domain type='kvm'>" : "<domain type='qemu'>"));
      CHECK(has(r.xml, "<serial type='pty'>"));
      CHECK(has(r.xml, "<seclabel type='static' model='dac' relabel='no'>"));
      CHECK(has(r.xml, "<on_crash>destroy</on_crash>"));
      auto errors = schema_errors(r.xml, c.vmi);
      if (!errors) continue;
      validated = true;
      CHECK_MESSAGE(errors->empty(), c.vmi << " (" << to_string(a) << "):\n"
                                           << *errors << "\n"
                                           << r.xml);
    }
  }
  if (!validated)
    chl::test::skip("virt-xml-validate not installed (libvirt-clients): schema not checked");
}

TEST_CASE("domain XML: name and uuid from the VMI, memory in bytes, topology, kernel boot") {
  Rendered r =
      render_file({"kernel-boot.yaml",
                   {{"containerdisk", "/images/alpine.img"}, {"kernel-boot", "/kernel-root"}}});
  // firmware.uuid when the VMI sets one (KubeVirt's), else the VMI's uid.
  const std::string uuid = r.plan.platform_uuid.empty() ? r.vmi.metadata.uid : r.plan.platform_uuid;
  if (uuid.empty())
    CHECK_FALSE(has(r.xml, "<uuid>"));  // none: libvirt makes one
  else
    CHECK(has(r.xml, "<uuid>" + uuid + "</uuid>"));
  CHECK(has(r.xml, "<memory unit='b'>" + std::to_string(r.plan.memory.size) + "</memory>"));
  CHECK(has(r.xml, "<kernel>" + r.plan.payload.kernel + "</kernel>"));
  if (!r.plan.payload.initramfs.empty())
    CHECK(has(r.xml, "<initrd>" + r.plan.payload.initramfs + "</initrd>"));
  CHECK(has(r.xml, "<cmdline>" + xml_escape(r.plan.payload.cmdline) + "</cmdline>"));
  CHECK_FALSE(has(r.xml, "<boot order="));  // the kernel boots, not a disk
  CHECK_FALSE(has(r.xml, "<loader"));
  CHECK(has(r.xml, "<cpu mode='maximum'"));  // TCG: no host CPU to pass through
}

TEST_CASE("domain XML: the launcher's state directory in <metadata>, escaped, read back whole") {
  Rendered r =
      render_file({"kernel-boot.yaml",
                   {{"containerdisk", "/images/alpine.img"}, {"kernel-boot", "/kernel-root"}}});
  CHECK(has(r.xml, "<chl:launcher xmlns:chl='" + std::string(chl::libvirt::kLauncherMetadataUri) +
                       "'><chl:state-dir>/run/ch-launcher/test/vm</chl:state-dir>"));
  const std::string odd = "/run/a&b/<vm>'s \"dir\"";
  CHECK(chl::common::xml_unescape(xml_escape(odd)) == odd);
  CHECK(chl::common::xml_unescape("&amp;lt; &unknown; &") == "&lt; &unknown; &");
  // No state directory (render): no metadata element.
  DomainXmlOptions xo;
  CHECK_FALSE(has(to_domain_xml(r.vmi, r.plan, xo), "<metadata>"));
}

TEST_CASE("domain XML: buses, cdrom, qcow2 overlays, boot order, EFI, named CPU, pinning") {
  const std::string vmi = R"(apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: mix-1, namespace: lab, uid: 0b6f5d0e-1111-4222-8333-444455556666}
spec:
  hypervisor: qemu-kvm
  domain:
    cpu: {sockets: 1, cores: 2, threads: 1, model: Skylake-Server, dedicatedCpuPlacement: true}
    memory: {guest: 1Gi}
    firmware:
      bootloader: {efi: {secureBoot: false}}
    devices:
      autoattachPodInterface: false
      autoattachGraphicsDevice: false
      disks:
      - name: root
        bootOrder: 2
        disk: {bus: scsi}
      - name: seed
        bootOrder: 1
        cdrom: {bus: sata}
      - name: scratch
        disk: {bus: virtio}
  volumes:
  - name: root
    persistentVolumeClaim: {claimName: root-pvc}
  - name: seed
    cloudInitNoCloud: {userData: "#cloud-config\n"}
  - name: scratch
    ephemeral: {persistentVolumeClaim: {claimName: base}}
)";
  Rendered r =
      render_text(vmi, {"inline", {{"root", "/pvc/root.img"}, {"scratch", "/pvc/base.img"}}, "2-3"},
                  Accel::Kvm);
  CAPTURE(r.xml);
  CHECK(has(r.xml, "<name>lab_mix-1</name>"));
  CHECK(xml_escape("a<b>&'\"") == "a&lt;b&gt;&amp;&apos;&quot;");
  CHECK(has(r.xml, "<disk type='file' device='cdrom'>"));
  CHECK(has(r.xml, "bus='sata'"));
  CHECK(has(r.xml, "<controller type='scsi' index='0' model='virtio-scsi'/>"));
  CHECK(has(r.xml, "<target dev='sda' bus='sata'/>"));  // the cdrom boots first (bootOrder 1)
  CHECK(has(r.xml, "<target dev='sdb' bus='scsi'/>"));
  CHECK(has(r.xml, "<target dev='vda' bus='virtio'/>"));
  CHECK(has(r.xml, "<driver name='qemu' type='qcow2' discard='unmap'/>"));  // the ephemeral overlay
  CHECK(has(r.xml, "<loader readonly='yes' type='pflash'>"));
  CHECK(has(r.xml, "OVMF_VARS.fd"));
  CHECK(has(r.xml, "<model fallback='forbid'>Skylake-Server</model>"));
  CHECK(has(r.xml, "<vcpupin vcpu='1' cpuset='3'/>"));
  CHECK(has(r.xml, "<label>+0:+0</label>"));
  auto pos_cd = r.xml.find("device='cdrom'");
  auto pos_root = r.xml.find("ua-root");
  CHECK(pos_cd < pos_root);
  auto errors = schema_errors(r.xml, "inline");
  if (!errors) {
    chl::test::skip("virt-xml-validate not installed (libvirt-clients): schema not checked");
  } else {
    CHECK_MESSAGE(errors->empty(), *errors);
  }
}

TEST_CASE("domain XML: interfaces name the pod's taps, unmanaged, with MAC, model, queue pairs and MTU") {
  Rendered r = render_file({"multi-disk-nic.yaml",
                            {{"data", "/pvc/data/disk.img"},
                             {"root", "/images/debian-12.qcow2"},
                             {"app-config", "/configmaps/app-settings"}}});
  CAPTURE(r.xml);
  REQUIRE(r.plan.nics.size() == 3);
  // The pod network's interface is eth0's tap0, the Multus ones net1/net2's tap1/tap2; libvirt
  // opens them by name and leaves them alone (managed='no'), as KubeVirt's domains do.
  CHECK(has(r.xml, "<interface type='ethernet'>\n      <mac address='02:ab:cd:00:00:01'/>\n"
                   "      <target dev='tap0' managed='no'/>\n      <model type='virtio'/>\n"));
  CHECK(has(r.xml, "<target dev='tap1' managed='no'/>"));
  CHECK(has(r.xml, "<target dev='tap2' managed='no'/>"));
  CHECK(has(r.xml, "<mac address='" + r.plan.nics[1].mac + "'/>"));
  CHECK(has(r.xml, "<alias name='ua-pod'/>"));
  CHECK(has(r.xml, "<alias name='ua-mgmt'/>"));
  // networkInterfaceMultiqueue with 2 vCPUs: 2 queue pairs (the plan counts 4 RX+TX queues),
  // and no driver name: vhost-net is libvirt's choice (TCG has none).
  CHECK(r.plan.nics[0].num_queues == 4);
  CHECK(count_of(r.xml, "<driver queues='2'/>") == 3);
  CHECK_FALSE(has(r.xml, "name='vhost'"));
  // render knows no pod: no MTU. run fills it in from the pod interface once wired.
  CHECK_FALSE(has(r.xml, "<mtu "));
  LaunchPlan wired = r.plan;
  for (auto& n : wired.nics) n.mtu = 1400;
  wired.nics[2].num_queues = 0;  // a single-queue tap: no <driver>
  DomainXmlOptions xo;
  xo.run_as = std::make_pair(uid_t{0}, gid_t{0});
  const std::string xml = to_domain_xml(r.vmi, wired, xo);
  CHECK(count_of(xml, "<mtu size='1400'/>") == 3);
  CHECK(count_of(xml, "<driver queues='2'/>") == 2);
  auto errors = schema_errors(xml, "multi-nic-wired");
  if (!errors) {
    chl::test::skip("virt-xml-validate not installed (libvirt-clients): schema not checked");
  } else {
    CHECK_MESSAGE(errors->empty(), *errors << "\n" << xml);
  }
}

TEST_CASE("domain XML: render --hypervisor qemu-kvm prints the XML through the CLI") {
  auto r = chl::test::run_command(
      {chl::test::launcher_binary(), "render", "--vmi",
       (source_dir() / "tests/vmis/containerdisk-cloudinit.yaml").string(),
       "--hypervisor", "qemu-kvm", "--accel", "tcg", "--volume",
       "containerdisk=/images/fedora-40.qcow2"});
  CHECK_MESSAGE(r.exit_code == 0, r.output);
  CHECK(r.output.rfind("<domain type='qemu'>", 0) == 0);
  CHECK(has(r.output, "<name>demo_vmi-fedora</name>"));
  CHECK(has(r.output, "<rng model='virtio'>"));
  auto masq = chl::test::run_command(
      {chl::test::launcher_binary(), "render", "--vmi",
       (source_dir() / "tests/vmis/masquerade.yaml").string(), "--hypervisor", "qemu-kvm",
       "--accel", "tcg", "--pod-layout"});
  CHECK_MESSAGE(masq.exit_code == 0, masq.output);
  CHECK_MESSAGE(has(masq.output, "<target dev='tap0' managed='no'/>"), masq.output);
  CHECK(has(masq.output, "<alias name='ua-testmasquerade'/>"));
  auto bad = chl::test::run_command(
      {chl::test::launcher_binary(), "render", "--vmi",
       (source_dir() / "tests/vmis/containerdisk-cloudinit.yaml").string(),
       "--hypervisor", "qemu-kvm", "--accel", "fast"});
  CHECK(bad.exit_code == 2);
  CHECK(has(bad.output, "--accel"));
}

TEST_CASE("domain XML: Sync's SMBIOS system fields go into the sysinfo (KubeVirt's defaults without them), schema-valid") {
  Rendered r =
      render_file({"kernel-boot.yaml",
                   {{"containerdisk", "/images/alpine.img"}, {"kernel-boot", "/kernel-root"}}});
  DomainXmlOptions xo;
  xo.run_as = std::make_pair(uid_t{0}, gid_t{0});
  xo.smbios = chl::launcher::SmbiosSystem{"Acme & Co", "", "1.2", "sku-9", "Rack"};
  const std::string xml = to_domain_xml(r.vmi, r.plan, xo);
  CHECK(has(xml, "<entry name='manufacturer'>Acme &amp; Co</entry>"));
  CHECK(has(xml, "<entry name='product'>None</entry>"));  // not given: KubeVirt's default
  CHECK(has(xml, "<entry name='version'>1.2</entry>"));
  CHECK(has(xml, "<entry name='sku'>sku-9</entry>"));
  CHECK(has(xml, "<entry name='family'>Rack</entry>"));
  CHECK(has(xml, "<smbios mode='sysinfo'/>"));
  if (auto errors = schema_errors(xml, "smbios")) CHECK_MESSAGE(errors->empty(), *errors << "\n" << xml);
  // Without them: as before (a sysinfo with KubeVirt's defaults only for a serial or UUID).
  xo.smbios.reset();
  const std::string plain = to_domain_xml(r.vmi, r.plan, xo);
  CHECK_FALSE(has(plain, "Acme"));
  CHECK_FALSE(has(plain, "<entry name='family'>"));
}

TEST_CASE("domain XML: a virtio-scsi controller for hotplug volumes unless disableHotplug, a hotplug disk's XML, maxMemory, balloon stats, discard") {
  const std::string base = R"(apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: hp, namespace: lab}
spec:
  domain:
    memory: {guest: 256Mi}
    devices:
      autoattachPodInterface: false
      DISABLE
      disks:
      - name: root
        disk: {bus: virtio}
  volumes:
  - name: root
    persistentVolumeClaim: {claimName: root-pvc}
)";
  auto with = [&](const std::string& line) {
    std::string t = base;
    t.replace(t.find("DISABLE"), 7, line);
    return render_text(t, {"inline", {{"root", "/pvc/root.img"}}}).xml;
  };
  const std::string scsi = "<controller type='scsi' index='0' model='virtio-scsi'/>";
  CHECK(has(with("disableHotplug: false"), scsi));    // KubeVirt's default: hotplug on
  // Sync's options: the balloon's statistics period; no discard on a preallocated volume.
  {
    Rendered r = render_text(base.substr(0, base.find("DISABLE")) + base.substr(base.find("DISABLE") + 7),
                             {"inline", {{"root", "/pvc/root.img"}}});
    CHECK(has(r.xml, "discard='unmap'"));
    CHECK(has(r.xml, "<memballoon model='virtio'/>"));
    DomainXmlOptions xo;
    xo.mem_balloon_stats_period = 10;
    REQUIRE(r.plan.disks.size() == 1);
    r.plan.disks[0].preallocated = true;
    const std::string x = to_domain_xml(r.vmi, r.plan, xo);
    CHECK_FALSE(has(x, "discard="));
    CHECK(has(x, "<memballoon model='virtio'>\n      <stats period='10'/>\n    </memballoon>"));
    if (auto errors = schema_errors(x, "balloon-stats")) CHECK_MESSAGE(errors->empty(), *errors);
  }
  CHECK_FALSE(has(with("disableHotplug: true"), scsi));

  // maxGuest: <maxMemory> and the guest NUMA node a virtio-mem device goes on; none without it.
  {
    std::string t = base;
    t.replace(t.find("DISABLE"), 7, "");
    t.replace(t.find("memory: {guest: 256Mi}"), 22, "memory: {guest: 256Mi, maxGuest: 1Gi}");
    const std::string x = render_text(t, {"inline", {{"root", "/pvc/root.img"}}}).xml;
    CHECK(has(x, "<maxMemory slots='1' unit='b'>1073741824</maxMemory>"));
    CHECK(has(x, "<memory unit='b'>268435456</memory>"));
    CHECK(has(x, "<cell id='0' cpus='0-3' memory='268435456' unit='b'/>"));  // maxSockets 4 by default
    if (auto errors = schema_errors(x, "max-memory")) CHECK_MESSAGE(errors->empty(), *errors);
    CHECK_FALSE(has(with(""), "<maxMemory"));
    CHECK_FALSE(has(with(""), "<numa>"));
  }

  HotplugDisk d{"hotplug-hp1", "/var/run/kubevirt/hotplug-disks/hp1.img", false, true, "sdb"};
  const std::string x = hotplug_disk_xml(d);
  CHECK(x == "<disk type='file' device='disk'>\n"
             "  <driver name='qemu' type='raw' cache='none' io='native'/>\n"
             "  <source file='/var/run/kubevirt/hotplug-disks/hp1.img'/>\n"
             "  <target dev='sdb' bus='scsi'/>\n"
             "  <readonly/>\n"
             "  <alias name='ua-hotplug-hp1'/>\n"
             "</disk>\n");
  d.block = true;
  d.readonly = false;
  d.path = "/var/run/kubevirt/hotplug-disks/hp2";
  CHECK(has(hotplug_disk_xml(d), "<disk type='block' device='disk'>"));
  CHECK(has(hotplug_disk_xml(d), "<source dev='/var/run/kubevirt/hotplug-disks/hp2'/>"));
  CHECK_FALSE(has(hotplug_disk_xml(d), "<readonly/>"));

  CHECK(free_scsi_target({}) == "sda");
  CHECK(free_scsi_target({"vda", "sda", "sdb", "sdd"}) == "sdc");
  std::vector<std::string> used;
  for (char c = 'a'; c <= 'z'; ++c) used.push_back(std::string("sd") + c);
  CHECK(free_scsi_target(used) == "sdaa");
}

TEST_CASE(
    "domain XML: the guest agent's virtio-serial channel as KubeVirt's converter writes it (no "
    "source: libvirt's)") {
  Rendered r =
      render_file({"kernel-boot.yaml",
                   {{"containerdisk", "/images/alpine.img"}, {"kernel-boot", "/kernel-root"}}});
  CHECK(has(r.xml,
            "<channel type='unix'>\n      <target type='virtio' name='org.qemu.guest_agent.0'/>\n  "
            "  </channel>"));
  if (auto errors = schema_errors(r.xml, "agent-channel")) CHECK_MESSAGE(errors->empty(), *errors);
}

TEST_CASE("domain XML: virtiofs filesystems as KubeVirt writes them: the container's socket, the name as tag, memfd shared memory") {
  Rendered r = render_file({"virtiofs-pvc-hugepages.yaml", {{"containerdisk", "/images/fedora-40.qcow2"}}});
  // converter/storage/virtiofs.go: type mount, driver virtiofs queue 1024, the socket in
  // /var/run/kubevirt/virtiofs-containers, the filesystem's name as the target dir (the tag).
  for (const char* name : {"data", "credentials"}) {
    CAPTURE(name);
    const std::string want = std::string("    <filesystem type='mount' accessmode='passthrough'>\n") +
                             "      <driver type='virtiofs' queue='1024'/>\n" +
                             "      <source socket='/var/run/kubevirt/virtiofs-containers/" + name +
                             ".sock'/>\n      <target dir='" + name + "'/>\n    </filesystem>\n";
    CHECK_MESSAGE(has(r.xml, want), r.xml);
  }
  // memory_backing.go: hugepages kept, memfd source, shared access; cpu.go's synthetic NUMA cell.
  CHECK(has(r.xml, "<hugepages><page size='2097152' unit='b'/></hugepages>"));
  CHECK(has(r.xml, "<source type='memfd'/>"));
  CHECK(has(r.xml, "<access mode='shared'/>"));
  CHECK(has(r.xml, "<cell id='0' cpus='0-1' memory='1073741824' unit='b'/>"));
  // No virtiofsd of ours: the XML names no binary for it.
  CHECK(!has(r.xml, "<binary"));
  auto errors = schema_errors(r.xml, "virtiofs");
  if (!errors) {
    chl::test::skip("virt-xml-validate not installed (libvirt-clients): schema not checked");
    return;
  }
  CHECK_MESSAGE(errors->empty(), *errors << "\n" << r.xml);
}

// The audit of the qemu-kvm table (docs/qemu/daemon.md): what it accepts the XML carries. Tablets,
// sound, watchdog, Hyper-V and the clock as KubeVirt's converter writes them
// (converter/compute/input_device.go, sound.go, watchdog.go, hypervisor_features.go, clock.go).
TEST_CASE(
    "domain XML: inputs, sound, watchdog, Hyper-V enlightenments and the clock as KubeVirt writes "
    "them, schema-valid") {
  const std::string vmi = R"(apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: devices-1, namespace: lab, uid: 0b6f5d0e-1111-4222-8333-444455556677}
spec:
  hypervisor: qemu-kvm
  domain:
    memory: {guest: 256Mi}
    features:
      hyperv:
        relaxed: {}
        vapic: {enabled: false}
        spinlocks: {}
        vpindex: {}
        synic: {}
        synictimer: {direct: {}}
        vendorid: {vendorid: KubeVirt}
    clock:
      utc: {offsetSeconds: 3600}
      timer:
        hpet: {present: false}
        rtc: {tickPolicy: catchup, track: guest}
        pit: {tickPolicy: delay}
    devices:
      autoattachPodInterface: false
      inputs:
      - {name: tablet0, type: tablet, bus: usb}
      - {name: tablet1, type: tablet, bus: virtio}
      sound: {name: audio}
      watchdog: {name: wd, i6300esb: {action: poweroff}}
      tpm: {}
      disks:
      - name: root
        blockSize: {custom: {logical: 512, physical: 4096}}
        disk: {bus: virtio, pciAddress: "0000:00:0a.0"}
  volumes:
  - name: root
    persistentVolumeClaim: {claimName: root-pvc}
)";
  Case c{"devices-1", {{"root", "/pvc/root/disk.img"}}};
  Rendered r = render_text(vmi, c);
  CHECK(has(r.xml,
            "<input type='tablet' bus='usb'>\n      <alias name='ua-tablet0'/>\n    </input>"));
  CHECK(has(r.xml,
            "<input type='tablet' bus='virtio' model='virtio'>\n      <alias name='ua-tablet1'/>"));
  CHECK(has(r.xml, "<controller type='usb' index='0' model='qemu-xhci'/>"));  // for the USB tablet
  CHECK(has(r.xml, "<sound model='ich9'>\n      <alias name='ua-audio'/>\n    </sound>"));
  CHECK(has(r.xml, "<watchdog model='i6300esb' action='poweroff'>\n      <alias name='ua-wd'/>"));
  // converter/storage/disk.go: blockSize.custom as <blockio>.
  CHECK(has(r.xml, "<blockio logical_block_size='512' physical_block_size='4096'/>"));
  // device.NewPciAddressField: the pciAddress as libvirt's <address>.
  CHECK(has(r.xml, "<address type='pci' domain='0x0000' bus='0x00' slot='0x0a' function='0x0'/>"));
  // converter/compute/tpm.go: TPM 2.0, tpm-tis, swtpm (the emulator backend).
  CHECK(has(r.xml,
            "<tpm model='tpm-tis'>\n      <backend type='emulator' version='2.0'/>\n    </tpm>"));
  CHECK(has(r.xml,
            "<hyperv mode='custom'>\n      <relaxed state='on'/>\n      <vapic state='off'/>\n"
            "      <spinlocks state='on' retries='4096'/>\n      <vpindex state='on'/>\n"
            "      <synic state='on'/>\n      <stimer state='on'>\n        <direct state='on'/>\n"
            "      </stimer>\n      <vendor_id state='on' value='KubeVirt'/>\n    </hyperv>"));
  CHECK(has(
      r.xml,
      "<clock offset='utc' adjustment='3600'>\n    <timer name='rtc' tickpolicy='catchup' "
      "track='guest' present='yes'/>\n    <timer name='pit' tickpolicy='delay' present='yes'/>\n"
      "    <timer name='hpet' present='no'/>\n  </clock>"));
  auto errors = schema_errors(r.xml, "devices-1");
  if (errors) CHECK_MESSAGE(errors->empty(), *errors << "\n" << r.xml);

  // Defaults: ich9, reset, UTC reset; a timezone; hypervPassthrough; ac97.
  const std::string other = R"(apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: devices-2, namespace: lab}
spec:
  hypervisor: qemu-kvm
  domain:
    memory: {guest: 256Mi}
    features: {hypervPassthrough: {enabled: true}}
    clock: {timezone: Europe/Paris, timer: {kvm: {}, hyperv: {present: false}}}
    devices:
      autoattachPodInterface: false
      sound: {name: snd, model: ac97}
      watchdog: {name: dog, i6300esb: {}}
      disks:
      - name: root
        disk: {bus: virtio}
  volumes:
  - name: root
    persistentVolumeClaim: {claimName: root-pvc}
)";
  Rendered o = render_text(other, {"devices-2", {{"root", "/pvc/root/disk.img"}}});
  CHECK(has(o.xml, "<sound model='ac97'>"));
  CHECK(has(o.xml, "<watchdog model='i6300esb' action='reset'>"));  // KubeVirt's default action
  CHECK(has(o.xml, "<hyperv mode='passthrough'/>"));
  CHECK(has(o.xml,
            "<clock offset='timezone' timezone='Europe/Paris'>\n    <timer name='kvmclock' "
            "present='yes'/>\n"
            "    <timer name='hypervclock' present='no'/>"));
  CHECK_FALSE(has(o.xml, "<controller type='usb'"));
  CHECK_FALSE(has(o.xml, "<input"));
  CHECK_FALSE(has(o.xml, "<tpm"));
  CHECK_FALSE(has(o.xml, "<blockio"));
  auto oerrors = schema_errors(o.xml, "devices-2");
  if (oerrors) CHECK_MESSAGE(oerrors->empty(), *oerrors << "\n" << o.xml);
  // A utc clock without an offset resets to the host's UTC at start; no clock at all: UTC.
  CHECK(has(render_file(cases()[0]).xml, "<clock offset='utc'/>"));
}

// An interface's bootOrder: PXE from the firmware. Disks and interfaces are numbered by their
// bootOrder (KubeVirt gives <boot order> to each device that has one), disks without one after.
TEST_CASE(
    "domain XML: an interface's bootOrder puts <boot order> on the interface, before or between "
    "the disks") {
  const std::string vmi = R"(apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: pxe-1, namespace: lab}
spec:
  hypervisor: qemu-kvm
  domain:
    memory: {guest: 256Mi}
    devices:
      disks:
      - name: scratch
        disk: {bus: virtio}
      - name: root
        bootOrder: 5
        disk: {bus: virtio}
      interfaces:
      - name: default
        bootOrder: 2
        pciAddress: "0000:00:0b.0"
        masquerade: {}
  networks:
  - name: default
    pod: {}
  volumes:
  - name: root
    persistentVolumeClaim: {claimName: root-pvc}
  - name: scratch
    emptyDisk: {capacity: 1Gi}
)";
  Rendered r = render_text(vmi, {"pxe-1", {{"root", "/pvc/root/disk.img"}}});
  CAPTURE(r.xml);
  REQUIRE(r.plan.nics.size() == 1);
  // The interface boots first (2 < 5), then root, then scratch (no bootOrder).
  const auto nic = r.xml.find("<interface");
  REQUIRE(nic != std::string::npos);
  CHECK(r.xml.find("<boot order='1'/>", nic) < r.xml.find("</interface>", nic));
  const auto root = r.xml.find("<alias name='ua-root'/>");
  const auto scratch = r.xml.find("<alias name='ua-scratch'/>");
  REQUIRE(root != std::string::npos);
  REQUIRE(scratch != std::string::npos);
  CHECK(r.xml.rfind("<boot order='2'/>", root) != std::string::npos);
  CHECK(r.xml.rfind("<boot order='2'/>", root) > r.xml.rfind("<disk", root));
  CHECK(r.xml.rfind("<boot order='3'/>", scratch) > r.xml.rfind("<disk", scratch));
  CHECK(count_of(r.xml, "<boot order=") == 3);
  CHECK(r.xml.find("<address type='pci' domain='0x0000' bus='0x00' slot='0x0b' function='0x0'/>", nic) <
        r.xml.find("</interface>", nic));
  auto errors = schema_errors(r.xml, "pxe-1");
  if (errors) CHECK_MESSAGE(errors->empty(), *errors << "\n" << r.xml);
  // Without an interface's bootOrder, the disks keep the plan's numbering.
  Rendered plain = render_file(cases()[0]);
  CHECK(has(plain.xml, "<boot order='1'/>"));
  CHECK(count_of(plain.xml, "<boot order=") == plain.plan.disks.size());
}

// ioThreadsPolicy and dedicatedIOThread as KubeVirt assigns them (converter/iothreads/iothreads.go,
// storage/disk.go assignDiskIOThread): auto threads round robin over the virtio disks in spec
// order, dedicated ones numbered after them.
TEST_CASE(
    "domain XML: ioThreadsPolicy shared and auto, dedicatedIOThread, as KubeVirt numbers the "
    "threads") {
  auto text = [](const std::string& policy) {
    return R"(apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: io-1, namespace: lab}
spec:
  hypervisor: qemu-kvm
  domain:
    )" + policy +
           R"(
    resources: {requests: {cpu: "2", memory: 256Mi}}
    devices:
      autoattachPodInterface: false
      disks:
      - {name: a, disk: {bus: virtio}}
      - {name: b, dedicatedIOThread: true, disk: {bus: virtio}}
      - {name: c, disk: {bus: virtio}}
      - {name: d, disk: {bus: virtio}}
      - {name: e, dedicatedIOThread: true, disk: {bus: scsi}}
  volumes:
  - {name: a, emptyDisk: {capacity: 1Gi}}
  - {name: b, emptyDisk: {capacity: 1Gi}}
  - {name: c, emptyDisk: {capacity: 1Gi}}
  - {name: d, emptyDisk: {capacity: 1Gi}}
  - {name: e, emptyDisk: {capacity: 1Gi}}
)";
  };
  auto thread_of = [](const std::string& xml, const std::string& disk) {
    const auto alias = xml.find("<alias name='ua-" + disk + "'/>");
    const auto start = xml.rfind("<disk", alias);
    const auto driver = xml.substr(start, alias - start);
    const auto at = driver.find("iothread='");
    return at == std::string::npos ? std::string("none")
                                   : driver.substr(at + 10, driver.find('\'', at + 10) - at - 10);
  };
  // shared: a pool of 1, limit 1: the dedicated disks (2) leave 1 auto thread -> 3 in all; the
  // dedicated virtio disk gets 2, the scsi one puts the controller on the auto thread.
  Rendered s = render_text(text("ioThreadsPolicy: shared"), {"io-shared", {}});
  CAPTURE(s.xml);
  CHECK(has(s.xml, "<iothreads>3</iothreads>"));
  CHECK(thread_of(s.xml, "a") == "1");
  CHECK(thread_of(s.xml, "b") == "2");
  CHECK(thread_of(s.xml, "c") == "1");
  CHECK(thread_of(s.xml, "d") == "1");
  CHECK(thread_of(s.xml, "e") == "none");  // scsi: the controller's thread
  CHECK(has(s.xml,
            "<controller type='scsi' index='0' model='virtio-scsi'>\n      <driver iothread='1' "
            "queues='2'/>"));
  auto errors = schema_errors(s.xml, "io-shared");
  if (errors) CHECK_MESSAGE(errors->empty(), *errors << "\n" << s.xml);
  // auto with 2 CPUs: a limit of 4, 3 auto disks + 2 dedicated > 4 -> 2 auto threads, 4 in all.
  Rendered a = render_text(text("ioThreadsPolicy: auto"), {"io-auto", {}});
  CAPTURE(a.xml);
  CHECK(has(a.xml, "<iothreads>4</iothreads>"));
  CHECK(thread_of(a.xml, "a") == "1");
  CHECK(thread_of(a.xml, "b") == "3");
  CHECK(thread_of(a.xml, "c") == "2");
  CHECK(thread_of(a.xml, "d") == "1");
  // No policy and no dedicated disk: no I/O threads.
  Rendered none = render_file(cases()[0]);
  CHECK_FALSE(has(none.xml, "<iothreads>"));
  CHECK_FALSE(has(none.xml, "iothread="));
}

// useVirtioTransitional as KubeVirt's converter applies it (converter/converter.go virtioModel).
TEST_CASE("domain XML: useVirtioTransitional makes every virtio device transitional, schema-valid") {
  const std::string vmi = R"(apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: legacy-1, namespace: lab}
spec:
  hypervisor: qemu-kvm
  domain:
    memory: {guest: 256Mi}
    devices:
      useVirtioTransitional: true
      rng: {}
      disks:
      - {name: root, disk: {bus: virtio}}
      - {name: data, disk: {bus: sata}}
      interfaces:
      - {name: default, masquerade: {}}
  networks:
  - {name: default, pod: {}}
  volumes:
  - {name: root, persistentVolumeClaim: {claimName: root-pvc}}
  - {name: data, emptyDisk: {capacity: 1Gi}}
)";
  Rendered r = render_text(vmi, {"legacy-1", {{"root", "/pvc/root/disk.img"}}});
  CAPTURE(r.xml);
  CHECK(has(r.xml, "<disk type='file' device='disk' model='virtio-transitional'>"));
  CHECK(count_of(r.xml, "device='disk' model='virtio-transitional'") == 1);  // not the SATA disk
  CHECK(has(r.xml, "<model type='virtio-transitional'/>"));
  CHECK(has(r.xml, "<controller type='scsi' index='0' model='virtio-transitional'/>"));
  CHECK(has(r.xml, "<controller type='virtio-serial' index='0' model='virtio-transitional'/>"));
  CHECK(has(r.xml, "<rng model='virtio-transitional'>"));
  CHECK(has(r.xml, "<memballoon model='virtio-transitional'"));
  auto errors = schema_errors(r.xml, "legacy-1");
  if (errors) CHECK_MESSAGE(errors->empty(), *errors << "\n" << r.xml);
  // Without it: libvirt's modern defaults.
  Rendered modern = render_file(cases()[0]);
  CHECK_FALSE(has(modern.xml, "transitional"));
}

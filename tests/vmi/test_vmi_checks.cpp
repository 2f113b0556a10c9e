// Parsing and validating VMIs: bad input named by field path, every refusal of a feature the
// hypervisor cannot serve, all problems at once, and the capability tables themselves.
#include <doctest/doctest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <sstream>

#include "vmi/hypervisor_capabilities.hpp"
#include "vmi/validator.hpp"
#include "vmi/parser.hpp"
#include "common/log.hpp"
#include "tests/support/test_support.hpp"

using namespace chl::vmi;

namespace {

constexpr const char* kBase = R"(
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: testvm
  namespace: default
spec:
  domain:
    resources:
      requests:
        memory: 1Gi
    devices:
      disks:
      - name: root
        disk:
          bus: virtio
      interfaces:
      - name: default
        masquerade: {}
  networks:
  - name: default
    pod: {}
  volumes:
  - name: root
    containerDisk:
      image: quay.io/containerdisks/fedora:40
)";

// The base VMI changed by `edit`, as YAML text.
std::string vmi_with(const std::function<void(YAML::Node&)>& edit) {
  YAML::Node n = YAML::Load(kBase);
  edit(n);
  YAML::Emitter e;
  e << n;
  return e.c_str();
}

Violations problems(const std::string& text, const char* hypervisor = "cloud-hypervisor") {
  auto r = check_vmi(text, hypervisor);
  if (r) return {};
  return r.error();
}

std::string dump(const Violations& v) {
  std::ostringstream s;
  for (const auto& x : v) s << "  " << to_string(x) << "\n";
  return s.str();
}

// True when some violation has exactly `path` and a message containing `text`.
bool has(const Violations& v, const std::string& path, const std::string& text = "") {
  return std::any_of(v.begin(), v.end(), [&](const Violation& x) {
    return x.path == path && x.message.find(text) != std::string::npos;
  });
}

}  // namespace

TEST_CASE("the base VMI is valid on both hypervisors") {
  auto ch = check_vmi(kBase, "cloud-hypervisor");
  REQUIRE_MESSAGE(ch.has_value(), dump(ch ? Violations{} : ch.error()));
  CHECK(ch->caps->name == "cloud-hypervisor");
  CHECK(ch->vmi.metadata.name == "testvm");
  CHECK(guest_memory_bytes(ch->vmi).value() == 1LL << 30);
  auto q = check_vmi(kBase, "qemu-kvm");
  REQUIRE(q.has_value());
  CHECK(q->caps->name == "qemu-kvm");
}

TEST_CASE("spec.hypervisor wins over the launcher default") {
  auto r = check_vmi(vmi_with([](YAML::Node& n) { n["spec"]["hypervisor"] = "qemu-kvm"; }),
                     "cloud-hypervisor");
  REQUIRE(r.has_value());
  CHECK(r->caps->name == "qemu-kvm");
  auto bad = problems(vmi_with([](YAML::Node& n) { n["spec"]["hypervisor"] = "xen"; }));
  CHECK(has(bad, "spec.hypervisor",
            "unknown hypervisor \"xen\"; expected one of cloud-hypervisor, qemu-kvm"));
  auto flag = problems(kBase, "firecracker");
  CHECK(has(flag, "--hypervisor", "unknown hypervisor \"firecracker\""));
}

TEST_CASE("malformed YAML is reported with line and column") {
  auto v = problems(
      "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nspec:\n  domain: [1, 2\n");
  REQUIRE(v.size() == 1);
  CHECK(v[0].path.empty());
  CHECK_MESSAGE(v[0].message.find("not valid YAML or JSON: line ") == 0, v[0].message);
  CHECK(v[0].message.find("column") != std::string::npos);
}

TEST_CASE("malformed JSON is reported with line and column") {
  // A missing comma after "kind".
  auto v = problems(
      "{\n  \"apiVersion\": \"kubevirt.io/v1\",\n  \"kind\": \"VirtualMachineInstance\"\n  "
      "\"spec\": {}\n}\n");
  REQUIRE(v.size() == 1);
  CHECK_MESSAGE(v[0].message.find("not valid YAML or JSON: line 4, column") == 0, v[0].message);
  auto bracket = problems(
      "{\"apiVersion\": \"kubevirt.io/v1\",\n \"spec\": {\"domain\": {\"cpu\": [1, 2}}\n}\n");
  REQUIRE(bracket.size() == 1);
  CHECK_MESSAGE(bracket[0].message.find("line 2, column") != std::string::npos, bracket[0].message);
}

TEST_CASE("JSON manifests parse like YAML ones") {
  auto r = check_vmi(R"({"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance",
    "metadata":{"name":"j"},"spec":{"domain":{"resources":{"requests":{"memory":"64Mi"}},
    "devices":{"disks":[{"name":"d","disk":{}}]}},"volumes":[{"name":"d","emptyDisk":{"capacity":"1Gi"}}]}})",
                     "cloud-hypervisor");
  REQUIRE_MESSAGE(r.has_value(), dump(r ? Violations{} : r.error()));
  CHECK(r->vmi.spec.volumes[0].capacity->value == 1LL << 30);
}

TEST_CASE("wrong kind or apiVersion stops at once") {
  auto kind = problems(vmi_with([](YAML::Node& n) { n["kind"] = "VirtualMachine"; }));
  CHECK(has(
      kind, "kind",
      "expected VirtualMachineInstance, got VirtualMachine (use the VMI in its spec.template)"));
  auto api = problems(vmi_with([](YAML::Node& n) { n["apiVersion"] = "kubevirt.io/v2"; }));
  CHECK(has(api, "apiVersion", "unsupported kubevirt.io/v2; expected kubevirt.io/v1"));
  auto none = problems(vmi_with([](YAML::Node& n) { n.remove("kind"); }));
  CHECK(has(none, "kind", "missing"));
  CHECK(problems("").size() == 1);
  CHECK(has(problems("- a\n- b\n"), "", "expected a VirtualMachineInstance object, got a list"));
}

TEST_CASE("the first VirtualMachineInstance of a multi-document file is used") {
  std::string text =
      "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\n" + std::string(kBase);
  auto r = check_vmi(text, "cloud-hypervisor");
  REQUIRE(r.has_value());
  CHECK(r->vmi.metadata.name == "testvm");
}

TEST_CASE("missing spec.domain is named") {
  CHECK(has(problems(vmi_with([](YAML::Node& n) { n["spec"].remove("domain"); })), "spec.domain",
            "missing"));
  CHECK(has(problems(vmi_with([](YAML::Node& n) { n.remove("spec"); })), "spec", "missing"));
}

TEST_CASE("a disk whose volume does not exist is named") {
  auto v = problems(vmi_with([](YAML::Node& n) {
    n["spec"]["domain"]["devices"]["disks"].push_back(YAML::Load("{name: data, disk: {}}"));
  }));
  CHECK_MESSAGE(
      has(v, "spec.domain.devices.disks[1].name", "no volume named \"data\" in spec.volumes"),
      dump(v));
}

TEST_CASE("duplicate names are refused with where the first one is") {
  auto v = problems(vmi_with([](YAML::Node& n) {
    n["spec"]["domain"]["devices"]["disks"].push_back(YAML::Load("{name: root, disk: {}}"));
    n["spec"]["volumes"].push_back(YAML::Load("{name: root, emptyDisk: {capacity: 1Gi}}"));
    n["spec"]["domain"]["devices"]["interfaces"].push_back(
        YAML::Load("{name: default, bridge: {}}"));
    n["spec"]["networks"].push_back(YAML::Load("{name: default, pod: {}}"));
  }));
  CHECK_MESSAGE(
      has(v, "spec.domain.devices.disks[1].name", "duplicate name \"root\" (also disks[0])"),
      dump(v));
  CHECK(has(v, "spec.volumes[1].name", "duplicate name \"root\" (also volumes[0])"));
  CHECK(has(v, "spec.domain.devices.interfaces[1].name", "duplicate name \"default\""));
  CHECK(has(v, "spec.networks[1].name", "duplicate name \"default\""));
}

TEST_CASE("names must be DNS-1123 labels without / or ..") {
  auto v = problems(vmi_with([](YAML::Node& n) {
    n["spec"]["volumes"][0]["name"] = "Root_Disk";
    n["spec"]["domain"]["devices"]["disks"][0]["name"] = "Root_Disk";
    n["spec"]["domain"]["devices"]["interfaces"][0]["name"] = "../etc";
    n["spec"]["networks"][0]["name"] = "a/b";
    n["metadata"]["name"] = "vm/../x";
  }));
  CHECK_MESSAGE(has(v, "spec.volumes[0].name", "\"Root_Disk\" is not a valid name"), dump(v));
  CHECK(has(v, "spec.domain.devices.disks[0].name", "is not a valid name"));
  CHECK(has(v, "spec.domain.devices.interfaces[0].name", "must not contain '/' or '..'"));
  CHECK(has(v, "spec.networks[0].name", "must not contain '/' or '..'"));
  CHECK(has(v, "metadata.name", "must not contain '/' or '..'"));
  auto long_name = problems(vmi_with([](YAML::Node& n) {
    n["spec"]["volumes"][0]["name"] = std::string(64, 'a');
    n["spec"]["domain"]["devices"]["disks"][0]["name"] = std::string(64, 'a');
  }));
  CHECK(has(long_name, "spec.volumes[0].name", "not a valid name"));
  CHECK(has(problems(vmi_with([](YAML::Node& n) { n["metadata"].remove("name"); })),
            "metadata.name", "required"));
  CHECK(is_dns1123_subdomain("vm.example-1"));
  CHECK(!is_dns1123_subdomain("vm..x"));
  CHECK(is_dns1123_label("a-1"));
  CHECK(!is_dns1123_label("-a"));
}

TEST_CASE("absurd sizes are refused") {
  auto zero = problems(vmi_with(
      [](YAML::Node& n) { n["spec"]["domain"]["resources"]["requests"]["memory"] = "0"; }));
  CHECK(has(zero, "spec.domain.resources.requests.memory", "must be positive, got 0"));
  auto neg = problems(vmi_with(
      [](YAML::Node& n) { n["spec"]["domain"]["resources"]["requests"]["memory"] = "-1Gi"; }));
  CHECK(has(neg, "spec.domain.resources.requests.memory", "must be positive, got -1Gi"));
  auto huge =
      problems(vmi_with([](YAML::Node& n) { n["spec"]["domain"]["memory"]["guest"] = "17Ti"; }));
  CHECK(has(huge, "spec.domain.memory.guest", "17Ti is more than the 16Ti a guest may have"));
  CHECK(problems(vmi_with([](YAML::Node& n) {
          n["spec"]["domain"]["memory"]["guest"] = "16Ti";
        })).empty());
  auto disk = problems(vmi_with([](YAML::Node& n) {
    n["spec"]["volumes"][0] = YAML::Load("{name: root, emptyDisk: {capacity: '0'}}");
  }));
  CHECK(has(disk, "spec.volumes[0].emptyDisk.capacity", "must be positive"));
  auto big_disk = problems(vmi_with([](YAML::Node& n) {
    n["spec"]["volumes"][0] = YAML::Load("{name: root, emptyDisk: {capacity: 1Ei}}");
  }));
  CHECK(has(big_disk, "spec.volumes[0].emptyDisk.capacity", "more than the 256Ti"));
  auto no_mem = problems(vmi_with([](YAML::Node& n) { n["spec"]["domain"].remove("resources"); }));
  CHECK(has(no_mem, "spec.domain.resources.requests.memory", "missing"));
}

TEST_CASE("more vCPUs than the hypervisor's maximum are refused") {
  auto v = problems(vmi_with([](YAML::Node& n) {
    n["spec"]["domain"]["cpu"] = YAML::Load("{sockets: 4, cores: 32, threads: 2}");
  }));
  CHECK_MESSAGE(has(v, "spec.domain.cpu",
                    "256 vCPUs (sockets 4 x cores 32 x threads 2) is more than cloud-hypervisor's "
                    "maximum of 254"),
                dump(v));
  auto q = problems(vmi_with([](YAML::Node& n) {
                      n["spec"]["domain"]["cpu"] =
                          YAML::Load("{sockets: 4, cores: 32, threads: 2}");
                    }),
                    "qemu-kvm");
  CHECK(q.empty());
  auto cpu_req = problems(
      vmi_with([](YAML::Node& n) { n["spec"]["domain"]["resources"]["requests"]["cpu"] = "300"; }));
  CHECK(has(cpu_req, "spec.domain.cpu", "300 vCPUs"));
}

TEST_CASE("unparseable quantities and wrong types name their field and line") {
  auto v = problems(vmi_with([](YAML::Node& n) {
    n["spec"]["domain"]["resources"]["requests"]["memory"] = "lots";
    n["spec"]["domain"]["cpu"]["cores"] = "two";
    n["spec"]["domain"]["devices"]["rng"] = "yes please";
    n["spec"]["domain"]["devices"]["autoattachSerialConsole"] = "maybe";
  }));
  CHECK_MESSAGE(
      has(v, "spec.domain.resources.requests.memory", "quantity \"lots\": expected a number"),
      dump(v));
  CHECK(has(v, "spec.domain.resources.requests.memory", "(line "));
  CHECK(has(v, "spec.domain.cpu.cores", "expected an integer, got \"two\""));
  CHECK(has(v, "spec.domain.devices.rng", "expected an object"));
  CHECK(has(v, "spec.domain.devices.autoattachSerialConsole", "expected true or false"));
  // The bad memory quantity is not also reported as "missing".
  CHECK(std::count_if(v.begin(), v.end(), [](const Violation& x) {
          return x.path == "spec.domain.resources.requests.memory";
        }) == 1);
}

TEST_CASE("unknown fields are ignored") {
  auto r = check_vmi(vmi_with([](YAML::Node& n) {
                       n["spec"]["domain"]["devices"]["fancyNewDevice"] = YAML::Load("{on: true}");
                       n["spec"]["nodeSelector"] = YAML::Load("{a: b}");
                       n["status"] = YAML::Load("{phase: Running}");
                       n["spec"]["volumes"][0]["containerDisk"]["futureField"] = 1;
                     }),
                     "cloud-hypervisor");
  CHECK(r.has_value());
}

TEST_CASE("each ignored unknown field gets a debug log line naming its path") {
  std::ostringstream out;
  auto& logger = chl::common::log::logger();
  auto saved = logger;
  logger = std::make_shared<spdlog::logger>("test",
                                            std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
  logger->set_level(spdlog::level::debug);
  logger->set_pattern("%l %v");
  auto r = parse_vmi(vmi_with([](YAML::Node& n) {
    n["spec"]["domain"]["devices"]["fancyNewDevice"] = YAML::Load("{on: true}");
    n["spec"]["volumes"][0]["containerDisk"]["futureField"] = 1;
  }));
  logger->flush();
  logger = saved;
  CHECK(r.problems.empty());
  CHECK_MESSAGE(
      out.str().find("debug ignoring unknown field spec.domain.devices.fancyNewDevice\n") !=
          std::string::npos,
      out.str());
  CHECK(
      out.str().find("debug ignoring unknown field spec.volumes[0].containerDisk.futureField\n") !=
      std::string::npos);
}

TEST_CASE("every problem is listed at once") {
  auto v = problems(vmi_with([](YAML::Node& n) {
    auto d = n["spec"]["domain"];
    d["devices"]["disks"][0]["cdrom"] = YAML::Load("{bus: sata}");
    d["devices"]["disks"][0].remove("disk");
    d["devices"]["interfaces"][0]["model"] = "e1000";
    d["devices"]["autoattachGraphicsDevice"] = true;
    d["cpu"]["model"] = "Skylake-Server";
    d["firmware"]["bootloader"]["efi"] = YAML::Load("{}");
    d["resources"]["requests"]["memory"] = "0";
  }));
  CHECK_MESSAGE(v.size() >= 6, dump(v));
  CHECK(has(v, "spec.domain.devices.disks[0].cdrom",
            "cloud-hypervisor has no CD-ROM device; attach the volume as a disk with bus virtio"));
  CHECK(has(v, "spec.domain.devices.interfaces[0].model", "only virtio-net"));
  CHECK(has(v, "spec.domain.devices.autoattachGraphicsDevice",
            "set autoattachGraphicsDevice: false"));
  CHECK(has(v, "spec.domain.cpu.model", "named CPU model"));
  CHECK(has(v, "spec.domain.firmware.bootloader.efi.secureBoot", "KubeVirt defaults it to true"));
  CHECK(has(v, "spec.domain.resources.requests.memory", "must be positive"));
}

// One refused feature per row: the edit, the field path, a piece of the reason.
struct Refusal {
  const char* name;
  std::function<void(YAML::Node&)> edit;
  const char* path;
  const char* reason;
  // false: refused on qemu-kvm too (architecture, not wired by run, or not rendered by the
  // libvirt path's domain XML: the qemu-kvm refusals test below names each reason)
  bool qemu_serves = true;
};

TEST_CASE("cloud-hypervisor refuses what it cannot serve, qemu-kvm serves it") {
  const std::vector<Refusal> rows = {
      {"cdrom",
       [](YAML::Node& n) {
         auto d = n["spec"]["domain"]["devices"]["disks"][0];
         d.remove("disk");
         d["cdrom"] = YAML::Load("{bus: sata}");
       },
       "spec.domain.devices.disks[0].cdrom", "no CD-ROM device"},
      {"lun",
       [](YAML::Node& n) {
         auto d = n["spec"]["domain"]["devices"]["disks"][0];
         d.remove("disk");
         d["lun"] = YAML::Load("{}");
       },
       "spec.domain.devices.disks[0].lun", "no SCSI LUN passthrough"},
      {"scsi bus",
       [](YAML::Node& n) { n["spec"]["domain"]["devices"]["disks"][0]["disk"]["bus"] = "scsi"; },
       "spec.domain.devices.disks[0].disk.bus", "no SCSI controller"},
      {"usb bus",
       [](YAML::Node& n) { n["spec"]["domain"]["devices"]["disks"][0]["disk"]["bus"] = "usb"; },
       "spec.domain.devices.disks[0].disk.bus", "no USB controller"},
      {"e1000",
       [](YAML::Node& n) { n["spec"]["domain"]["devices"]["interfaces"][0]["model"] = "e1000"; },
       "spec.domain.devices.interfaces[0].model", "only virtio-net NICs"},
      {"graphics",
       [](YAML::Node& n) { n["spec"]["domain"]["devices"]["autoattachGraphicsDevice"] = true; },
       "spec.domain.devices.autoattachGraphicsDevice", "no graphics device"},
      {"inputs",
       [](YAML::Node& n) {
         n["spec"]["domain"]["devices"]["inputs"] =
             YAML::Load("[{name: tablet, type: tablet, bus: usb}]");
       },
       "spec.domain.devices.inputs", "no input devices"},
      {"sound",
       [](YAML::Node& n) { n["spec"]["domain"]["devices"]["sound"] = YAML::Load("{name: audio}"); },
       "spec.domain.devices.sound", "no sound device"},
      {"usb redirection",
       [](YAML::Node& n) {
         n["spec"]["domain"]["devices"]["clientPassthrough"] = YAML::Load("{}");
       },
       "spec.domain.devices.clientPassthrough", "no USB controller", false},
      {"named model", [](YAML::Node& n) { n["spec"]["domain"]["cpu"]["model"] = "Haswell"; },
       "spec.domain.cpu.model", "cannot emulate a named CPU model"},
      {"cpu features",
       [](YAML::Node& n) {
         n["spec"]["domain"]["cpu"]["features"] = YAML::Load("[{name: vmx, policy: disable}]");
       },
       "spec.domain.cpu.features", "cannot add or remove CPU features"},
      {"timer",
       [](YAML::Node& n) {
         n["spec"]["domain"]["clock"] = YAML::Load("{utc: {}, timer: {hpet: {present: false}}}");
       },
       "spec.domain.clock.timer", "no timer selection"},
      {"timezone",
       [](YAML::Node& n) { n["spec"]["domain"]["clock"] = YAML::Load("{timezone: Europe/Paris}"); },
       "spec.domain.clock.timezone", "UTC only"},
      {"clock offset",
       [](YAML::Node& n) {
         n["spec"]["domain"]["clock"] = YAML::Load("{utc: {offsetSeconds: 3600}}");
       },
       "spec.domain.clock.utc.offsetSeconds", "cannot be offset"},
      {"smm", [](YAML::Node& n) { n["spec"]["domain"]["features"] = YAML::Load("{smm: {}}"); },
       "spec.domain.features.smm", "no System Management Mode"},
      {"kvm hidden",
       [](YAML::Node& n) { n["spec"]["domain"]["features"] = YAML::Load("{kvm: {hidden: true}}"); },
       "spec.domain.features.kvm.hidden", "cannot hide KVM"},
      {"pvspinlock",
       [](YAML::Node& n) { n["spec"]["domain"]["features"] = YAML::Load("{pvspinlock: {}}"); },
       "spec.domain.features.pvspinlock", "spinlock"},
      {"acpi disabled",
       [](YAML::Node& n) {
         n["spec"]["domain"]["features"] = YAML::Load("{acpi: {enabled: false}}");
       },
       "spec.domain.features.acpi", "always exposes ACPI"},
      {"secure boot by default",
       [](YAML::Node& n) {
         n["spec"]["domain"]["firmware"] = YAML::Load("{bootloader: {efi: {}}}");
         n["spec"]["domain"]["features"] = YAML::Load("{smm: {enabled: true}}");
       },
       "spec.domain.firmware.bootloader.efi.secureBoot", "no Secure Boot"},
      {"efi persistent",
       [](YAML::Node& n) {
         n["spec"]["domain"]["firmware"] =
             YAML::Load("{bootloader: {efi: {secureBoot: false, persistent: true}}}");
       },
       "spec.domain.firmware.bootloader.efi.persistent", "no persistent EFI variable store", false},
      {"arm machine",
       [](YAML::Node& n) { n["spec"]["domain"]["machine"] = YAML::Load("{type: virt}"); },
       "spec.domain.machine.type", "machine type for aarch64", false},
      {"s390x machine",
       [](YAML::Node& n) {
         n["spec"]["domain"]["machine"] = YAML::Load("{type: s390-ccw-virtio}");
       },
       "spec.domain.machine.type", "machine type for s390x", false},
      {"watchdog",
       [](YAML::Node& n) {
         n["spec"]["domain"]["devices"]["watchdog"] =
             YAML::Load("{name: wd, i6300esb: {action: poweroff}}");
       },
       "spec.domain.devices.watchdog", "no i6300esb watchdog"},
      {"tpm", [](YAML::Node& n) { n["spec"]["domain"]["devices"]["tpm"] = YAML::Load("{}"); },
       "spec.domain.devices.tpm", "swtpm"},
      {"vgpu display",
       [](YAML::Node& n) {
         n["spec"]["domain"]["devices"]["gpus"] = YAML::Load(
             "[{name: gpu1, deviceName: nvidia.com/GRID_T4-1Q, virtualGPUOptions: {display: {}}}]");
       },
       "spec.domain.devices.gpus[0].virtualGPUOptions.display", "no display for a vGPU"},
      {"slirp",
       [](YAML::Node& n) {
         n["spec"]["domain"]["devices"]["interfaces"][0] = YAML::Load("{name: default, slirp: {}}");
       },
       "spec.domain.devices.interfaces[0].slirp", "only in QEMU",
       false},  // nor on qemu-kvm: run cannot wire it (network/plan.cpp), so validate refuses it
      {"nic boot order",
       [](YAML::Node& n) { n["spec"]["domain"]["devices"]["interfaces"][0]["bootOrder"] = 2; },
       "spec.domain.devices.interfaces[0].bootOrder", "cannot boot from the network"},
      {"disk pci address",
       [](YAML::Node& n) {
         n["spec"]["domain"]["devices"]["disks"][0]["disk"]["pciAddress"] = "0000:00:05.0";
       },
       "spec.domain.devices.disks[0].disk.pciAddress", "assigns PCI addresses itself"},
      {"launch security",
       [](YAML::Node& n) { n["spec"]["domain"]["launchSecurity"] = YAML::Load("{sev: {}}"); },
       "spec.domain.launchSecurity", "confidential", false},
      {"virtio transitional",
       [](YAML::Node& n) { n["spec"]["domain"]["devices"]["useVirtioTransitional"] = true; },
       "spec.domain.devices.useVirtioTransitional", "modern"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.name);
    const std::string text = vmi_with(row.edit);
    auto ch = problems(text, "cloud-hypervisor");
    CHECK_MESSAGE(has(ch, row.path, row.reason), row.name << ":\n" << dump(ch));
    auto q = problems(text, "qemu-kvm");
    CHECK_MESSAGE(has(q, row.path, "") != row.qemu_serves, row.name << " on qemu-kvm:\n"
                                                                    << dump(q));
  }
}

// The audit of the qemu-kvm table against drivers/libvirt/domain_xml.cpp: what the libvirt path
// does not render is refused naming the field and that the libvirt path lacks it, never accepted
// and left out of the domain.
TEST_CASE("qemu-kvm refuses what its libvirt path does not render, naming the field") {
  struct Row {
    const char* name;
    std::function<void(YAML::Node&)> edit;
    const char* path;
    const char* element;  // what the domain XML lacks, named in the reason
  };
  const std::vector<Row> rows = {
      {"disk blockSize matchVolume",
       [](YAML::Node& n) {
         n["spec"]["domain"]["devices"]["disks"][0]["blockSize"] = YAML::Load("{matchVolume: {}}");
       },
       "spec.domain.devices.disks[0].blockSize.matchVolume", "<blockio>"},
      {"disk blockSize discardGranularity",
       [](YAML::Node& n) {
         n["spec"]["domain"]["devices"]["disks"][0]["blockSize"] =
             YAML::Load("{custom: {logical: 512, physical: 4096, discardGranularity: 4096}}");
       },
       "spec.domain.devices.disks[0].blockSize.custom.discardGranularity", "libvirt"},
      {"sriov",
       [](YAML::Node& n) {
         n["spec"]["domain"]["devices"]["interfaces"][0] = YAML::Load("{name: default, sriov: {}}");
       },
       "spec.domain.devices.interfaces[0].sriov", "<hostdev>"},
      {"clientPassthrough",
       [](YAML::Node& n) {
         n["spec"]["domain"]["devices"]["clientPassthrough"] = YAML::Load("{}");
       },
       "spec.domain.devices.clientPassthrough", "<redirdev>"},
      {"downwardMetrics",
       [](YAML::Node& n) { n["spec"]["domain"]["devices"]["downwardMetrics"] = YAML::Load("{}"); },
       "spec.domain.devices.downwardMetrics", "vhostmd"},
      {"efi persistent",
       [](YAML::Node& n) {
         n["spec"]["domain"]["firmware"] =
             YAML::Load("{bootloader: {efi: {secureBoot: false, persistent: true}}}");
       },
       "spec.domain.firmware.bootloader.efi.persistent", "does not outlive the pod"},
      {"launchSecurity",
       [](YAML::Node& n) { n["spec"]["domain"]["launchSecurity"] = YAML::Load("{sev: {}}"); },
       "spec.domain.launchSecurity", "<launchSecurity>"},
      {"ioThreadsPolicy: supplementalPool",
       [](YAML::Node& n) {
         n["spec"]["domain"]["ioThreadsPolicy"] = "supplementalPool";
         n["spec"]["domain"]["ioThreads"] = YAML::Load("{supplementalPoolThreadCount: 4}");
       },
       "spec.domain.ioThreadsPolicy", "<driver><iothreads>"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.name);
    auto q = problems(vmi_with(row.edit), "qemu-kvm");
    CHECK_MESSAGE(has(q, row.path, "libvirt path"), dump(q));
    CHECK_MESSAGE(has(q, row.path, row.element), dump(q));
  }
  // A LUN is served as a SCSI disk: accepted with a warning that says so.
  auto lun = check_vmi(vmi_with([](YAML::Node& n) {
                         auto d = n["spec"]["domain"]["devices"]["disks"][0];
                         d.remove("disk");
                         d["lun"] = YAML::Load("{}");
                       }),
                       "qemu-kvm");
  REQUIRE_MESSAGE(lun.has_value(), dump(lun ? Violations{} : lun.error()));
  CHECK(has(lun->warnings, "spec.domain.devices.disks[0].lun", "without SCSI command passthrough"));
}

TEST_CASE("inputs, sound, watchdog and Hyper-V values qemu-kvm cannot render are named by field") {
  auto v = problems(vmi_with([](YAML::Node& n) {
                      auto dev = n["spec"]["domain"]["devices"];
                      dev["inputs"] = YAML::Load(
                          "[{name: k, type: keyboard}, {name: t, type: tablet, bus: ps2}]");
                      dev["sound"] = YAML::Load("{name: audio, model: sb16}");
                      dev["watchdog"] = YAML::Load("{name: wd, i6300esb: {action: pause}}");
                      n["spec"]["domain"]["features"] =
                          YAML::Load("{hyperv: {relaxed: {}, tlbflush: {direct: {}}}}");
                    }),
                    "qemu-kvm");
  CHECK_MESSAGE(has(v, "spec.domain.devices.inputs[0].type", "expected tablet"), dump(v));
  CHECK(has(v, "spec.domain.devices.inputs[1].bus", "expected usb or virtio"));
  CHECK(has(v, "spec.domain.devices.sound.model", "expected ich9 or ac97"));
  CHECK(has(v, "spec.domain.devices.watchdog.i6300esb.action",
            "expected poweroff, reset or shutdown"));
  CHECK(has(v, "spec.domain.features.hyperv.tlbflush", "direct and extended are not served"));
  CHECK_FALSE(has(v, "spec.domain.features.hyperv"));
  // A TPM is served, a persistent one is not (no backend-storage volume); enabled: false is none.
  auto tpm = problems(vmi_with([](YAML::Node& n) {
                        n["spec"]["domain"]["devices"]["tpm"] = YAML::Load("{persistent: true}");
                      }),
                      "qemu-kvm");
  CHECK_MESSAGE(has(tpm, "spec.domain.devices.tpm.persistent", "no TPM state beyond the pod"),
                dump(tpm));
  CHECK_FALSE(has(tpm, "spec.domain.devices.tpm"));
  auto no_tpm = check_vmi(vmi_with([](YAML::Node& n) {
                            n["spec"]["domain"]["devices"]["tpm"] = YAML::Load("{enabled: false}");
                          }),
                          "cloud-hypervisor");
  REQUIRE_MESSAGE(no_tpm.has_value(), dump(no_tpm ? Violations{} : no_tpm.error()));
  CHECK_FALSE(no_tpm->vmi.spec.domain.devices.tpm);
  // pciAddress: KubeVirt's format, and on a disk only with bus virtio.
  auto pci = problems(vmi_with([](YAML::Node& n) {
                        auto dev = n["spec"]["domain"]["devices"];
                        dev["disks"][0]["disk"] = YAML::Load("{bus: sata, pciAddress: 0000:00:0a.0}");
                        dev["interfaces"][0]["pciAddress"] = "00:0a.0";
                      }),
                      "qemu-kvm");
  CHECK_MESSAGE(has(pci, "spec.domain.devices.disks[0].disk.pciAddress", "needs bus virtio"), dump(pci));
  CHECK(has(pci, "spec.domain.devices.interfaces[0].pciAddress", "is not a PCI address"));
  auto wd = problems(vmi_with([](YAML::Node& n) {
                       n["spec"]["domain"]["devices"]["watchdog"] =
                           YAML::Load("{name: wd, diag288: {}}");
                     }),
                     "qemu-kvm");
  CHECK(has(wd, "spec.domain.devices.watchdog.i6300esb", "required"));
  // KubeVirt's API defaulting makes an input without type or bus a USB tablet (what its VM
  // controller's autoattachInputDevice adds: {name: default-0}).
  auto dflt = check_vmi(vmi_with([](YAML::Node& n) {
                          n["spec"]["domain"]["devices"]["inputs"] =
                              YAML::Load("[{name: default-0}]");
                        }),
                        "qemu-kvm");
  REQUIRE_MESSAGE(dflt.has_value(), dump(dflt ? Violations{} : dflt.error()));
  CHECK(dflt->vmi.spec.domain.devices.inputs[0].type == "tablet");
  CHECK(dflt->vmi.spec.domain.devices.inputs[0].bus == "usb");
  // What it renders is accepted: the parsed fields are kept for the domain XML.
  auto ok = check_vmi(vmi_with([](YAML::Node& n) {
                        auto dev = n["spec"]["domain"]["devices"];
                        dev["inputs"] = YAML::Load("[{name: t, type: tablet}]");
                        dev["sound"] = YAML::Load("{name: audio, model: ac97}");
                        dev["watchdog"] = YAML::Load("{name: wd, i6300esb: {action: shutdown}}");
                        n["spec"]["domain"]["features"] = YAML::Load(
                            "{hyperv: {spinlocks: {spinlocks: 8191}, vendorid: {vendorid: abc}, "
                            "synictimer: {enabled: true, direct: {enabled: false}}}}");
                        n["spec"]["domain"]["clock"] = YAML::Load(
                            "{utc: {offsetSeconds: -60}, timer: {rtc: {tickPolicy: catchup}, kvm: "
                            "{present: false}}}");
                      }),
                      "qemu-kvm");
  REQUIRE_MESSAGE(ok.has_value(), dump(ok ? Violations{} : ok.error()));
  const Domain& d = ok->vmi.spec.domain;
  CHECK(d.devices.sound_device.model == "ac97");
  CHECK(d.devices.watchdog_device.action == "shutdown");
  REQUIRE(d.features.hyperv_features.size() == 3);
  CHECK(d.features.hyperv_features[0].spinlocks == 8191u);
  CHECK(d.features.hyperv_features[1].vendor_id == "abc");
  CHECK(d.features.hyperv_features[2].direct == false);
  REQUIRE(d.clock.timers.size() == 2);
  CHECK(d.clock.timers[0].name == "rtc");
  CHECK(d.clock.timers[0].tick_policy == "catchup");
  CHECK(d.clock.timers[1].name == "kvm");
  CHECK_FALSE(d.clock.timers[1].present);
  CHECK(d.clock.utc_offset_seconds == -60);
}

TEST_CASE("floppy disks are refused everywhere") {
  auto text = vmi_with([](YAML::Node& n) {
    auto d = n["spec"]["domain"]["devices"]["disks"][0];
    d.remove("disk");
    d["floppy"] = YAML::Load("{}");
  });
  CHECK(has(problems(text), "spec.domain.devices.disks[0].floppy", "no floppy device"));
  CHECK(has(problems(text, "qemu-kvm"), "spec.domain.devices.disks[0].floppy", "removed floppy"));
}

TEST_CASE("cloud-hypervisor accepts what it serves") {
  auto r = check_vmi(
      vmi_with([](YAML::Node& n) {
        auto d = n["spec"]["domain"];
        d["cpu"] = YAML::Load("{model: host-passthrough, sockets: 2, cores: 2, threads: 1}");
        d["features"] = YAML::Load("{acpi: {}, apic: {}, hyperv: {relaxed: {}, vapic: {}}}");
        d["clock"] = YAML::Load("{utc: {}}");
        d["devices"]["autoattachGraphicsDevice"] = false;
        d["devices"]["rng"] = YAML::Load("{}");
        d["firmware"] = YAML::Load(
            "{bootloader: {efi: {secureBoot: false}}, uuid: 5d307ca9-b3ef-428c-8861-06e72d69f223}");
        d["memory"] = YAML::Load("{hugepages: {pageSize: 2Mi}}");
      }),
      "cloud-hypervisor");
  CHECK_MESSAGE(r.has_value(), dump(r ? Violations{} : r.error()));
}

TEST_CASE("cloud-hypervisor takes host devices and GPUs from device plugins, a vGPU without display") {
  auto r = check_vmi(vmi_with([](YAML::Node& n) {
                       n["spec"]["domain"]["devices"]["hostDevices"] =
                           YAML::Load("[{name: dev1, deviceName: vendor.com/dev}]");
                       n["spec"]["domain"]["devices"]["gpus"] = YAML::Load(
                           "[{name: gpu1, deviceName: nvidia.com/GRID_T4-1Q,"
                           " virtualGPUOptions: {display: {enabled: false}}}]");
                     }),
                     "cloud-hypervisor");
  CHECK_MESSAGE(r.has_value(), dump(r ? Violations{} : r.error()));
}

TEST_CASE("cloud-hypervisor takes an isolated emulator thread with dedicated CPUs, not without") {
  auto with = check_vmi(vmi_with([](YAML::Node& n) {
                          n["spec"]["domain"]["cpu"] = YAML::Load(
                              "{cores: 2, dedicatedCpuPlacement: true, isolateEmulatorThread: true}");
                        }),
                        "cloud-hypervisor");
  CHECK_MESSAGE(with.has_value(), dump(with ? Violations{} : with.error()));
  auto without = problems(vmi_with([](YAML::Node& n) {
    n["spec"]["domain"]["cpu"] = YAML::Load("{isolateEmulatorThread: true}");
  }));
  CHECK(has(without, "spec.domain.cpu.isolateEmulatorThread",
            "requires dedicatedCpuPlacement: true"));
}

// KubeVirt's shapes (vmi-create-admitter.go validateNUMA/validateRealtime): NUMA passthrough
// with dedicated CPUs and hugepages, realtime on top of both.
constexpr const char* kNumaCpu = "{cores: 2, dedicatedCpuPlacement: true, numa: {guestMappingPassthrough: {}}}";
constexpr const char* kRealtimeCpu =
    "{cores: 2, dedicatedCpuPlacement: true, numa: {guestMappingPassthrough: {}}, realtime: {mask: \"0-1,^1\"}}";

std::string numa_vmi(const char* cpu, const char* memory = "{hugepages: {pageSize: 2Mi}}") {
  return vmi_with([&](YAML::Node& n) {
    n["spec"]["domain"]["cpu"] = YAML::Load(cpu);
    n["spec"]["domain"]["memory"] = YAML::Load(memory);
  });
}

TEST_CASE("cloud-hypervisor takes NUMA passthrough and realtime in KubeVirt's shape, qemu-kvm refuses them") {
  for (const char* cpu : {kNumaCpu, kRealtimeCpu}) {
    CAPTURE(cpu);
    auto r = check_vmi(numa_vmi(cpu), "cloud-hypervisor");
    CHECK_MESSAGE(r.has_value(), dump(r ? Violations{} : r.error()));
    if (r) {
      CHECK(r->vmi.spec.domain.cpu.numa_guest_mapping_passthrough);
      CHECK(r->vmi.spec.domain.cpu.realtime == (cpu == kRealtimeCpu));
      if (cpu == kRealtimeCpu) CHECK(r->vmi.spec.domain.cpu.realtime_mask == "0-1,^1");
      // Memory hotplug is not defaulted on (defaults.cpp, KubeVirt's ValidateLiveUpdateMemory).
      CHECK_FALSE(r->vmi.spec.domain.memory.max_guest.has_value());
    }
  }
  CHECK(has(problems(numa_vmi(kNumaCpu), "qemu-kvm"), "spec.domain.cpu.numa.guestMappingPassthrough", "<numatune>"));
  CHECK(has(problems(numa_vmi(kRealtimeCpu), "qemu-kvm"), "spec.domain.cpu.realtime", "<vcpusched>"));
}

TEST_CASE("NUMA passthrough and realtime refusals name the field") {
  struct Row {
    std::string name;
    std::string text;
    std::string path;
    std::string reason;
  };
  const std::vector<Row> rows = {
      {"numa without dedicated CPUs", numa_vmi("{numa: {guestMappingPassthrough: {}}}"),
       "spec.domain.cpu.numa.guestMappingPassthrough", "requires dedicatedCpuPlacement: true"},
      {"numa without hugepages", numa_vmi(kNumaCpu, "{guest: 1Gi}"), "spec.domain.cpu.numa.guestMappingPassthrough",
       "requires memory.hugepages"},
      {"numa with memory hotplug", numa_vmi(kNumaCpu, "{guest: 1Gi, maxGuest: 4Gi, hugepages: {pageSize: 2Mi}}"),
       "spec.domain.memory.maxGuest", "not compatible with numa.guestMappingPassthrough"},
      {"realtime without dedicated CPUs",
       numa_vmi("{numa: {guestMappingPassthrough: {}}, realtime: {}}"), "spec.domain.cpu.realtime",
       "requires dedicatedCpuPlacement: true"},
      {"realtime without numa", numa_vmi("{dedicatedCpuPlacement: true, realtime: {}}"),
       "spec.domain.cpu.realtime", "requires numa.guestMappingPassthrough"},
      {"realtime with a bad mask",
       numa_vmi("{dedicatedCpuPlacement: true, numa: {guestMappingPassthrough: {}}, realtime: {mask: \"0-1,x\"}}"),
       "spec.domain.cpu.realtime.mask", "invalid mask value 'x' in '0-1,x'"},
      {"realtime with a reversed range",
       numa_vmi("{dedicatedCpuPlacement: true, numa: {guestMappingPassthrough: {}}, realtime: {mask: \"3-1\"}}"),
       "spec.domain.cpu.realtime.mask", "invalid mask range `3-1`"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.name);
    auto v = problems(row.text);
    CHECK_MESSAGE(has(v, row.path, row.reason), row.name << ":\n" << dump(v));
  }
}

TEST_CASE("realtime is refused where the launcher cannot make threads SCHED_FIFO (a non-root pod)") {
  HostFacts pod;
  pod.realtime_scheduling = false;  // uid 107 without CAP_SYS_NICE, RLIMIT_RTPRIO 0
  auto r = check_vmi(numa_vmi(kRealtimeCpu), "cloud-hypervisor", pod);
  REQUIRE_FALSE(r.has_value());
  CHECK_MESSAGE(has(r.error(), "spec.domain.cpu.realtime", "no CAP_SYS_NICE"), dump(r.error()));
  // NUMA passthrough alone needs no capability.
  CHECK(check_vmi(numa_vmi(kNumaCpu), "cloud-hypervisor", pod).has_value());
}

TEST_CASE("references between interfaces, networks and bindings are checked") {
  auto v = problems(vmi_with([](YAML::Node& n) {
    n["spec"]["domain"]["devices"]["interfaces"].push_back(YAML::Load("{name: extra, bridge: {}}"));
    n["spec"]["networks"].push_back(YAML::Load("{name: lonely, multus: {networkName: x}}"));
    n["spec"]["networks"].push_back(YAML::Load("{name: mnet, multus: {networkName: y}}"));
    n["spec"]["domain"]["devices"]["interfaces"].push_back(
        YAML::Load("{name: mnet, masquerade: {}}"));
    n["spec"]["domain"]["devices"]["interfaces"].push_back(YAML::Load("{name: nob}"));
    n["spec"]["networks"].push_back(YAML::Load("{name: nob, pod: {}}"));
    n["spec"]["domain"]["devices"]["interfaces"][0]["macAddress"] = "01:00:5e:00:00:01";
  }));
  CHECK_MESSAGE(has(v, "spec.domain.devices.interfaces[1].name", "no network named \"extra\""),
                dump(v));
  CHECK(has(v, "spec.networks[1].name", "no interface named \"lonely\""));
  CHECK(has(v, "spec.domain.devices.interfaces[2].masquerade", "masquerade needs a pod network"));
  CHECK(has(v, "spec.domain.devices.interfaces[3]", "missing binding"));
  CHECK(has(v, "spec.networks[3].pod", "only one pod network"));
  CHECK(has(v, "spec.domain.devices.interfaces[0].macAddress", "multicast"));
  auto bad_mac = problems(vmi_with([](YAML::Node& n) {
    n["spec"]["domain"]["devices"]["interfaces"][0]["macAddress"] = "02:00:00:00:00";
  }));
  CHECK(has(bad_mac, "spec.domain.devices.interfaces[0].macAddress", "is not a MAC address"));
}

TEST_CASE("volume sources are checked") {
  auto v = problems(vmi_with([](YAML::Node& n) {
    auto vols = n["spec"]["volumes"];
    auto disks = n["spec"]["domain"]["devices"]["disks"];
    const char* extra[][2] = {
        {"nosrc", "{name: nosrc}"},
        {"two", "{name: two, emptyDisk: {capacity: 1Gi}, containerDisk: {image: x}}"},
        {"hd", "{name: hd, hostDisk: {path: relative.img, type: Disk}}"},
        {"hd2", "{name: hd2, hostDisk: {path: /a/../b.img, type: DiskOrCreate}}"},
        {"ci", "{name: ci, cloudInitNoCloud: {}}"},
        {"b64", "{name: b64, cloudInitNoCloud: {userDataBase64: '!!notbase64'}}"},
        {"cd", "{name: cd, containerDisk: {}}"},
        {"sys", "{name: sys, sysprep: {configMap: {name: x}}}"}};
    for (const auto& e : extra) {
      vols.push_back(YAML::Load(e[1]));
      disks.push_back(YAML::Load(std::string("{name: ") + e[0] + ", disk: {}}"));
    }
  }));
  CHECK_MESSAGE(has(v, "spec.volumes[1]", "missing source"), dump(v));
  CHECK(has(v, "spec.volumes[2]", "set only one volume source"));
  CHECK(has(v, "spec.volumes[3].hostDisk.path", "must be an absolute path"));
  CHECK(has(v, "spec.volumes[4].hostDisk.path", "must not contain '..'"));
  CHECK(has(v, "spec.volumes[4].hostDisk.capacity", "required"));
  CHECK(has(v, "spec.volumes[5].cloudInitNoCloud", "set userData"));
  CHECK(has(v, "spec.volumes[6].cloudInitNoCloud.userDataBase64", "not valid base64"));
  CHECK(has(v, "spec.volumes[7].containerDisk.image", "required"));
  CHECK(has(v, "spec.volumes[8].sysprep", "not supported with cloud-hypervisor"));
}

TEST_CASE("boot orders must be unique and hugepages must divide memory") {
  auto v = problems(vmi_with([](YAML::Node& n) {
    n["spec"]["domain"]["devices"]["disks"][0]["bootOrder"] = 1;
    n["spec"]["domain"]["devices"]["disks"].push_back(
        YAML::Load("{name: data, bootOrder: 1, disk: {}}"));
    n["spec"]["volumes"].push_back(YAML::Load("{name: data, emptyDisk: {capacity: 1Gi}}"));
    n["spec"]["domain"]["memory"] = YAML::Load("{guest: 1025Mi, hugepages: {pageSize: 2Mi}}");
  }));
  CHECK_MESSAGE(
      has(v, "spec.domain.devices.disks[1].bootOrder", "1 is also the boot order of disks[0]"),
      dump(v));
  CHECK(has(v, "spec.domain.memory.hugepages.pageSize", "not a multiple of the 2Mi page size"));
  auto page = problems(vmi_with([](YAML::Node& n) {
    n["spec"]["domain"]["memory"] = YAML::Load("{hugepages: {pageSize: 4Mi}}");
  }));
  CHECK(has(page, "spec.domain.memory.hugepages.pageSize", "use 2Mi or 1Gi"));
}

TEST_CASE("kernel boot paths must stay inside the container image") {
  auto v = problems(vmi_with([](YAML::Node& n) {
    n["spec"]["domain"]["firmware"] = YAML::Load(
        "{kernelBoot: {kernelArgs: console=ttyS0, container: {image: k, kernelPath: "
        "/boot/../../etc/shadow}}}");
  }));
  CHECK_MESSAGE(has(v, "spec.domain.firmware.kernelBoot.container.kernelPath",
                    "must stay inside the container image"),
                dump(v));
  auto nocont = problems(vmi_with([](YAML::Node& n) {
    n["spec"]["domain"]["firmware"] = YAML::Load("{kernelBoot: {kernelArgs: x}}");
  }));
  CHECK(has(nocont, "spec.domain.firmware.kernelBoot.container", "required"));
}

TEST_CASE(
    "every capability table has one row per feature, in order, with a reason for each refusal") {
  for (const auto* caps : all_hypervisors()) {
    CAPTURE(caps->name);
    REQUIRE(caps->features.size() == static_cast<std::size_t>(Feature::kCount));
    for (std::size_t i = 0; i < caps->features.size(); ++i) {
      CHECK(caps->features[i].feature == static_cast<Feature>(i));
      if (!caps->features[i].supported) CHECK(!caps->features[i].note.empty());
      CHECK(feature_name(static_cast<Feature>(i)) != "?");
    }
    CHECK(caps->max_vcpus > 0);
    CHECK(caps->device_resource == "devices.kubevirt.io/kvm");
    CHECK(!caps->process_overheads.empty());
    CHECK(find_hypervisor(caps->name) == caps);
  }
  const auto* ch = find_hypervisor("cloud-hypervisor");
  REQUIRE(ch);
  CHECK(!ch->supports_iso);
  CHECK(!ch->requires_boot_order);
  CHECK(ch->supports_memory_ballooning);
  CHECK(!ch->supports(Feature::CdromDevice));
  CHECK(ch->supports(Feature::Virtiofs));
  const auto* q = find_hypervisor("qemu-kvm");
  REQUIRE(q);
  CHECK(q->supports_iso);
  CHECK(q->supports(Feature::CdromDevice));
  CHECK(q->supports(Feature::DiskBusSata));
  CHECK(q->supports(Feature::DiskBusScsi));
  CHECK(find_hypervisor("xen") == nullptr);
}

TEST_CASE("every example in examples/ validates for cloud-hypervisor") {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(chl::test::source_dir() / "examples")) {
    if (e.path().extension() != ".yaml") continue;
    ++n;
    CAPTURE(e.path().string());
    auto r = check_vmi(chl::test::read_file(e.path()), "cloud-hypervisor");
    CHECK_MESSAGE(r.has_value(), dump(r ? Violations{} : r.error()));
  }
  CHECK(n >= 4);
}

TEST_CASE("docs/vmi-support.md carries the generated support matrix") {
  const std::string doc = chl::test::read_file(chl::test::source_dir() / "docs/vmi-support.md");
  CHECK_MESSAGE(doc.find(support_matrix_markdown()) != std::string::npos,
                "regenerate the table with `ch-launcher validate --support-matrix`");
}

TEST_CASE("DRA GPUs and host devices: parsed, refused on both hypervisors with a reason that says DRA") {
  const std::string dra = vmi_with([](YAML::Node& n) {
    n["spec"]["domain"]["devices"]["gpus"] = YAML::Load("[{name: gpu1, claimName: gpu-claim, requestName: gpu}]");
    n["spec"]["domain"]["devices"]["hostDevices"] =
        YAML::Load("[{name: nic1, claimName: nic-claim, requestName: vf}]");
    n["spec"]["resourceClaims"] = YAML::Load("[{name: gpu-claim, resourceClaimName: my-gpu}, {name: nic-claim}]");
  });
  for (const char* hv : {"cloud-hypervisor", "qemu-kvm"}) {
    CAPTURE(hv);
    auto v = problems(dra, hv);
    CHECK_MESSAGE(has(v, "spec.domain.devices.gpus[0].claimName", "DRA devices"), dump(v));
    CHECK(has(v, "spec.domain.devices.hostDevices[0].claimName", "not supported by ch-launcher yet"));
    CHECK(has(v, "spec.resourceClaims", "DRA devices"));
    for (const auto& x : v) CHECK_MESSAGE(x.path.find("deviceName") == std::string::npos, dump(v));
  }
  // The device-plugin form without a deviceName still says what is missing.
  auto plain = problems(vmi_with([](YAML::Node& n) {
                          n["spec"]["domain"]["devices"]["gpus"] = YAML::Load("[{name: gpu1}]");
                        }),
                        "qemu-kvm");
  CHECK(has(plain, "spec.domain.devices.gpus[0].deviceName", "required"));
}

TEST_CASE("virtiofs filesystems: a tag longer than virtio-fs holds and a volume no virtiofs container can share are refused, naming the field") {
  const std::string long_name(37, 'a');  // a valid DNS label, one byte past VIRTIO_FS_TAG_LEN
  const std::string text = vmi_with([&](YAML::Node& n) {
    auto fss = n["spec"]["domain"]["devices"]["filesystems"];
    fss.push_back(YAML::Load("{name: " + long_name + ", virtiofs: {}}"));
    fss.push_back(YAML::Load("{name: scratch, virtiofs: {}}"));
    fss.push_back(YAML::Load("{name: shared, virtiofs: {}}"));
    n["spec"]["volumes"].push_back(YAML::Load("{name: " + long_name + ", persistentVolumeClaim: {claimName: c}}"));
    n["spec"]["volumes"].push_back(YAML::Load("{name: scratch, emptyDisk: {capacity: 1Gi}}"));
    n["spec"]["volumes"].push_back(YAML::Load("{name: shared, configMap: {name: app}}"));
  });
  for (const char* hv : {"cloud-hypervisor", "qemu-kvm"}) {
    CAPTURE(hv);
    auto v = problems(text, hv);
    CHECK_MESSAGE(has(v, "spec.domain.devices.filesystems[0].name", "holds at most 36 bytes (got 37)"), dump(v));
    CHECK_MESSAGE(has(v, "spec.domain.devices.filesystems[1].name", "cannot be shared with virtiofs"), dump(v));
    // The configMap one is fine: nothing names filesystems[2].
    CHECK(std::none_of(v.begin(), v.end(), [](const Violation& x) {
      return x.path.rfind("spec.domain.devices.filesystems[2]", 0) == 0;
    }));
  }
  // 36 bytes is the most a tag holds, and is accepted.
  auto ok = problems(vmi_with([](YAML::Node& n) {
    n["spec"]["domain"]["devices"]["filesystems"].push_back(YAML::Load("{name: " + std::string(36, 'b') + ", virtiofs: {}}"));
    n["spec"]["volumes"].push_back(YAML::Load("{name: " + std::string(36, 'b') + ", secret: {secretName: s}}"));
  }));
  CHECK_MESSAGE(ok.empty(), dump(ok));
}

TEST_CASE("spec.accessCredentials: qemuGuestAgent accepted on both hypervisors, other methods and bad entries refused by field") {
  const auto good = vmi_with([](YAML::Node& n) {
    n["spec"]["accessCredentials"] = YAML::Load(R"(
- sshPublicKey:
    source: {secret: {secretName: my-keys}}
    propagationMethod: {qemuGuestAgent: {users: [fedora, root]}}
- userPassword:
    source: {secret: {secretName: my-pass}}
    propagationMethod: {qemuGuestAgent: {}}
)");
  });
  for (const char* h : {"cloud-hypervisor", "qemu-kvm"}) {
    auto r = check_vmi(good, h);
    REQUIRE_MESSAGE(r.has_value(), h << "\n" << dump(r ? Violations{} : r.error()));
    const auto& c = r->vmi.spec.access_credentials;
    REQUIRE(c.size() == 2);
    CHECK(c[0].ssh_public_key);
    CHECK(c[0].secret_name == "my-keys");
    CHECK(c[0].users == std::vector<std::string>{"fedora", "root"});
    CHECK(c[1].user_password);
    CHECK(c[1].qemu_guest_agent);
  }
  const auto bad = problems(vmi_with([](YAML::Node& n) {
    n["spec"]["accessCredentials"] = YAML::Load(R"(
- sshPublicKey:
    source: {secret: {secretName: k}}
    propagationMethod: {noCloud: {}}
- sshPublicKey:
    source: {secret: {secretName: k}}
    propagationMethod: {configDrive: {}}
- sshPublicKey:
    source: {secret: {secretName: k}}
    propagationMethod: {qemuGuestAgent: {users: []}}
- userPassword:
    source: {}
    propagationMethod: {qemuGuestAgent: {}}
- {}
- sshPublicKey:
    source: {secret: {secretName: k}}
    propagationMethod: {qemuGuestAgent: {users: [root]}, noCloud: {}}
- userPassword:
    source: {secret: {secretName: Bad_Name}}
    propagationMethod: {qemuGuestAgent: {}}
)");
  }));
  INFO(dump(bad));
  CHECK(has(bad, "spec.accessCredentials[0].sshPublicKey.propagationMethod.noCloud", "qemuGuestAgent only"));
  CHECK(has(bad, "spec.accessCredentials[1].sshPublicKey.propagationMethod.configDrive", "qemuGuestAgent only"));
  CHECK(has(bad, "spec.accessCredentials[2].sshPublicKey.propagationMethod.qemuGuestAgent.users", "at least one user"));
  CHECK(has(bad, "spec.accessCredentials[3].userPassword.source", "secret"));
  CHECK(has(bad, "spec.accessCredentials[4]", "exactly one of sshPublicKey or userPassword"));
  CHECK(has(bad, "spec.accessCredentials[5].sshPublicKey.propagationMethod", "exactly one propagation method"));
  CHECK(has(bad, "spec.accessCredentials[6].userPassword.source.secret.secretName", "Bad_Name"));
}

// The rules for metadata and spec.domain itself: architecture, CPU, memory, firmware, features,
// clock (devices: validate_devices.cpp).
#include <algorithm>
#include <array>
#include <set>

#include "vmi/checker.hpp"
#include "vmi/realtime_mask.hpp"

namespace chl::vmi {

void Checker::check_metadata() {
  const ObjectMeta& m = vmi_.metadata;
  if (m.name.empty()) {
    add("metadata.name", "required");
  } else if (m.name.find('/') != std::string::npos || m.name.find("..") != std::string::npos) {
    add("metadata.name", "\"" + m.name + "\" must not contain '/' or '..'");
  } else if (!is_dns1123_subdomain(m.name)) {
    add("metadata.name", "\"" + m.name +
                             "\" is not a valid name: lowercase letters, digits, '-' and '.', "
                             "starting and ending with a letter or digit, at most 253");
  }
  if (!m.namespace_.empty() && !is_dns1123_label(m.namespace_)) {
    add("metadata.namespace",
        "\"" + m.namespace_ + "\" is not a valid namespace (a DNS-1123 label)");
  }
}

void Checker::check_arch() {
  const VmiSpec& s = vmi_.spec;
  const std::string host = kernel_arch(host_.arch);
  if (!s.architecture.empty() && kernel_arch(s.architecture) != host) {
    add("spec.architecture", s.architecture + " VMs cannot run on this " + host + " host");
  }
  const std::string& mt = s.domain.machine_type;
  struct ArchMachine {
    std::string_view prefix;
    std::string_view arch;
  };
  static constexpr std::array<ArchMachine, 4> kMachines{{{"virt", "aarch64"},
                                                         {"s390-ccw", "s390x"},
                                                         {"pseries", "ppc64le"},
                                                         {"ppce500", "ppc64le"}}};
  for (const auto& m : kMachines) {
    if (mt.rfind(m.prefix, 0) == 0 && host != m.arch) {
      add("spec.domain.machine.type", "\"" + mt + "\" is a machine type for " +
                                          std::string(m.arch) + ", not for this " + host +
                                          " host");
    }
  }
}

void Checker::check_cpu() {
  const Domain& d = vmi_.spec.domain;
  const Cpu& c = d.cpu;
  const std::string p = "spec.domain.cpu";
  CpuTopology t = cpu_topology(vmi_);
  const std::uint64_t vcpus = t.vcpus();
  if (vcpus > caps_.max_vcpus) {
    add(p, std::to_string(vcpus) + " vCPUs (sockets " + std::to_string(t.sockets) + " x cores " +
               std::to_string(t.cores) + " x threads " + std::to_string(t.threads) +
               ") is more than " + std::string(caps_.name) + "'s maximum of " +
               std::to_string(caps_.max_vcpus));
  }
  if (c.max_sockets) {
    if (c.max_sockets < t.sockets) {
      add(p + ".maxSockets", "must be at least sockets (" + std::to_string(t.sockets) + ")");
    } else if (std::uint64_t{c.max_sockets} * t.cores * t.threads > caps_.max_vcpus) {
      add(p + ".maxSockets", "maxSockets x cores x threads is more than " +
                                 std::string(caps_.name) + "'s maximum of " +
                                 std::to_string(caps_.max_vcpus) + " vCPUs");
    }
    require(Feature::CpuHotplug, p + ".maxSockets");
  }
  const Resources& r = d.resources;
  if (r.request_cpu && r.request_cpu->milli <= 0)
    add("spec.domain.resources.requests.cpu", "must be positive");
  if (r.limit_cpu && r.limit_cpu->milli <= 0)
    add("spec.domain.resources.limits.cpu", "must be positive");
  if (r.request_cpu && r.limit_cpu && r.request_cpu->milli > r.limit_cpu->milli) {
    add("spec.domain.resources.requests.cpu",
        "must not exceed limits.cpu (" + r.limit_cpu->text + ")");
  }
  if (!c.model.empty()) {
    if (c.model == "host-passthrough")
      require(Feature::CpuModelHostPassthrough, p + ".model");
    else if (c.model == "host-model")
      require(Feature::CpuModelHostModel, p + ".model");
    else
      require(Feature::CpuModelNamed, p + ".model");
  }
  if (!c.features.empty()) require(Feature::CpuFeatureFlags, p + ".features");
  for (std::size_t i = 0; i < c.features.size(); ++i) {
    static constexpr std::array<std::string_view, 5> kPolicies{"force", "require", "optional",
                                                               "disable", "forbid"};
    const std::string fp = p + ".features[" + std::to_string(i) + "]";
    if (c.features[i].name.empty()) add(fp + ".name", "required");
    if (std::find(kPolicies.begin(), kPolicies.end(), c.features[i].policy) == kPolicies.end()) {
      add(fp + ".policy", "unknown policy \"" + c.features[i].policy +
                              "\"; expected force, require, optional, disable or forbid");
    }
  }
  if (c.dedicated_cpu_placement) require(Feature::DedicatedCpus, p + ".dedicatedCpuPlacement");
  if (c.isolate_emulator_thread) {
    if (!c.dedicated_cpu_placement) {
      add(p + ".isolateEmulatorThread", "requires dedicatedCpuPlacement: true");
    }
    require(Feature::IsolateEmulatorThread, p + ".isolateEmulatorThread");
  }
  // KubeVirt's virt-api (vmi-create-admitter.go validateNUMA, validateRealtime; d923fdb): NUMA
  // passthrough needs dedicated CPUs and hugepages; realtime needs dedicated CPUs and NUMA
  // passthrough; neither takes memory hotplug (pkg/liveupdate/memory/memory.go
  // ValidateLiveUpdateMemory: "Memory hotplug is not compatible with ...").
  if (c.numa_guest_mapping_passthrough) {
    const std::string np = p + ".numa.guestMappingPassthrough";
    require(Feature::NumaPassthrough, np);
    if (!c.dedicated_cpu_placement) add(np, "requires dedicatedCpuPlacement: true");
    if (!d.memory.hugepages_page_size) add(np, "requires memory.hugepages");
    if (d.memory.max_guest && d.memory.max_guest->value > guest_memory_bytes(vmi_).value_or(0))
      add("spec.domain.memory.maxGuest",
          "memory hotplug is not compatible with numa.guestMappingPassthrough");
  }
  if (c.realtime) {
    const std::string rp = p + ".realtime";
    require(Feature::Realtime, rp);
    if (!c.dedicated_cpu_placement) add(rp, "requires dedicatedCpuPlacement: true");
    if (!c.numa_guest_mapping_passthrough) add(rp, "requires numa.guestMappingPassthrough");
    if (auto m = parse_realtime_mask(c.realtime_mask); !m) add(rp + ".mask", m.error());
    if (d.memory.max_guest && d.memory.max_guest->value > guest_memory_bytes(vmi_).value_or(0))
      add("spec.domain.memory.maxGuest", "memory hotplug is not compatible with realtime");
    // The vCPU threads are made SCHED_FIFO by the launcher (on cloud-hypervisor; virt-handler
    // does it only for QEMU's threads): that takes CAP_SYS_NICE, or an RLIMIT_RTPRIO of at least
    // KubeVirt's priority 1 (sched(7)). KubeVirt gives CAP_SYS_NICE only to a root virt-launcher
    // pod (pkg/virt-controller/services/rendercontainer.go requiredCapabilities).
    if (caps_.supports(Feature::Realtime) && !host_.realtime_scheduling)
      add(rp,
          "the launcher cannot make its vCPU threads SCHED_FIFO here: it has no CAP_SYS_NICE "
          "and an RLIMIT_RTPRIO of 0 (KubeVirt gives CAP_SYS_NICE only to a root "
          "virt-launcher pod; a non-root pod cannot run a realtime VMI on cloud-hypervisor)");
  }
}

void Checker::check_memory() {
  const Domain& d = vmi_.spec.domain;
  const Resources& r = d.resources;
  auto size_ok = [&](const std::optional<Quantity>& q, const std::string& path) {
    if (!q) return;
    if (q->value <= 0) {
      add(path, "must be positive, got " + q->text);
    } else if (q->value > kMaxGuestMemory) {
      add(path, q->text + " is more than the 16Ti a guest may have");
    }
  };
  size_ok(d.memory.guest, "spec.domain.memory.guest");
  size_ok(r.request_memory, "spec.domain.resources.requests.memory");
  size_ok(r.limit_memory, "spec.domain.resources.limits.memory");
  if (!guest_memory_bytes(vmi_)) {
    add("spec.domain.resources.requests.memory",
        "missing: set it (or spec.domain.memory.guest) to the guest's memory size, e.g. 1Gi");
    return;
  }
  if (r.request_memory && r.limit_memory && r.request_memory->value > r.limit_memory->value) {
    add("spec.domain.resources.requests.memory",
        "must not exceed limits.memory (" + r.limit_memory->text + ")");
  }
  if (d.memory.guest && r.limit_memory && d.memory.guest->value > r.limit_memory->value) {
    add("spec.domain.memory.guest",
        "must not exceed limits.memory (" + r.limit_memory->text + ")");
  }
  const std::int64_t guest = *guest_memory_bytes(vmi_);
  if (d.memory.max_guest) {
    const std::string mp = "spec.domain.memory.maxGuest";
    if (d.memory.max_guest->value < guest)
      add(mp, "must be at least the guest memory");
    else if (d.memory.max_guest->value > kMaxGuestMemory)
      add(mp, d.memory.max_guest->text + " is more than 16Ti");
    require(Feature::MemoryHotplug, mp);
  }
  if (d.memory.hugepages_page_size) {
    const std::string hp = "spec.domain.memory.hugepages.pageSize";
    const std::int64_t page = d.memory.hugepages_page_size->value;
    require(Feature::Hugepages, "spec.domain.memory.hugepages");
    if (page != (std::int64_t{2} << 20) && page != (std::int64_t{1} << 30)) {
      add(hp, "\"" + d.memory.hugepages_page_size->text +
                  "\" is not a hugepage size of this host; use 2Mi or 1Gi");
    } else if (guest > 0 && guest % page != 0) {
      add(hp, "guest memory " + format_bytes_quantity(guest) + " is not a multiple of the " +
                  d.memory.hugepages_page_size->text + " page size");
    }
  }
}

void Checker::check_firmware() {
  const Firmware& fw = vmi_.spec.domain.firmware;
  const std::string p = "spec.domain.firmware";
  if (!fw.uuid.empty() && !is_uuid(fw.uuid)) {
    add(p + ".uuid", "\"" + fw.uuid + "\" is not a UUID (8-4-4-4-12 hexadecimal digits)");
  }
  if (fw.bootloader == Bootloader::Efi) {
    require(Feature::EfiBoot, p + ".bootloader.efi");
    if (fw.efi_secure_boot.value_or(true)) {
      require(Feature::SecureBoot, p + ".bootloader.efi.secureBoot");
      if (caps_.supports(Feature::SecureBoot) && !vmi_.spec.domain.features.smm.value_or(false)) {
        add(p + ".bootloader.efi.secureBoot",
            "requires spec.domain.features.smm (KubeVirt's rule)");
      }
    }
    if (fw.efi_persistent) require(Feature::EfiPersistentVars, p + ".bootloader.efi.persistent");
  } else if (!fw.kernel_boot.present) {
    require(Feature::BiosBoot, p + ".bootloader");
  }
  const KernelBoot& kb = fw.kernel_boot;
  if (kb.present) {
    const std::string kp = p + ".kernelBoot";
    require(Feature::KernelBoot, kp);
    if (!kb.has_container) {
      add(kp + ".container", "required: the container image holding the kernel and initrd");
    } else {
      if (kb.image.empty()) add(kp + ".container.image", "required");
      if (kb.kernel_path.empty() && kb.initrd_path.empty()) {
        add(kp + ".container", "set kernelPath, initrdPath or both");
      }
      for (const auto& [field, value] :
           {std::pair{"kernelPath", &kb.kernel_path}, std::pair{"initrdPath", &kb.initrd_path}}) {
        if (has_dotdot_component(*value)) {
          add(kp + ".container." + field,
              "\"" + *value + "\" must stay inside the container image (no '..')");
        }
      }
    }
    if (fw.bootloader != Bootloader::None && !caps_.kernel_boot_with_bootloader) {
      add(p + ".bootloader",
          std::string(caps_.name) +
              " boots the kernel directly; remove bootloader when kernelBoot is set");
    }
  }
}

void Checker::check_features() {
  const Features& f = vmi_.spec.domain.features;
  const std::string p = "spec.domain.features";
  if (f.acpi) require(*f.acpi ? Feature::FeatureAcpi : Feature::FeatureAcpiDisabled, p + ".acpi");
  if (f.apic) require(*f.apic ? Feature::FeatureApic : Feature::FeatureOther, p + ".apic");
  if (f.smm.value_or(false)) require(Feature::FeatureSmm, p + ".smm");
  if (f.hyperv) require(Feature::FeatureHyperv, p + ".hyperv");
  // KubeVirt's tlbflush.direct/extended have no element in libvirt 9.0 (Debian bookworm's schema
  // has tlbflush as a bare state) and no place in Cloud Hypervisor's one Hyper-V set.
  for (const auto& h : f.hyperv_features) {
    if (h.name == "tlbflush" && (h.direct || h.extended))
      add(p + ".hyperv.tlbflush", "direct and extended are not served on " +
                                      std::string(caps_.name) +
                                      "; remove them (tlbflush itself is)");
  }
  if (f.hyperv_passthrough) require(Feature::FeatureHypervPassthrough, p + ".hypervPassthrough");
  if (f.kvm_hidden.value_or(false)) require(Feature::FeatureKvmHidden, p + ".kvm.hidden");
  if (f.pvspinlock) require(Feature::FeaturePvspinlock, p + ".pvspinlock");
  for (const auto& o : f.others) require(Feature::FeatureOther, p + "." + o);
}

void Checker::check_clock() {
  const Clock& c = vmi_.spec.domain.clock;
  const std::string p = "spec.domain.clock";
  if (!c.present) return;
  if (c.utc && c.utc_offset_seconds.value_or(0) != 0)
    require(Feature::ClockOffset, p + ".utc.offsetSeconds");
  else if (c.utc)
    require(Feature::ClockUtc, p + ".utc");
  if (!c.timezone.empty()) require(Feature::ClockTimezone, p + ".timezone");
  if (c.utc && !c.timezone.empty()) add(p, "set either utc or timezone, not both");
  if (c.timer) require(Feature::ClockTimer, p + ".timer");
}

}  // namespace chl::vmi

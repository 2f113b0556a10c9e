#include "drivers/cloud_hypervisor/translate.hpp"

namespace chl::cloud_hypervisor {

vmm_api::VmConfig to_ch_vm_config(const launcher::LaunchPlan& plan) {
  vmm_api::VmConfig c;

  const launcher::Payload& p = plan.payload;
  if (!p.firmware.empty()) c.payload.firmware = p.firmware;
  if (!p.kernel.empty()) c.payload.kernel = p.kernel;
  if (!p.initramfs.empty()) c.payload.initramfs = p.initramfs;
  if (!p.cmdline.empty()) c.payload.cmdline = p.cmdline;

  vmm_api::CpusConfig cpus;
  cpus.boot_vcpus = plan.cpus.boot_vcpus;
  cpus.max_vcpus = plan.cpus.max_vcpus;
  vmm_api::CpuTopology topo;
  topo.threads_per_core = plan.cpus.topology.threads;
  topo.cores_per_die = plan.cpus.topology.cores;
  topo.dies_per_package = 1;
  topo.packages = plan.cpus.topology.sockets;
  cpus.topology = topo;
  if (plan.cpus.kvm_hyperv) cpus.kvm_hyperv = true;
  if (!plan.cpus.pinning.empty()) {
    std::vector<vmm_api::CpuAffinity> aff;
    for (std::size_t i = 0; i < plan.cpus.pinning.size(); ++i) {
      vmm_api::CpuAffinity a;
      a.vcpu = static_cast<std::uint32_t>(i);
      a.host_cpus = {plan.cpus.pinning[i]};
      aff.push_back(std::move(a));
    }
    cpus.affinity = std::move(aff);
  }
  c.cpus = std::move(cpus);

  vmm_api::MemoryConfig mem;
  mem.size = static_cast<std::uint64_t>(plan.memory.size);
  if (plan.memory.hotplug_size > 0)
    mem.hotplug_size = static_cast<std::uint64_t>(plan.memory.hotplug_size);
  if (plan.memory.shared) mem.shared = true;
  if (plan.memory.hugepage_size > 0) {
    mem.hugepages = true;
    mem.hugepage_size = static_cast<std::uint64_t>(plan.memory.hugepage_size);
  }
  if (!plan.memory.numa.empty()) {
    // numa.guestMappingPassthrough: memory.size 0 and one zone per guest node (CH v52
    // vmm/src/vm_config.rs MemoryZoneConfig: id, size, shared, hugepages, hugepage_size,
    // host_numa_node; memory_manager.rs: "User defined memory regions can't be provided if the
    // memory size is not 0"), each mbind()ed to its host node (create_ram_region_raw: MPOL_BIND,
    // MPOL_MF_STRICT|MPOL_MF_MOVE); NumaConfig (guest_numa_id, cpus, distances, memory_zones)
    // puts the vCPUs and the zone in the guest node. A guest node's distance to itself is CH's
    // own 10 (acpi.rs create_slit_table), so only the others are given.
    mem.size = 0;
    mem.hugepages.reset();
    mem.hugepage_size.reset();
    std::vector<vmm_api::MemoryZoneConfig> zones;
    std::vector<vmm_api::NumaConfig> numa;
    for (const auto& n : plan.memory.numa) {
      vmm_api::MemoryZoneConfig z;
      z.id = "numa" + std::to_string(n.guest_id);
      z.size = n.memory;
      if (plan.memory.shared) z.shared = true;
      z.hugepages = true;
      z.hugepage_size = static_cast<std::uint64_t>(plan.memory.hugepage_size);
      z.host_numa_node = static_cast<std::int32_t>(n.host_node);
      vmm_api::NumaConfig nc;
      nc.guest_numa_id = n.guest_id;
      nc.cpus = n.vcpus;
      nc.memory_zones = std::vector<std::string>{z.id};
      std::vector<vmm_api::NumaDistance> dist;
      for (const auto& [to, d] : n.distances) {
        if (to == n.guest_id) continue;
        vmm_api::NumaDistance nd;
        nd.destination = to;
        nd.distance = d;
        dist.push_back(std::move(nd));
      }
      if (!dist.empty()) nc.distances = std::move(dist);
      zones.push_back(std::move(z));
      numa.push_back(std::move(nc));
    }
    mem.shared.reset();
    mem.zones = std::move(zones);
    c.numa = std::move(numa);
  }
  c.memory = std::move(mem);

  if (!plan.host_devices.empty()) {
    // VFIO devices by sysfs path (CH v52 vmm/src/vm_config.rs DeviceConfig: path, id), named
    // with KubeVirt's alias.
    std::vector<vmm_api::DeviceConfig> devs;
    for (const auto& h : plan.host_devices) {
      vmm_api::DeviceConfig d;
      d.path = h.sysfs_path;
      d.id = h.alias;
      devs.push_back(std::move(d));
    }
    c.devices = std::move(devs);
  }

  if (!plan.disks.empty()) {
    std::vector<vmm_api::DiskConfig> disks;
    for (const auto& d : plan.disks) {
      vmm_api::DiskConfig dc;
      dc.id = d.name;
      dc.path = d.path;
      if (d.readonly) dc.readonly = true;
      if (d.direct) dc.direct = true;
      if (!d.serial.empty()) dc.serial = d.serial;
      if (d.num_queues) dc.num_queues = d.num_queues;
      if (d.preallocated) dc.sparse = false;  // CH keeps it allocated: no holes punched on discard
      if (d.qcow2_overlay) {
        dc.image_type = "Qcow2";
        dc.backing_files = true;
      }
      disks.push_back(std::move(dc));
    }
    c.disks = std::move(disks);
  }

  if (!plan.nics.empty()) {
    std::vector<vmm_api::NetConfig> nets;
    for (const auto& n : plan.nics) {
      vmm_api::NetConfig nc;
      nc.id = n.name;
      nc.tap = n.tap;
      nc.mac = n.mac;
      if (n.num_queues) nc.num_queues = n.num_queues;
      nets.push_back(std::move(nc));
    }
    c.net = std::move(nets);
  }

  if (!plan.filesystems.empty()) {
    std::vector<vmm_api::FsConfig> fss;
    for (const auto& f : plan.filesystems) {
      vmm_api::FsConfig fc;
      fc.id = f.name;
      fc.tag = f.name;
      fc.socket = f.socket;
      fc.num_queues = f.num_queues;  // request queues; CH adds the hiprio queue (fs.rs)
      fc.queue_size = f.queue_size;
      fss.push_back(std::move(fc));
    }
    c.fs = std::move(fss);
  }

  if (plan.rng) {
    vmm_api::RngConfig rng;
    rng.src = "/dev/urandom";
    c.rng = std::move(rng);
  }

  vmm_api::SerialConfig serial;
  serial.mode = plan.serial_console ? vmm_api::ConsoleMode::Pty : vmm_api::ConsoleMode::Off;
  c.serial = std::move(serial);
  vmm_api::ConsoleConfig console;
  console.mode = vmm_api::ConsoleMode::Off;
  c.console = std::move(console);

  if (plan.pvpanic) c.pvpanic = true;

  // The guest agent's channel: CH has no virtio-serial channels (console.rs: one port), so a
  // hybrid vsock device on every VM; the launcher connects to its socket (guest_agent/).
  if (!plan.agent.vsock_socket.empty()) {
    vmm_api::VsockConfig vsock;
    vsock.cid = plan.agent.cid;
    vsock.socket = plan.agent.vsock_socket;
    c.vsock = std::move(vsock);
  }

  if (!plan.platform_uuid.empty() || !plan.platform_serial.empty()) {
    vmm_api::PlatformConfig pc;
    if (!plan.platform_uuid.empty()) pc.uuid = plan.platform_uuid;
    if (!plan.platform_serial.empty()) pc.serial_number = plan.platform_serial;
    c.platform = std::move(pc);
  }
  return c;
}

nlohmann::json ch_plan_json(const launcher::LaunchPlan& plan) {
  nlohmann::json body = to_ch_vm_config(plan);
  return {{"hypervisor", plan.hypervisor},
          {"state_dir", plan.state_dir},
          {"preparations", launcher::preparations_json(plan)},
          {"vm_create", std::move(body)}};
}

}  // namespace chl::cloud_hypervisor

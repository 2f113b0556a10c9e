#include "cli/run_launcher.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include <boost/asio/io_context.hpp>

#include "drivers/cloud_hypervisor/ch_driver.hpp"
#include "drivers/cloud_hypervisor/translate.hpp"
#include "control/command_api.hpp"
#include "launcher/launcher_service.hpp"
#include "drivers/libvirt/accel_probe.hpp"
#include "drivers/libvirt/domain_xml.hpp"
#include "drivers/libvirt/module_loader.hpp"
#include "network/phase1_child.hpp"
#include "network/phase2.hpp"
#include "launcher/plan.hpp"
#include "launcher/prepare.hpp"
#include "launcher/state_dir.hpp"
#include "launcher/vmm_binary.hpp"
#include "vmi/validator.hpp"
#include "vmi/parser.hpp"
#include "drivers/cloud_hypervisor/vmm_process.hpp"
#include "common/child_process.hpp"
#include "common/log.hpp"
#include "common/module_loader.hpp"
#include "firmware/payload.hpp"
#include "common/unix_socket.hpp"
#include "network/plan.hpp"
#include "network/vmm_handoff.hpp"
#include "network/wire.hpp"

namespace chl::cli {
namespace fs = std::filesystem;

namespace {

// The error paths of a launch: printed for people, logged, and told to the hooks' transport.
int report_violations(const vmi::Violations& vs, const LaunchHooks& hooks) {
  std::fprintf(stderr, "ch-launcher run: the VMI cannot run (%zu problem%s):\n", vs.size(), vs.size() == 1 ? "" : "s");
  std::string all;
  for (const auto& v : vs) {
    std::fprintf(stderr, "  %s\n", to_string(v).c_str());
    all += (all.empty() ? "" : "; ") + to_string(v);
  }
  if (hooks.on_failure) hooks.on_failure(all, launcher::kExitInvalidInput);
  return launcher::kExitInvalidInput;
}

int report_launch_error(const std::string& msg, const LaunchHooks& hooks) {
  CHL_LOG_ERROR("{}", msg);
  std::fprintf(stderr, "ch-launcher run: %s\n", msg.c_str());
  if (hooks.on_failure) hooks.on_failure(msg, launcher::kExitLaunchFailed);
  return launcher::kExitLaunchFailed;
}

std::optional<std::vector<std::uint32_t>> pod_cpu_set() {
  std::ifstream f("/sys/fs/cgroup/cpuset.cpus.effective");
  std::string text;
  if (!std::getline(f, text)) return std::nullopt;
  return launcher::parse_cpu_list(text);
}

// The NICs of the domain XML from what was wired: the taps, MACs, MTUs and queue pairs the pod
// network really has (the launch plan's guesses — no MTU, KubeVirt's bridge default — give way).
std::vector<launcher::PlannedNic> planned_nics(network::WiredNetwork& wired) {
  std::vector<launcher::PlannedNic> nics;
  for (const auto& w : wired.interfaces()) {
    launcher::PlannedNic n;
    n.name = w.iface_name;
    n.tap = w.tap;
    n.mac = network::format_mac(w.mac);
    n.mtu = w.mtu;
    n.num_queues = w.queues > 1 ? 2 * w.queues : 0;
    for (const auto& p : wired.plans()) {
      if (p.iface_name != w.iface_name) continue;
      n.pod_interface = p.pod_iface;
      n.mac_generated = p.mac_generated;
    }
    nics.push_back(std::move(n));
  }
  return nics;
}

}  // namespace

fs::path launcher_socket_path(const fs::path& state_dir, bool pod_layout) {
  return pod_layout ? fs::path("/var/run/kubevirt/sockets/launcher-sock") : state_dir / "launcher.sock";
}

fs::path console_socket_path(const fs::path& state_dir, bool pod_layout, const std::string& uid) {
  return pod_layout ? fs::path("/var/run/kubevirt-private") / uid / "virt-serial0" : state_dir / "virt-serial0";
}

int run_launcher(const launcher::LaunchOptions& opts, const LaunchHooks& hooks) {
  const auto print_violations = [&hooks](const vmi::Violations& vs) { return report_violations(vs, hooks); };
  const auto launch_error = [&hooks](const std::string& msg) { return report_launch_error(msg, hooks); };
  // 1. The VMI, checked against its hypervisor: every problem at once, exit 2.
  auto text = hooks.vmi_text ? common::Result<std::string>(*hooks.vmi_text) : vmi::read_manifest(opts.vmi_path.string());
  if (!text) {
    std::fprintf(stderr, "ch-launcher run: %s\n", text.error().message().c_str());
    if (hooks.on_failure) hooks.on_failure(text.error().message(), launcher::kExitInvalidInput);
    return launcher::kExitInvalidInput;
  }
  auto checked = vmi::check_vmi(*text, opts.default_hypervisor, vmi::current_host());
  if (!checked) return print_violations(checked.error());
  const vmi::Vmi& vmi = checked->vmi;
  common::log::set_vmi({vmi.metadata.namespace_, vmi.metadata.name, vmi.metadata.uid});
  for (const auto& w : checked->warnings) {
    CHL_LOG_WARN("{}", vmi::to_string(w));
    std::fprintf(stderr, "ch-launcher run: warning: %s\n", vmi::to_string(w).c_str());
  }
  const std::string hypervisor(checked->caps->name);
  const bool qemu = hypervisor == "qemu-kvm";
  if (hypervisor != "cloud-hypervisor" && !qemu)
    return launch_error("hypervisor " + hypervisor + ": no driver in this build");
  auto accel_request = libvirt::accel_request_from_string(opts.accel);
  if (!accel_request) {
    std::fprintf(stderr, "ch-launcher run: --accel takes auto, kvm or tcg, got '%s'\n", opts.accel.c_str());
    if (hooks.on_failure) hooks.on_failure("--accel takes auto, kvm or tcg, got '" + opts.accel + "'", launcher::kExitInvalidInput);
    return launcher::kExitInvalidInput;
  }
  // qemu-kvm lives in a module (libvirt_module.hpp): loaded now, before anything is created, so
  // a launcher without it fails with nothing to clean up. It stays loaded until the driver and
  // the io_context (which may hold handlers the driver posted) are gone: declared before both.
  std::optional<libvirt::LibvirtModule> libvirt_module;
  if (qemu) {
    auto m = libvirt::load_libvirt_module();
    if (!m) return launch_error(m.error().message());
    libvirt_module.emplace(std::move(*m));
  }

  // 2. The state directory: ours alone (lock), recovered if a launcher died in it.
  fs::path dir = opts.state_dir ? *opts.state_dir : launcher::default_state_dir(vmi.metadata.namespace_, vmi.metadata.name);
  auto state = launcher::StateDir::open(dir, vmi.metadata.uid);
  if (!state) return launch_error("state directory: " + state.error().message());
  if (state->recovery().stale)
    CHL_LOG_WARN("recovered state directory {} left by a previous launcher{}{}", dir.string(),
                 state->recovery().killed_vmm ? " (its VMM was still running and was killed)" : "",
                 state->recovery().removed_temporaries > 0
                     ? " (" + std::to_string(state->recovery().removed_temporaries) +
                           " half-written temporary file(s) removed)"
                     : std::string());

  // 3. The plan, and what it needs prepared.
  launcher::PlanInputs in;
  in.volume_paths = opts.volumes;
  in.pod_layout = opts.pod_layout;
  in.container_disk_dir = opts.container_disk_dir;
  in.private_dir = opts.private_dir;
  in.container_disk_dir = opts.container_disk_dir;
  in.private_dir = opts.private_dir;
  in.virtiofs_dir = opts.virtiofs_dir;
  in.state_dir = dir.string();
  in.cpu_set = opts.cpu_set ? opts.cpu_set : pod_cpu_set();
  in.device_env = launcher::device_plugin_env(environ);
  // KubeVirt's network-info (SR-IOV VFs): a file that is not there gives none.
  if (std::error_code ec; fs::exists(opts.network_info_path, ec)) {
    auto text = vmi::read_manifest(opts.network_info_path);
    if (!text) return launch_error("SR-IOV network-info: " + text.error().message());
    in.network_info = std::move(*text);
  }
  if (rlimit ml{}; ::getrlimit(RLIMIT_MEMLOCK, &ml) == 0 && ml.rlim_cur != RLIM_INFINITY)
    in.memlock_limit = static_cast<std::uint64_t>(ml.rlim_cur);
  if (vmi.spec.domain.cpu.numa_guest_mapping_passthrough) {
    auto numa = launcher::read_host_numa();
    if (!numa) return launch_error("numa.guestMappingPassthrough: " + numa.error().message());
    in.host_numa = std::move(*numa);
  }
  auto plan = launcher::plan_launch(vmi, *checked->caps, in);
  if (!plan) return print_violations(plan.error());
  for (auto& d : plan->disks)
    d.preallocated = std::find(opts.preallocated_volumes.begin(), opts.preallocated_volumes.end(), d.name) !=
                     opts.preallocated_volumes.end();
  launcher::PrepareOptions po;
  po.virtiofs_wait = std::chrono::milliseconds(opts.virtiofs_wait_ms);
  if (!opts.firmware_dir.empty()) po.firmware_dirs = {opts.firmware_dir};
  else
    po.firmware_dirs = firmware::launcher_search_dirs(
        qemu ? firmware::Hypervisor::qemu_kvm : firmware::Hypervisor::cloud_hypervisor, common::own_directory());
  if (auto st = launcher::run_preparations(*plan, po); !st) return launch_error(st.error().message());
  // The ephemeral overlays and config disks made for this run go when it ends.
  struct EphemeralCleanup {
    const launcher::LaunchPlan& plan;
    ~EphemeralCleanup() {
      if (auto st = launcher::remove_ephemeral_files(plan); !st) CHL_LOG_WARN("removing ephemeral files: {}", st.error().message());
    }
  } ephemeral_cleanup{*plan};

  // 3b. Pod networking (network/): bridge, tap, nftables and DHCP in this (the pod's) network
  //     namespace, before the VMM starts and before the launcher confines itself. Cloud
  //     Hypervisor gets the taps as fds (vm.add-net; its VmConfig names no tap). QEMU gets them
  //     through libvirt, by name: the domain XML names the wired taps (managed='no').
  //     Phase 1 (the devices, the nftables table) needs libnl-route-3 and libnftables, which are
  //     the module libchl-network.so: `run` loads it only in a short-lived child that wires and
  //     exits (network/phase1_child.hpp), so the launcher never maps it, nor keeps its heap.
  //     Phase 2 (attach to the taps, DHCP) is then the launcher's, as in virt-launcher mode, and
  //     the teardown at exit removes what the child made with two netlink sockets opened now
  //     (network/pod_teardown.hpp). In virt-launcher mode (opts.network_phase1 false)
  //     virt-handler did phase 1: the launcher only attaches to its taps and serves DHCP, as
  //     uid 107 without capabilities.
  //     (Phase 2 alone changes nothing in the namespace: no host-namespace refusal is needed
  //     in virt-launcher mode; the child refuses to wire the host's own namespace.)
  boost::asio::io_context io;
  std::unique_ptr<network::WiredNetwork> wired;
  // SR-IOV VFs are passed through (plan->host_devices, aliased sriov-<name>): the SR-IOV CNI
  // made them; nothing is wired for them in the pod.
  std::map<std::string, std::string> sriov_vfs;
  for (const auto& h : plan->host_devices)
    if (h.alias.rfind("sriov-", 0) == 0) sriov_vfs[h.name] = h.address;
  const bool wire_pod = std::any_of(plan->nics.begin(), plan->nics.end(),
                                    [](const launcher::PlannedNic& n) { return n.binding != vmi::Binding::Sriov; });
  if (wire_pod) {
    const auto t0 = std::chrono::steady_clock::now();
    network::Phase1Options p1;
    p1.allow_host_network = opts.allow_host_network;
    p1.sriov_vf_pci = sriov_vfs;
    auto facts = opts.network_phase1 ? network::wire_in_child(vmi, p1) : network::read_pod_facts("/etc/resolv.conf");
    if (!facts) return launch_error("pod network: " + facts.error().message());
    facts->sriov_vf_pci = sriov_vfs;
    auto nets = network::plan_networks(vmi, *facts, vmi::cpu_topology(vmi).vcpus());
    if (!nets.refusals.empty()) return print_violations(nets.refusals);
    network::Phase2Options p2;
    p2.private_dir = opts.private_dir;
    if (opts.network_phase1) {
      // This launcher made the devices (its child did): it serves router advertisements on
      // its bridges, takes the bridge binding's lease from its own plans, and removes them.
      p2.router_adverts = true;
      p2.dhcp_cache = false;
      auto teardown = network::PodTeardown::open();
      if (!teardown) return launch_error("pod network: " + teardown.error().message());
      auto w = network::attach_pod_network(nets.plans, &io, p2);
      if (!w) {
        (void)teardown->run(nets.plans);
        return launch_error("pod network: " + w.error().message());
      }
      wired = network::own_pod_network(std::move(*w), std::move(*teardown));
    } else {
      auto w = network::attach_pod_network(nets.plans, &io, p2);
      if (!w) return launch_error("pod network: " + w.error().message());
      wired = std::move(*w);
    }
    CHL_LOG_INFO("pod network: {} interface(s) {} in {} ms", wired->interfaces().size(),
                 opts.network_phase1 ? "wired" : "attached (phase 2)",
                 std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
    if (qemu) {
      plan->nics = planned_nics(*wired);
      // libvirt attaches to each tap with its own TUNSETIFF: a single-queue tap takes one fd
      // only, so ours go (the taps are persistent and stay until the teardown).
      for (auto& wi : wired->interfaces()) wi.tap_fds.clear();
    } else {
      plan->nics.clear();
      // By name, CH attaches to each tap itself (also a migration's target, which gets no
      // fds): ours go first, as for libvirt (network/vmm_handoff.hpp).
      if (opts.ch_taps_by_name)
        for (auto& wi : wired->interfaces()) wi.tap_fds.clear();
    }
  }
  // On Cloud Hypervisor an SR-IOV interface is its VF as a VFIO device, never a virtio-net NIC.
  if (!qemu)
    std::erase_if(plan->nics, [](const launcher::PlannedNic& n) { return n.binding == vmi::Binding::Sriov; });
  // 4. The driver: Cloud Hypervisor (its binary), or QEMU through libvirt (the accelerator, the
  //    domain XML, then the module: a libvirt daemon and the driver, which keeps the daemon until
  //    it is destroyed).
  auto record_vmm = [&state](pid_t pid) {
    if (auto st = state->record_vmm(pid); !st) CHL_LOG_WARN("recording the VMM pid: {}", st.error().message());
  };
  std::unique_ptr<launcher::Driver> driver;
  std::string what;
  if (qemu) {
    std::string emulator;
    if (!opts.vmm_binary.empty()) {
      auto found = common::find_program(opts.vmm_binary);
      if (!found) return launch_error("no QEMU binary '" + opts.vmm_binary + "'");
      emulator = *found;
    }
    libvirt::AccelChoice accel = libvirt::choose_accel(*accel_request);
    if (accel.accel == libvirt::Accel::Tcg) CHL_LOG_WARN("accelerator: {}", accel.why);
    else CHL_LOG_INFO("accelerator: {}", accel.why);
    libvirt::DomainXmlOptions xo;
    xo.accel = accel.accel;
    xo.plain_cpu = accel.nested_pvm;
    if (accel.nested_pvm && !vmi.spec.domain.cpu.model.empty() && vmi.spec.domain.cpu.model != "host-model")
      CHL_LOG_WARN("accelerator: nested PVM KVM: the VMI's CPU model {} is replaced by qemu64", vmi.spec.domain.cpu.model);
    xo.emulator = emulator;
    // As root, QEMU under qemu:///system runs as the launcher through a static DAC seclabel.
    // Not root (KubeVirt's non-root launcher), libvirt's session daemon runs QEMU as its own
    // user already and has no DAC security driver ("Security driver model 'dac' is not
    // available"): no seclabel.
    if (::geteuid() == 0) xo.run_as = std::make_pair(::geteuid(), ::getegid());
    xo.state_dir = fs::absolute(dir).lexically_normal().string();
    xo.smbios = opts.smbios;
    xo.mem_balloon_stats_period = opts.mem_balloon_stats_period;
    libvirt::LibvirtDriverOptions lo;
    lo.domain_name = libvirt::domain_name(vmi);
    lo.domain_xml = libvirt::to_domain_xml(vmi, *plan, xo);
    lo.state_dir = dir;
    lo.accel = accel;
    lo.emulator = emulator.empty() ? std::string("qemu-system-x86_64") : emulator;
    lo.on_vmm_started = record_vmm;
    for (const auto& n : plan->nics) lo.taps.push_back(n.tap);
    lo.incoming = opts.incoming_migration.has_value();
    lo.autodestroy = !opts.migratable && !lo.incoming;
    CHL_LOG_DEBUG("domain XML:\n{}", lo.domain_xml);
    auto launch = libvirt_module->api->create_driver(io, std::move(lo));
    if (!launch) return launch_error(launch.error().message());
    what = "qemu-kvm through libvirt (" + std::string(to_string(accel.accel)) + ", " + launch->daemon + ")";
    driver = std::move(launch->driver);
  } else {
    std::string binary = opts.vmm_binary.empty() ? "cloud-hypervisor" : opts.vmm_binary;
    auto found = launcher::cloud_hypervisor_binary(opts.vmm_binary);
    if (!found)
      return launch_error("no VMM binary '" + binary + "' (install cloud-hypervisor or pass --vmm-binary PATH)");
    if (auto placeholder = launcher::placeholder_vmm_message(*found); !placeholder.empty())
      return launch_error(placeholder);
    if (auto device = launcher::cloud_hypervisor_device_error(); !device.empty()) return launch_error(device);
    if (opts.smbios)
      CHL_LOG_INFO("SMBIOS system fields (manufacturer {}, product {}, family {}): Cloud Hypervisor sets only the "
                   "serial number and UUID, the rest is left out",
                   opts.smbios->manufacturer, opts.smbios->product, opts.smbios->family);
    cloud_hypervisor::ChDriverOptions co;
    co.vmm_binary = *found;
    co.state_dir = dir;
    co.seccomp = opts.vmm_seccomp;
    co.verbosity = opts.vmm_verbosity;
    co.on_vmm_started = record_vmm;
    co.emulator_cpus = plan->cpus.emulator_cpus;
    co.realtime = plan->cpus.realtime;
    co.realtime_vcpus = plan->cpus.realtime_vcpus;
    co.realtime_priority = plan->cpus.realtime_priority;
    // A live migration holds CH's API for as long as it runs: bounded by CH's own timeout_s
    // (KubeVirt's CompletionTimeoutPerGiB), not by the HTTP client.
    co.client.migration_timeout = std::chrono::hours(24 * 7);
    if (opts.api_timeout_ms) {
      co.client.timeout = std::chrono::milliseconds(std::min(*opts.api_timeout_ms, 5000));
      co.client.long_timeout = std::chrono::milliseconds(*opts.api_timeout_ms);
    }
    if (wired) {
      for (const auto& w : wired->interfaces())
        co.nets.push_back(opts.ch_taps_by_name
                              ? cloud_hypervisor::ChDriverOptions::NetAttachment{network::ch_net_config_by_name(w), {}}
                              : cloud_hypervisor::ChDriverOptions::NetAttachment{network::ch_net_config(w),
                                                                                 network::tap_fd_numbers(w)});
    }
    what = "cloud-hypervisor (" + *found + ")";
    driver = std::make_unique<cloud_hypervisor::CloudHypervisorDriver>(io, co, cloud_hypervisor::to_ch_vm_config(*plan));
  }

  // 5. Run.
  launcher::ServiceOptions so;
  so.vmi = {vmi.metadata.name, vmi.metadata.namespace_, vmi.metadata.uid};
  so.state_dir = dir;
  so.launcher_socket = opts.command_socket ? *opts.command_socket : launcher_socket_path(dir, opts.pod_layout);
  so.console_socket = opts.console_socket ? *opts.console_socket
                                          : console_socket_path(dir, opts.pod_layout, vmi.metadata.uid);
  if (opts.grace_period_seconds) so.grace_period = std::chrono::seconds(*opts.grace_period_seconds);
  else if (vmi.spec.termination_grace_period_seconds) so.grace_period = std::chrono::seconds(*vmi.spec.termination_grace_period_seconds);
  so.console_take_over = opts.console_take_over;
  so.console_log = opts.console_log;
  so.restore_from = opts.restore_from;
  so.incoming_migration = opts.incoming_migration;
  if (auto m = sandbox::parse_seccomp_mode(opts.seccomp); m) so.seccomp = *m;

  if (opts.pod_layout || opts.command_socket || opts.console_socket) {
    std::error_code ec;
    fs::create_directories(so.launcher_socket.parent_path(), ec);
    fs::create_directories(so.console_socket.parent_path(), ec);
  }
  auto listener = common::listen_unix(so.launcher_socket);
  if (!listener) return launch_error("command socket: " + listener.error().message());

  int code;
  {
    launcher::LauncherService service(io, so, std::move(driver));
    control::CommandApi api(service, std::move(*listener));
    api.start();
    service.add_transport_stopper([&api] { api.stop(); });
    CHL_LOG_INFO("launching {}/{} on {}, state directory {}", vmi.metadata.namespace_, vmi.metadata.name, what,
                 dir.string());
    if (hooks.on_service) hooks.on_service(service, *checked);
    code = service.run();
    if (hooks.on_finished) hooks.on_finished(code);
  }
  ::unlink(so.launcher_socket.c_str());
  ::unlink(so.console_socket.c_str());
  state->clear_vmm();
  state->remove_runtime_files();
  return code;
}

}  // namespace chl::cli

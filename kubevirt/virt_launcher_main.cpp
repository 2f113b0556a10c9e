// virt-launcher mode, the body of `ch-launcher virt-launcher [flags]` (also run as
// `virt-launcher` or `virt-launcher-monitor`: cli/main.cpp, cli/virt_launcher.cpp), in the
// module libchl-kubevirt.so so that `run` never maps its libraries (libnghttp2,
// libprotobuf-lite). KubeVirt's compute container entry point. It accepts virt-launcher's own
// flags (pkg/virt-controller/services/template.go writes them), serves KubeVirt's command
// protocol on <share>/sockets/launcher-init-sock → launcher-sock (kubevirt/cmd_server.hpp), and
// on the first Sync that names a VMI it can run, launches it exactly as `run` does
// (run_launcher.cpp) with KubeVirt's pod paths, telling virt-handler about the domain through
// <share>/domain-notify-pipe.sock (kubevirt/launcher_handler.hpp). The monitor's duties —
// SIGTERM marking the domain for graceful shutdown (virt-handler then stops it; our timer forces
// it off after --grace-period-seconds, pkg/virt-launcher/monitor.go), reaping the VMM, the exit
// code — are the launcher's own. A boot the VMM refuses fails its Sync and the launcher serves
// on; once a VM has run, the launcher stays until virt-handler's DeleteDomain (or 15 + 30 s) and
// exits 0, as KubeVirt's does.
#include "kubevirt/virt_launcher_main.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/log.hpp"
#include "kubevirt/cmd_server.hpp"
#include "kubevirt/launcher_handler.hpp"
#include "kubevirt/notify_client.hpp"
#include "launcher/launch_options.hpp"
#include "launcher/vmm_binary.hpp"
#include "vmi/parser.hpp"

namespace chl::kubevirt {
namespace {
namespace fs = std::filesystem;
using chl::launcher::kExitInvalidInput;
using chl::launcher::kExitLaunchFailed;

// SIGTERM/SIGINT before the service runs (it installs its own handlers then): the handler
// writes to a pipe (async-signal-safe) that a watcher thread blocks on, so nothing polls.
int g_terminate_pipe[2] = {-1, -1};
void on_terminate(int) {
  const char b = 1;
  (void)!::write(g_terminate_pipe[1], &b, 1);
}

struct Flags {
  std::map<std::string, std::string> values;
  std::set<std::string> switches;
  std::vector<std::string> ignored;
};

// virt-launcher's flags, and ours. Anything else is accepted and logged once (a newer
// virt-handler's pod spec must not crash us): a following word that is not a flag is its value.
const std::set<std::string> kValueFlags = {
    "--name", "--uid", "--namespace", "--kubevirt-share-dir", "--ephemeral-disk-dir", "--container-disk-dir",
    "--hotplug-disk-dir", "--grace-period-seconds", "--hypervisor", "--qemu-timeout", "--ovmf-path",
    "--hook-sidecars", "--private-dir", "--vmm-binary", "--state-dir", "--log-level", "--log-file", "--seccomp",
    "--accel", "--firmware-dir", "--access-credentials-batch-ms", "--network-info"};
const std::set<std::string> kSwitches = {"--allow-emulation", "--keep-after-failure", "--no-fork",
                                         "--simulate-crash", "--run-as-nonroot"};

bool parse(const std::vector<std::string>& argv, Flags& f, std::string& error) {
  for (std::size_t i = 0; i < argv.size(); ++i) {
    std::string a = argv[i];
    std::string value;
    bool has_value = false;
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_value = true;
    }
    if (a.rfind("--", 0) != 0) {
      error = "unexpected argument " + a;
      return false;
    }
    if (kSwitches.count(a)) {
      f.switches.insert(a);
      continue;
    }
    if (!has_value && i + 1 < argv.size() && argv[i + 1].rfind("--", 0) != 0) {
      value = argv[++i];
      has_value = true;
    }
    if (kValueFlags.count(a)) {
      if (!has_value) {
        error = a + " needs a value";
        return false;
      }
      f.values[a] = value;
    } else {
      f.ignored.push_back(a);
    }
  }
  return true;
}

std::string get(const Flags& f, const std::string& k, const std::string& def) {
  auto it = f.values.find(k);
  return it == f.values.end() ? def : it->second;
}

// KubeVirt names the kernel's hypervisor in --hypervisor (its HypervisorConfiguration: "kvm",
// the default, or "hyperv-direct"), not the VMM: an unchanged KubeVirt always writes one of
// those. Which VMM runs on it is the image's to say, in CHL_VMM (the container image sets
// cloud-hypervisor; unset, "kvm" means QEMU through libvirt, as in KubeVirt's own image). Our
// own names choose the VMM directly. The VMM's name, with `why` saying what was chosen; nullopt
// with `why` saying what is wrong.
std::optional<std::string> vmm_for(const std::string& flag, std::string& why) {
  const char* env = std::getenv("CHL_VMM");
  std::string image_vmm = env && *env ? env : "qemu-kvm";
  if (image_vmm == "ch") image_vmm = "cloud-hypervisor";
  if (image_vmm != "cloud-hypervisor" && image_vmm != "qemu-kvm") {
    why = "CHL_VMM takes cloud-hypervisor or qemu-kvm, got " + image_vmm;
    return std::nullopt;
  }
  if (flag == "ch" || flag == "cloud-hypervisor") {
    why = "Cloud Hypervisor";
    return "cloud-hypervisor";
  }
  if (flag == "qemu" || flag == "qemu-kvm") {
    why = "QEMU through libvirt";
    return "qemu-kvm";
  }
  if (flag == "kvm") {
    why = image_vmm == "cloud-hypervisor" ? "Cloud Hypervisor on /dev/kvm (CHL_VMM=cloud-hypervisor)"
                                          : "QEMU through libvirt on /dev/kvm";
    return image_vmm;
  }
  if (flag == "hyperv-direct") {
    if (image_vmm == "cloud-hypervisor") {
      why = "Cloud Hypervisor on /dev/mshv (CHL_VMM=cloud-hypervisor)";
      return image_vmm;
    }
    why = "--hypervisor hyperv-direct needs Cloud Hypervisor (CHL_VMM=cloud-hypervisor): the libvirt path runs QEMU on KVM only";
    return std::nullopt;
  }
  why = "--hypervisor takes kvm or hyperv-direct (KubeVirt's), or cloud-hypervisor or qemu-kvm, got " + flag;
  return std::nullopt;
}

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "ch-launcher virt-launcher: %s (see `ch-launcher help virt-launcher`)\n", msg.c_str());
  return kExitInvalidInput;
}

// KubeVirt's LiveMigratable condition (status.conditions, set by virt-controller) is True.
bool live_migratable(const std::string& vmi_text) {
  const auto j = nlohmann::json::parse(vmi_text, nullptr, false);
  if (!j.is_object()) return false;
  for (const auto& c :
       j.value("status", nlohmann::json::object()).value("conditions", nlohmann::json::array()))
    if (c.is_object() && c.value("type", "") == "LiveMigratable" && c.value("status", "") == "True")
      return true;
  return false;
}

}  // namespace

int virt_launcher_main(const std::vector<std::string>& argv, const launcher::RunLaunch& run_launch) {
  Flags f;
  std::string error;
  if (!parse(argv, f, error)) return usage_error(error);
  spdlog::level::level_enum level = spdlog::level::info;
  if (auto l = get(f, "--log-level", ""); !l.empty() && !chl::common::log::parse_level(l, level))
    return usage_error("--log-level: unknown level " + l);
  chl::common::log::init("virt-launcher", level, get(f, "--log-file", ""));
  for (const auto& i : f.ignored) CHL_LOG_INFO("virt-launcher: flag {} accepted and ignored", i);

  std::string why;
  auto vmm = vmm_for(get(f, "--hypervisor", "cloud-hypervisor"), why);
  if (!vmm) return usage_error(why);
  const std::string hypervisor = *vmm;
  CHL_LOG_INFO("virt-launcher: --hypervisor {}: {}", get(f, "--hypervisor", "cloud-hypervisor"), why);
  if (const std::string hooks = get(f, "--hook-sidecars", "0"); hooks != "0")
    return usage_error("--hook-sidecars " + hooks +
                                                      ": hook sidecars are not supported by ch-launcher (only 0)");

  const fs::path share = get(f, "--kubevirt-share-dir", "/var/run/kubevirt");
  const fs::path private_dir = get(f, "--private-dir", "/var/run/kubevirt-private");
  const fs::path ephemeral = get(f, "--ephemeral-disk-dir", "/var/run/kubevirt-ephemeral-disks");
  const std::string uid = get(f, "--uid", "");

  chl::launcher::LaunchOptions lo;
  lo.default_hypervisor = hypervisor;
  lo.pod_layout = true;
  lo.network_phase1 = false;  // virt-handler wired the pod (issue 22): phase 2 only
  lo.ch_taps_by_name = true;  // a live migration's target opens its own taps (issue 30)
  lo.container_disk_dir = get(f, "--container-disk-dir", "/var/run/kubevirt/container-disks");
  lo.private_dir = private_dir.string();
  lo.virtiofs_dir = (share / "virtiofs-containers").string();  // pkg/virtiofs/virtiofs.go
  lo.vmm_binary = get(f, "--vmm-binary", "");
  lo.state_dir = fs::absolute(get(f, "--state-dir", (ephemeral / "ch-launcher").string()));
  lo.command_socket = *lo.state_dir / "launcher.sock";  // launcher-sock is KubeVirt's gRPC server
  lo.firmware_dir = get(f, "--firmware-dir", hypervisor == "qemu-kvm" ? get(f, "--ovmf-path", "") : "");
  lo.accel = get(f, "--accel", f.switches.count("--allow-emulation") ? "auto" : "kvm");
  // The launcher confines itself once the VMM runs, as `run` does; the KubeVirt transport's
  // threads (poll, accept4, sendmsg, eventfd...) stay within the allow-list
  // (docs/kubevirt/protocol.md).
  lo.seccomp = get(f, "--seccomp", "enforce");
  if (auto g = get(f, "--grace-period-seconds", ""); !g.empty()) {
    try {
      lo.grace_period_seconds = std::stoi(g);
    } catch (const std::exception&) {
      return usage_error("--grace-period-seconds takes a number, got " + g);
    }
  }

  if (::pipe2(g_terminate_pipe, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "ch-launcher virt-launcher: pipe: %s\n", std::strerror(errno));
    return kExitLaunchFailed;
  }
  struct sigaction sa{};
  sa.sa_handler = on_terminate;
  ::sigemptyset(&sa.sa_mask);
  // Ours whenever no service runs: the service's own handlers (asio) put back the default
  // disposition when it ends, so they are installed again after each launch.
  const auto own_signals = [&sa] {
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGINT, &sa, nullptr);
  };
  own_signals();

  chl::kubevirt::NotifyClientOptions no;
  no.socket_path = (share / "domain-notify-pipe.sock").string();
  chl::kubevirt::NotifyClient notify(no);
  chl::kubevirt::LauncherHandlerOptions ho;
  ho.hypervisor = hypervisor;
  ho.name = get(f, "--name", "");
  ho.namespace_ = get(f, "--namespace", "");
  ho.uid = uid;
  ho.hotplug_disk_dir = get(f, "--hotplug-disk-dir", "/var/run/kubevirt/hotplug-disks");
  ho.migration_proxy_dir = (share / "migrationproxy").string();
  ho.relay_dir = lo.state_dir->string();
  // The guest agent: on Cloud Hypervisor the hybrid vsock the plan puts in the state directory
  // (launcher/plan.hpp AgentChannel); on QEMU libvirt holds the channel (not reached yet).
  if (hypervisor == "cloud-hypervisor")
    ho.agent_vsock_socket = (*lo.state_dir / "agent.vsock").string();
  ho.virtiofs_dir = lo.virtiofs_dir;
  // KubeVirt's network-info through the downward API (pkg/network/downwardapi); a flag of ours
  // (virt-launcher has none: its path is fixed), for tests.
  lo.network_info_path = get(f, "--network-info", lo.network_info_path);
  ho.network_info_path = lo.network_info_path;
  // The access-credential Secrets: KubeVirt's config.SecretSourceDir (pkg/config/config.go:65).
  ho.secret_dir = (private_dir / "secret").string();
  if (auto b = get(f, "--access-credentials-batch-ms", ""); !b.empty()) {
    try {
      ho.access_credentials_batch = std::chrono::milliseconds(std::stoul(b));
    } catch (const std::exception&) {
      return usage_error("--access-credentials-batch-ms takes a number of milliseconds, got " + b);
    }
  }
  chl::kubevirt::LauncherHandler handler(ho, &notify);
  chl::kubevirt::CmdServerOptions so;
  so.share_dir = share;
  so.not_supported = "not supported by " + hypervisor;
  auto server = chl::kubevirt::CmdServer::start(so, handler);
  if (!server) {
    std::fprintf(stderr, "ch-launcher virt-launcher: command server: %s\n", server.error().message().c_str());
    return kExitLaunchFailed;
  }
  CHL_LOG_INFO("virt-launcher: serving KubeVirt's command protocol on {} ({})", (*server)->socket_path().string(),
               hypervisor);
  if (hypervisor == "cloud-hypervisor") {
    // Said at start, not at the first Sync: an image built without a VMM (docs/deploy.md).
    if (auto vmm = chl::launcher::cloud_hypervisor_binary(lo.vmm_binary); !vmm)
      CHL_LOG_WARN("virt-launcher: no Cloud Hypervisor binary ('{}'): a Sync will fail until there is one",
                   lo.vmm_binary.empty() ? std::string("cloud-hypervisor") : lo.vmm_binary);
    else if (auto note = chl::launcher::placeholder_vmm_message(*vmm); !note.empty())
      CHL_LOG_WARN("virt-launcher: {}", note);
  }

  // STANDALONE_VMI: the VMI to sync at start, as upstream's virt-launcher does.
  std::optional<std::string> standalone;
  if (const char* s = std::getenv("STANDALONE_VMI"); s && *s) standalone = s;

  std::thread watcher([&handler] {
    char b = 0;
    while (::read(g_terminate_pipe[0], &b, 1) < 0 && errno == EINTR) {
    }
    handler.stop();
  });
  int code = 0;
  bool ended = false;  // the VM ran and its end was told (the launcher exits 0, as KubeVirt's)
  while (!ended) {
    std::string vmi_text;
    std::optional<chl::launcher::SmbiosSystem> smbios;
    std::vector<std::string> preallocated;
    std::uint32_t balloon_stats = 0;
    std::optional<std::string> incoming_migration;
    bool serial_console_log_disabled = false;  // the cluster's, from Sync's options
    if (standalone) {
      vmi_text = std::move(*standalone);
      standalone.reset();
    } else {
      auto req = handler.wait_launch();
      if (!req) break;  // SIGTERM before any VM ran
      vmi_text = std::move(req->vmi_json);
      // VirtualMachineOptions.VirtualMachineSMBios: KubeVirt's cluster SMBIOS setting.
      if (const auto& s = req->options.smbios)
        smbios = chl::launcher::SmbiosSystem{s->manufacturer, s->product, s->version, s->sku, s->family};
      preallocated = req->options.preallocated_volumes;
      balloon_stats = req->options.mem_balloon_stats_period;
      incoming_migration = req->incoming_migration;
      serial_console_log_disabled = req->options.serial_console_log_disabled;
    }
    chl::launcher::LaunchOptions this_launch = lo;
    this_launch.smbios = smbios;
    this_launch.preallocated_volumes = std::move(preallocated);
    this_launch.mem_balloon_stats_period = balloon_stats;
    this_launch.incoming_migration = incoming_migration;
    this_launch.migratable = live_migratable(vmi_text);
    launcher::LaunchHooks hooks;
    hooks.vmi_text = vmi_text;
    hooks.on_failure = [&handler](const std::string& msg, int) { handler.launch_failed(msg); };
    hooks.on_service = [&handler](chl::launcher::LauncherService& service, const chl::vmi::CheckedVmi& checked) {
      handler.attach(service, checked);
    };
    // false: the boot failed, the launcher serves on for virt-handler's next Sync.
    hooks.on_finished = [&handler, &ended](int c) { ended = handler.finished(c); };
    // The console socket is KubeVirt's <private-dir>/<uid>/virt-serial0, with the VMI's uid, and
    // its log <private-dir>/<uid>/virt-serial0-log, what the pod's guest-console-log sidecar
    // tails (virt-tail --logfile …; serialconsolelog.go:19). KubeVirt's domain gets that log
    // (appended to, never truncated: converter/compute/console.go:78-83, append="on") when
    // logSerialConsole is true, or absent and the cluster's serial console log is not disabled
    // (virtwrap/manager.go:1432); else no log is written.
    const auto parsed = chl::vmi::parse_vmi(vmi_text);
    std::string vmi_uid = parsed.vmi.metadata.uid;
    if (vmi_uid.empty()) vmi_uid = uid.empty() ? std::string("vmi") : uid;
    this_launch.console_socket = private_dir / vmi_uid / "virt-serial0";
    const auto log_serial = parsed.vmi.spec.domain.devices.log_serial_console;
    const bool console_log = log_serial ? *log_serial : !serial_console_log_disabled;
    this_launch.console_log = console_log ? private_dir / vmi_uid / "virt-serial0-log" : fs::path();
    code = run_launch(this_launch, hooks);
    own_signals();
    if (!ended) CHL_LOG_WARN("virt-launcher: the launch failed (exit {}); waiting for the next Sync", code);
  }
  on_terminate(0);  // let the watcher go
  watcher.join();
  ::close(g_terminate_pipe[0]);
  ::close(g_terminate_pipe[1]);
  server->reset();
  // KubeVirt's virt-launcher returns from main (exit 0) once the domain's end was told, however
  // the VM ended (cmd/virt-launcher/virt-launcher.go:533-564).
  if (ended) CHL_LOG_INFO("virt-launcher: the domain is gone (the VM's launch ended with {}); exit 0", code);
  return 0;
}

}  // namespace chl::kubevirt

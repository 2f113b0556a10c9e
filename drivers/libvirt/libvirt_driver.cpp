#include "drivers/libvirt/libvirt_driver.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "common/log.hpp"
#include "common/xml_escape.hpp"
#include "drivers/libvirt/daemon.hpp"
#include "drivers/libvirt/domain_xml.hpp"
#include "drivers/libvirt/live_xml.hpp"
#include "launcher/state_dir.hpp"

namespace chl::libvirt {
namespace asio = boost::asio;
using common::fail;
using common::Result;
using common::Status;
using nlohmann::json;

namespace {

const char* kNotSupported = "not supported by qemu-kvm";

// Callbacks run on the libvirt event loop thread: match the domain, post to the io_context.
template <typename F>
void post_to_driver(void* opaque, virDomainPtr dom, F&& f) {
  auto* link = static_cast<std::shared_ptr<LibvirtDriver::Link>*>(opaque);
  std::shared_ptr<LibvirtDriver::Link> l = *link;
  {
    std::lock_guard lk(l->mu);
    if (!l->driver || !l->io) return;
    if (dom) {
      const char* name = virDomainGetName(dom);
      if (!name || l->name != name) return;
    }
    asio::post(*l->io, [l, f = std::forward<F>(f)]() {
      std::lock_guard lk2(l->mu);
      if (l->driver) f(*l->driver);
    });
  }
}

int lifecycle_cb(virConnectPtr, virDomainPtr dom, int event, int detail, void* opaque) {
  post_to_driver(opaque, dom, [event, detail](LibvirtDriver& d) { d.on_lifecycle(event, detail); });
  return 0;
}

void reboot_cb(virConnectPtr, virDomainPtr dom, void* opaque) {
  post_to_driver(opaque, dom, [](LibvirtDriver& d) { d.on_reboot(); });
}

// virConnectDomainEventAgentLifecycleCallback: KubeVirt's channel state comes from this event too.
void agent_lifecycle_cb(virConnectPtr, virDomainPtr dom, int state, int, void* opaque) {
  post_to_driver(opaque, dom, [state](LibvirtDriver& d) { d.on_agent_lifecycle(state); });
}

void close_cb(virConnectPtr, int reason, void* opaque) {
  post_to_driver(opaque, nullptr, [reason](LibvirtDriver& d) { d.on_connection_closed(reason); });
}

void free_link(void* opaque) { delete static_cast<std::shared_ptr<LibvirtDriver::Link>*>(opaque); }

std::string_view state_name(int s) {
  switch (s) {
    case VIR_DOMAIN_RUNNING:
      return "running";
    case VIR_DOMAIN_BLOCKED:
      return "blocked";
    case VIR_DOMAIN_PAUSED:
      return "paused";
    case VIR_DOMAIN_SHUTDOWN:
      return "shutting-down";
    case VIR_DOMAIN_SHUTOFF:
      return "shutoff";
    case VIR_DOMAIN_CRASHED:
      return "crashed";
    case VIR_DOMAIN_PMSUSPENDED:
      return "pmsuspended";
    default:
      return "nostate";
  }
}

}  // namespace

LibvirtDriver::LibvirtDriver(asio::io_context& io, LibvirtDriverOptions options,
                             std::optional<LibvirtDaemons> daemons)
    : daemons_(std::move(daemons)),
      io_(io),
      opts_(std::move(options)),
      link_(std::make_shared<Link>()),
      agent_(std::make_shared<LibvirtAgentTransport>(io, opts_.domain_name)),
      gone_timer_(io) {
  link_->driver = this;
  link_->io = &io_;
  link_->name = opts_.domain_name;
}

LibvirtDriver::~LibvirtDriver() {
  {
    std::lock_guard lk(link_->mu);
    link_->driver = nullptr;
  }
  cleanup();
}

void LibvirtDriver::cleanup() {
  boost::system::error_code ec;
  if (qemu_watch_) qemu_watch_->close(ec);
  gone_timer_.cancel();
  if (libvirt_silent_ && conn_) {
    // Every call below would wait for an answer that does not come: the handles are left to
    // the process's exit (its socket closes; libvirtd, if it wakes, destroys the AUTODESTROY
    // domain and ends once idle).
    CHL_LOG_WARN(
        "libvirt: the daemon stopped answering; leaving the connection without closing it");
    (void)dom_.release();
    (void)conn_.release();
    callbacks_.clear();
    if (daemons_) daemons_->forget_connections();
  }
  if (conn_) {
    for (int id : callbacks_) (void)virConnectDomainEventDeregisterAny(conn_.get(), id);
    callbacks_.clear();
    agent_->set_domain(nullptr);
    if (dom_) {
      int st = 0, reason = 0;
      if (virDomainGetState(dom_.get(), &st, &reason, 0) == 0 && st != VIR_DOMAIN_SHUTOFF) {
        CHL_LOG_WARN("libvirt: domain {} still {} at exit: destroying it", opts_.domain_name,
                     state_name(st));
        if (virDomainDestroy(dom_.get()) != 0)
          CHL_LOG_WARN("libvirt: destroy: {}", libvirt_last_error());
      }
      // A received domain is persistent (VIR_MIGRATE_PERSIST_DEST, as KubeVirt migrates): its
      // definition goes with the launcher, as the transient one we create does.
      if (virDomainIsPersistent(dom_.get()) == 1 && virDomainUndefine(dom_.get()) != 0)
        CHL_LOG_WARN("libvirt: undefine: {}", libvirt_last_error());
      dom_.reset();
    }
    if (close_cb_) (void)virConnectUnregisterCloseCallback(conn_.get(), close_cb);
    close_cb_ = false;
    conn_.reset();
  }
  loop_.stop();
  if (process_alive(qemu_pid_.load())) {
    CHL_LOG_WARN("libvirt: QEMU pid {} still running after the domain ended", qemu_pid_.load());
    kill_vmm();
  }
}

Status LibvirtDriver::launch(EventSink sink, ExitHandler on_exit) {
  sink_ = std::move(sink);
  on_exit_ = std::move(on_exit);
  // The first start is a paused one (create_and_boot), or a migration's incoming domain.
  if (opts_.incoming)
    tracker_.expect_incoming();
  else
    tracker_.expect_paused_start();
  return common::wrap(loop_.start(), "libvirt event loop");
}

Status LibvirtDriver::connect() {
  conn_.reset(virConnectOpen(opts_.uri.c_str()));
  if (!conn_) return libvirt_fail("connecting to " + opts_.uri);
  // No keepalive timer: the daemon's death is seen as end of file on the socket anyway, and an
  // idle launcher then has nothing waking it up.
  (void)virConnectSetKeepAlive(conn_.get(), -1, 0);
  auto* cl = new std::shared_ptr<Link>(link_);
  if (virConnectRegisterCloseCallback(conn_.get(), close_cb, cl, free_link) == 0) {
    close_cb_ = true;
  } else {
    delete cl;
    CHL_LOG_WARN("libvirt: no close callback: {}", libvirt_last_error());
  }
  auto* l1 = new std::shared_ptr<Link>(link_);
  int id = virConnectDomainEventRegisterAny(conn_.get(), nullptr, VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                                            VIR_DOMAIN_EVENT_CALLBACK(lifecycle_cb), l1, free_link);
  if (id < 0) {
    delete l1;
    return libvirt_fail("registering for lifecycle events");
  }
  callbacks_.push_back(id);
  auto* l2 = new std::shared_ptr<Link>(link_);
  id = virConnectDomainEventRegisterAny(conn_.get(), nullptr, VIR_DOMAIN_EVENT_ID_REBOOT,
                                        VIR_DOMAIN_EVENT_CALLBACK(reboot_cb), l2, free_link);
  if (id < 0) {
    delete l2;
    return libvirt_fail("registering for reboot events");
  }
  callbacks_.push_back(id);
  auto* l3 = new std::shared_ptr<Link>(link_);
  id = virConnectDomainEventRegisterAny(conn_.get(), nullptr, VIR_DOMAIN_EVENT_ID_AGENT_LIFECYCLE,
                                        VIR_DOMAIN_EVENT_CALLBACK(agent_lifecycle_cb), l3,
                                        free_link);
  if (id < 0) {
    delete l3;
    return libvirt_fail("registering for guest agent lifecycle events");
  }
  callbacks_.push_back(id);
  unsigned long version = 0;
  if (virConnectGetVersion(conn_.get(), &version) == 0) {
    std::lock_guard lk(id_mu_);
    qemu_version_ = std::to_string(version / 1000000) + "." +
                    std::to_string(version / 1000 % 1000) + "." + std::to_string(version % 1000);
  }
  return {};
}

pid_t LibvirtDriver::read_qemu_pid() const {
  std::ifstream f(opts_.qemu_pid_dir / (opts_.domain_name + ".pid"));
  long pid = -1;
  if (!(f >> pid)) return -1;
  return static_cast<pid_t>(pid);
}

Result<std::optional<std::string>> LibvirtDriver::pty_from_live_xml() {
  CHL_TRY(auto xml, live_xml());
  return live_serial_pty(xml);
}

Result<std::string> LibvirtDriver::live_xml() {
  CHL_TRY_VOID(need_domain());
  VirString xml(virDomainGetXMLDesc(dom_.get(), 0));
  if (!xml) return libvirt_fail("reading the live domain XML");
  return std::string(xml.get());
}

// The state directory a ch-launcher domain records in its <metadata> (domain_xml.hpp), "" when
// it has none.
static std::string recorded_state_dir(virDomainPtr dom) {
  VirString meta(virDomainGetMetadata(dom, VIR_DOMAIN_METADATA_ELEMENT, kLauncherMetadataUri, 0));
  if (!meta) return {};
  std::string_view m(meta.get());
  auto open = m.find("state-dir>");
  if (open == std::string_view::npos) return {};
  open += std::strlen("state-dir>");
  auto close = m.find("</", open);
  if (close == std::string_view::npos) return {};
  return common::xml_unescape(m.substr(open, close - open));
}

Status LibvirtDriver::check_stale_domain(virDomainPtr old) const {
  const std::string owner = recorded_state_dir(old);
  if (owner.empty())
    return fail(std::errc::file_exists,
                "a domain " + opts_.domain_name +
                    " exists that ch-launcher did not start (no ch-launcher metadata); it is left "
                    "alone: remove it (virsh destroy " + opts_.domain_name + ") or rename the VMI");
  std::error_code ec;
  const bool ours = owner == opts_.state_dir.string() ||
                    std::filesystem::equivalent(owner, opts_.state_dir, ec);
  if (!ours && launcher::state_dir_in_use(owner))
    return fail(std::errc::device_or_resource_busy,
                "a domain " + opts_.domain_name + " is run by another live launcher (state directory " +
                    owner + "); it is left alone");
  return {};
}

Result<std::optional<std::string>> LibvirtDriver::create_and_boot() {
  auto fail_start = [this](common::Error e) -> Result<std::optional<std::string>> {
    if (dom_) {
      if (virDomainDestroy(dom_.get()) != 0)
        CHL_LOG_WARN("libvirt: destroying the failed domain: {}", libvirt_last_error());
    }
    start_failed_ = true;
    return tl::unexpected(std::move(e));
  };
  if (auto st = connect(); !st) return fail_start(st.error());
  // A domain of this name already there: one a launcher that died left behind (AUTODESTROY
  // normally removes it) is destroyed; one another live launcher runs, or one ch-launcher did
  // not start, is never touched.
  if (VirDomain old{virDomainLookupByName(conn_.get(), opts_.domain_name.c_str())}) {
    if (auto st = check_stale_domain(old.get()); !st) return fail_start(st.error());
    CHL_LOG_WARN("libvirt: a domain {} already exists (left by a launcher that died): destroying it",
                 opts_.domain_name);
    if (virDomainDestroy(old.get()) != 0 && virDomainIsActive(old.get()) != 0)
      return fail_start(libvirt_fail("destroying the stale domain " + opts_.domain_name).value());
  }
  CHL_LOG_INFO("libvirt: creating domain {} ({})", opts_.domain_name, opts_.accel.why);
  dom_.reset(virDomainCreateXML(
      conn_.get(), opts_.domain_xml.c_str(),
      VIR_DOMAIN_START_PAUSED |
          (opts_.autodestroy ? static_cast<unsigned>(VIR_DOMAIN_START_AUTODESTROY) : 0U)));
  if (!dom_) return fail_start(libvirt_fail("creating the domain").value());
  agent_->set_domain(dom_.get());
  pid_t pid = read_qemu_pid();
  qemu_pid_ = pid;
  take_qemu_pidfd(pid);
  if (pid > 0 && opts_.on_vmm_started) opts_.on_vmm_started(pid);
  auto pty = hold_console();
  if (!pty) return fail_start(pty.error());
  if (virDomainResume(dom_.get()) != 0)
    return fail_start(libvirt_fail("starting the guest's vCPUs").value());
  return *pty;
}

Result<std::optional<std::string>> LibvirtDriver::hold_console() {
  auto pty = pty_from_live_xml();
  if (!pty) return tl::unexpected(pty.error().wrap("the console PTY"));
  if (*pty) {
    pty_hold_.reset(::open((*pty)->c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK));
    if (!pty_hold_) return common::fail_errno("opening the console PTY " + **pty);
    termios t{};
    if (::tcgetattr(pty_hold_.get(), &t) == 0) {
      ::cfmakeraw(&t);  // never echo the guest's output back to it
      (void)::tcsetattr(pty_hold_.get(), TCSANOW, &t);
    }
  }
  return *pty;
}

Status LibvirtDriver::need_domain() const {
  if (!dom_) return fail(std::errc::operation_not_permitted, "the domain does not exist (yet)");
  return {};
}

Status LibvirtDriver::pause() {
  CHL_TRY_VOID(need_domain());
  if (virDomainSuspend(dom_.get()) != 0) return libvirt_fail("pausing");
  return {};
}

Status LibvirtDriver::resume() {
  CHL_TRY_VOID(need_domain());
  if (virDomainResume(dom_.get()) != 0) return libvirt_fail("resuming");
  return {};
}

Status LibvirtDriver::reboot() {
  // A reset, like Cloud Hypervisor's vm.reboot (not the guest-cooperative virDomainReboot).
  CHL_TRY_VOID(need_domain());
  if (virDomainReset(dom_.get(), 0) != 0) return libvirt_fail("resetting");
  return {};
}

Status LibvirtDriver::power_button() {
  CHL_TRY_VOID(need_domain());
  // SignalShutdownVMI (KubeVirt pkg/virt-launcher/virtwrap/manager.go) presses the button only
  // on a domain that is running or paused: one already off has nothing to do. A guest can also
  // power off between that check and the press (a second Shutdown right after the first): libvirt
  // then answers "domain is not running", which is the same success.
  const auto off = [this] {
    int st = 0, reason = 0;
    return virDomainGetState(dom_.get(), &st, &reason, 0) == 0 && st != VIR_DOMAIN_RUNNING &&
           st != VIR_DOMAIN_PAUSED && st != VIR_DOMAIN_BLOCKED;
  };
  if (off()) return {};
  if (virDomainShutdownFlags(dom_.get(), VIR_DOMAIN_SHUTDOWN_ACPI_POWER_BTN) != 0) {
    Status failed = libvirt_fail("pressing the ACPI power button");
    if (off()) return {};
    return failed;
  }
  return {};
}

Status LibvirtDriver::force_off() {
  CHL_TRY_VOID(need_domain());
  // SIGTERM to QEMU, SIGKILL after libvirt's own timeout.
  if (virDomainDestroy(dom_.get()) != 0) return libvirt_fail("destroying the domain");
  return {};
}

Result<json> LibvirtDriver::info() {
  CHL_TRY_VOID(need_domain());
  virDomainInfo in{};
  if (virDomainGetInfo(dom_.get(), &in) != 0) return libvirt_fail("reading the domain info");
  int st = 0, reason = 0;
  if (virDomainGetState(dom_.get(), &st, &reason, 0) != 0)
    return libvirt_fail("reading the domain state");
  const int max_vcpus = virDomainGetMaxVcpus(dom_.get());
  if (max_vcpus < 0) return libvirt_fail("reading the maximum vCPUs");
  CHL_TRY(auto xml, live_xml());
  // The fields Cloud Hypervisor's vm.info has, where it has them (driver.hpp), then libvirt's own.
  json disks = json::array();
  for (const auto& d : live_disks(xml))
    disks.push_back({{"id", d.id},
                     {"path", d.path},
                     {"readonly", d.readonly},
                     {"target", d.target},
                     {"device", d.device}});
  const auto ours = libvirt_domain_state(st, reason);
  json memory_device;  // the virtio-mem device once memory was hotplugged
  if (auto dev = live_virtio_mem(xml))
    memory_device = {{"size_kib", live_size_kib(*dev, "size").value_or(0)},
                     {"requested_kib", live_size_kib(*dev, "requested").value_or(0)},
                     {"current_kib", live_size_kib(*dev, "current").value_or(0)}};
  // The NICs as the guest got them (MAC, tap, MTU): KubeVirt's domain document reports these.
  json nets = json::array();
  for (const auto& i : live_interfaces(xml))
    nets.push_back(
        {{"id", i.id}, {"mac", i.mac}, {"tap", i.tap}, {"mtu", i.mtu}, {"model", i.model}});
  return json{{"config",
               {{"cpus", {{"boot_vcpus", in.nrVirtCpu}, {"max_vcpus", max_vcpus}}},
                {"memory", {{"size", std::uint64_t{in.maxMem} * 1024}}},
                {"disks", std::move(disks)},
                {"net", std::move(nets)}}},
              {"machine", live_machine(xml)},
              {"state", events::to_string(ours.state)},
              {"reason", events::to_string(ours.reason)},
              {"memory_actual_size", std::uint64_t{in.memory} * 1024},
              {"domain", opts_.domain_name},
              {"libvirt_state", state_name(st)},
              {"libvirt_reason", reason},
              {"max_memory_kib", in.maxMem},
              {"memory_kib", in.memory},
              {"vcpus", in.nrVirtCpu},
              {"cpu_time_ns", in.cpuTime},
              {"virtio_mem", memory_device},
              {"accel", to_string(opts_.accel.accel)}};
}

Result<std::optional<std::string>> LibvirtDriver::console_pty() { return pty_from_live_xml(); }

Result<json> LibvirtDriver::counters() {
  CHL_TRY_VOID(need_domain());
  virDomainInfo in{};
  if (virDomainGetInfo(dom_.get(), &in) != 0) return libvirt_fail("reading the domain info");
  return json{{"cpu_time_ns", in.cpuTime}};
}

Status LibvirtDriver::snapshot(const std::filesystem::path&) {
  return fail(std::errc::operation_not_supported, std::string("snapshot: ") + kNotSupported);
}
Status LibvirtDriver::restore(const std::filesystem::path&) {
  return fail(std::errc::operation_not_supported, std::string("restore: ") + kNotSupported);
}
// Disk hotplug as KubeVirt does it on QEMU: a raw disk on the domain's virtio-scsi controller
// (domain_xml.cpp adds it unless disableHotplug), at the first free sdX, aliased by its id.
Result<json> LibvirtDriver::add_disk(const json& disk) {
  HotplugDisk d;
  d.path = disk.value("path", "");
  d.id = disk.value("id", "");
  d.readonly = disk.value("readonly", false);
  if (d.path.empty() || d.id.empty()) return fail(std::errc::invalid_argument, "disk hotplug: a disk needs a path and an id");
  std::error_code ec;
  d.block = std::filesystem::is_block_file(d.path, ec);
  CHL_TRY(auto xml, live_xml());
  std::vector<std::string> used;
  for (const auto& l : live_disks(xml)) {
    if (l.id == d.id) return fail(std::errc::file_exists, "disk hotplug: the domain already has a disk " + d.id);
    used.push_back(l.target);
  }
  if (xml.find("<controller type='scsi'") == std::string::npos)
    return fail(std::errc::operation_not_supported,
                "disk hotplug: the domain has no SCSI controller (spec.domain.devices.disableHotplug)");
  d.target = free_scsi_target(used);
  const std::string dev = hotplug_disk_xml(d);
  if (virDomainAttachDeviceFlags(dom_.get(), dev.c_str(), VIR_DOMAIN_AFFECT_LIVE) != 0)
    return libvirt_fail("attaching disk " + d.id + " (" + d.path + ")");
  CHL_LOG_INFO("disk {} attached at {} ({})", d.id, d.target, d.path);
  return json{{"id", d.id}, {"target", d.target}};
}

Status LibvirtDriver::remove_device(const std::string& id) {
  CHL_TRY_VOID(need_domain());
  const std::string alias = "ua-" + id;
  if (virDomainDetachDeviceAlias(dom_.get(), alias.c_str(), VIR_DOMAIN_AFFECT_LIVE) != 0)
    return libvirt_fail("detaching device " + id);
  // libvirt only asks QEMU to unplug; QEMU lets a SCSI disk go by itself, a moment later. Wait
  // for it (this runs on the service's worker), as KubeVirt's detach waits, so that the caller
  // sees the domain without the disk; past the wait it is left to QEMU, as on Cloud Hypervisor.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    CHL_TRY(auto xml, live_xml());
    const auto disks = live_disks(xml);
    if (std::none_of(disks.begin(), disks.end(), [&id](const LiveDisk& l) { return l.id == id; })) return {};
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHL_LOG_WARN("device {}: unplug requested, QEMU has not released it within 5 s", id);
  return {};
}
Status LibvirtDriver::resize(std::optional<std::uint32_t> vcpus, std::optional<std::uint64_t> memory_bytes) {
  // vCPUs: the domain XML has <vcpu current='boot'>max</vcpu>, so libvirt plugs (or unplugs)
  // vCPUs up to max live. Memory: a virtio-mem device, as KubeVirt's UpdateGuestMemory.
  CHL_TRY_VOID(need_domain());
  if (memory_bytes) CHL_TRY_VOID(resize_memory(*memory_bytes));
  if (!vcpus) return {};
  if (virDomainSetVcpusFlags(dom_.get(), *vcpus, VIR_DOMAIN_AFFECT_LIVE) != 0)
    return libvirt_fail("setting " + std::to_string(*vcpus) + " vCPUs");
  return {};
}

// Memory hotplug as KubeVirt does it on QEMU: the domain has <maxMemory>; the first resize
// attaches a virtio-mem device on node 0 whose size is the headroom (max - boot) and whose
// `requested` is what is added to the boot memory (2 MiB blocks); later ones change `requested`
// on the live device. The guest's virtio-mem driver plugs the blocks; libvirt reports `current`.
Status LibvirtDriver::resize_memory(std::uint64_t bytes) {
  CHL_TRY(auto xml, live_xml());
  const auto max = live_size_kib(xml, "maxMemory");
  const auto total = live_size_kib(xml, "memory");
  if (!max || !total)
    return fail(std::errc::operation_not_supported,
                "memory hotplug: the domain has no memory headroom (spec.domain.memory.maxGuest)");
  const auto device = live_virtio_mem(xml);
  const std::uint64_t plugged = device ? live_size_kib(*device, "size").value_or(0) : 0;
  const std::uint64_t boot = *total - std::min(*total, plugged);
  const std::uint64_t want = bytes / 1024;
  if (want < boot)
    return fail(std::errc::invalid_argument, "memory hotplug: " + std::to_string(want) + " KiB is less than the " +
                                                 std::to_string(boot) + " KiB the domain booted with");
  if (want > *max)
    return fail(std::errc::invalid_argument, "memory hotplug: " + std::to_string(want) + " KiB is more than the domain's " +
                                                 std::to_string(*max) + " KiB maximum");
  const std::uint64_t requested = want - boot;
  std::string dev;
  if (device) {
    dev = *device;
    const auto open = dev.find("<requested");
    const auto close = dev.find("</requested>");
    if (open == std::string::npos || close == std::string::npos)
      return fail(std::errc::protocol_error, "memory hotplug: the live virtio-mem device has no <requested>");
    dev.replace(open, close - open, "<requested unit='KiB'>" + std::to_string(requested));
    if (virDomainUpdateDeviceFlags(dom_.get(), dev.c_str(), VIR_DOMAIN_DEVICE_MODIFY_LIVE) != 0)
      return libvirt_fail("memory hotplug: requesting " + std::to_string(requested) + " KiB of the virtio-mem device");
  } else {
    dev = "<memory model='virtio-mem'>\n  <target>\n    <size unit='KiB'>" + std::to_string(*max - boot) +
          "</size>\n    <node>0</node>\n    <block unit='KiB'>2048</block>\n    <requested unit='KiB'>" +
          std::to_string(requested) + "</requested>\n  </target>\n</memory>\n";
    if (virDomainAttachDeviceFlags(dom_.get(), dev.c_str(), VIR_DOMAIN_AFFECT_LIVE) != 0)
      return libvirt_fail("memory hotplug: attaching a virtio-mem device of " + std::to_string(*max - boot) + " KiB");
  }
  CHL_LOG_INFO("memory hotplug: {} KiB requested beyond the {} KiB booted", requested, boot);
  return {};
}

json LibvirtDriver::vmm_identity() const {
  std::lock_guard lk(id_mu_);
  json j = {
      {"binary", opts_.emulator},
      {"version", qemu_version_},
      {"libvirt", {{"uri", opts_.uri}, {"domain", opts_.domain_name}, {"daemon", opts_.daemon}}},
      {"accel", to_string(opts_.accel.accel)},
      {"accel_reason", opts_.accel.why}};
  if (pid_t pid = qemu_pid_.load(); pid > 0) j["pid"] = pid;
  return j;
}

void LibvirtDriver::deliver(const std::vector<events::DomainEvent>& evs) {
  for (const auto& e : evs)
    if (sink_) sink_(e);
  if (tracker_.finished() && !exit_reported_) {
    exit_reported_ = true;
    // The domain ended: QEMU is gone (libvirt reaps it before reporting the stop).
    pty_hold_.reset();
    if (on_exit_) on_exit_();
  }
}

void LibvirtDriver::on_lifecycle(int event, int detail) {
  CHL_LOG_DEBUG("libvirt event {}", libvirt_event_name(event, detail));
  deliver(tracker_.on_lifecycle(event, detail));
}

void LibvirtDriver::on_reboot() {
  CHL_LOG_DEBUG("libvirt event reboot");
  deliver(tracker_.on_reboot());
}

void LibvirtDriver::on_agent_lifecycle(int state) {
  agent_->set_connected(state == VIR_CONNECT_DOMAIN_EVENT_AGENT_LIFECYCLE_STATE_CONNECTED);
}

void LibvirtDriver::on_connection_closed(int reason) {
  static constexpr const char* kWhy[] = {"error", "end of file", "keepalive timeout",
                                         "client closed"};
  std::string why = reason >= 0 && reason < 4 ? kWhy[reason] : std::to_string(reason);
  if (tracker_.finished()) return;
  CHL_LOG_ERROR("libvirt: the connection to libvirtd closed ({}) while the domain was {}", why,
                events::to_string(tracker_.state()));
  kill_vmm();  // out of libvirt's reach: never leave QEMU behind
  deliver(tracker_.on_connection_lost("libvirt connection closed: " + why));
}

}  // namespace chl::libvirt

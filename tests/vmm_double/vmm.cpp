#include "tests/vmm_double/vmm.hpp"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>

#include "common/syscall.hpp"
#include "tests/vmm_double/acpi_ged.hpp"
#include "tests/vmm_double/guest_memory.hpp"

namespace chl::vmm_double {

const char* to_string(VmState s) {
  switch (s) {
    case VmState::Created:
      return "Created";
    case VmState::Running:
      return "Running";
    case VmState::Shutdown:
      return "Shutdown";
    case VmState::Paused:
      return "Paused";
    case VmState::BreakPoint:
      return "BreakPoint";
  }
  return "Created";
}

namespace {

constexpr std::uint64_t kU64Max = std::numeric_limits<std::uint64_t>::max();

// How CH's HTTP layer treats each endpoint (vmm/src/api/http/mod.rs, http_endpoint.rs).
enum class Style {
  Create,        // VmCreate handler
  Get,           // VmInfo / VmmPing: GET only, else 400 ["Bad Request"]
  VmmShutdown,   // PUT only, 200 with empty body
  ActionNoBody,  // vm_action_put_handler!: PUT without body
  ActionBody,    // vm_action_put_handler_body!: PUT with a JSON body
  ActionGet,     // vm_action_get_handler!: GET (vm.counters)
};

struct Route {
  const char* name;
  Style style;
  const char* api_error;             // ApiError's Display: the second element of CH's error array
  const SchemaType* (*body_type)();  // for ActionBody; nullptr: any JSON
};

const SchemaType* disk_t() { return &disk_config_type(); }
const SchemaType* net_t() { return &net_config_type(); }
const SchemaType* fs_t() { return &fs_config_type(); }
const SchemaType* pmem_t() { return &pmem_config_type(); }
const SchemaType* device_t() { return &device_config_type(); }
const SchemaType* vsock_t() { return &vsock_config_type(); }
const SchemaType* remove_t() { return &remove_device_type(); }
const SchemaType* resize_t() { return &resize_type(); }
const SchemaType* snapshot_t() { return &snapshot_config_type(); }
const SchemaType* restore_t() { return &restore_config_type(); }
const SchemaType* receive_t() { return &receive_migration_type(); }
const SchemaType* send_t() { return &send_migration_type(); }

// One row per route of CH v52 (default features: no vm.coredump).
const Route kRoutes[] = {
    {"vm.create", Style::Create, "The VM could not be created", nullptr},
    {"vm.info", Style::Get, "The VM info is not available", nullptr},
    {"vmm.ping", Style::Get, "", nullptr},
    {"vmm.shutdown", Style::VmmShutdown, "The VMM could not shutdown", nullptr},
    {"vm.boot", Style::ActionNoBody, "The VM could not boot", nullptr},
    {"vm.delete", Style::ActionNoBody, "The VM could not be deleted", nullptr},
    {"vm.shutdown", Style::ActionNoBody, "The VM could not shutdown", nullptr},
    {"vm.reboot", Style::ActionNoBody, "The VM could not reboot", nullptr},
    {"vm.pause", Style::ActionNoBody, "The VM could not be paused", nullptr},
    {"vm.resume", Style::ActionNoBody, "The VM could not resume", nullptr},
    {"vm.power-button", Style::ActionNoBody, "Error triggering power button", nullptr},
    {"vm.nmi", Style::ActionNoBody, "Error triggering NMI", nullptr},
    {"vm.counters", Style::ActionGet, "The VM info is not available", nullptr},
    {"vm.add-device", Style::ActionBody, "The device could not be added to the VM", device_t},
    {"vm.add-user-device", Style::ActionBody, "The user device could not be added to the VM",
     nullptr},
    {"vm.add-disk", Style::ActionBody, "The disk could not be added to the VM", disk_t},
    {"vm.add-fs", Style::ActionBody, "The fs could not be added to the VM", fs_t},
    {"vm.add-generic-vhost-user", Style::ActionBody,
     "The generic vhost-user device could not be added to the VM", nullptr},
    {"vm.add-net", Style::ActionBody, "The network device could not be added to the VM", net_t},
    {"vm.add-pmem", Style::ActionBody, "The pmem device could not be added to the VM", pmem_t},
    {"vm.add-vdpa", Style::ActionBody, "The vDPA device could not be added to the VM", nullptr},
    {"vm.add-vsock", Style::ActionBody, "The vsock device could not be added to the VM", vsock_t},
    {"vm.remove-device", Style::ActionBody, "The device could not be removed from the VM",
     remove_t},
    {"vm.resize", Style::ActionBody, "The VM could not be resized", resize_t},
    {"vm.resize-disk", Style::ActionBody, "The disk could not be resized", nullptr},
    {"vm.resize-zone", Style::ActionBody, "The memory zone could not be resized", nullptr},
    {"vm.snapshot", Style::ActionBody, "The VM could not be snapshotted", snapshot_t},
    {"vm.restore", Style::ActionBody, "The VM could not be restored", restore_t},
    {"vm.receive-migration", Style::ActionBody, "Error starting migration receiver", receive_t},
    {"vm.send-migration", Style::ActionBody, "Error starting migration sender", send_t},
};

const Route* find_route(const std::string& name) {
  for (const auto& r : kRoutes) {
    if (name == r.name) return &r;
  }
  return nullptr;
}

// Config list a hot-add endpoint appends to, and CH's device name prefix.
struct HotAdd {
  const char* endpoint;
  const char* list;  // VmConfig field
  const char* prefix;
};
const HotAdd kHotAdds[] = {
    {"vm.add-disk", "disks", "_disk"},
    {"vm.add-net", "net", "_net"},
    {"vm.add-fs", "fs", "_fs"},
    {"vm.add-pmem", "pmem", "_pmem"},
    {"vm.add-device", "devices", "_vfio"},
    {"vm.add-vsock", "vsock", "_vsock"},
};

// The config lists whose entries are devices with an `id` (vsock is a single object).
const char* const kDeviceLists[] = {"disks",   "net",          "fs",  "pmem",
                                    "devices", "user_devices", "vdpa"};

std::string error_body(const std::vector<std::string>& chain) { return Json(chain).dump(); }

// Rust's io::Error Display for an OS error.
std::string os_error(int err) {
  return std::string(std::strerror(err)) + " (os error " + std::to_string(err) + ")";
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string w;
  while (ss >> w) out.push_back(w);
  return out;
}

// Rust's Debug of a path ({path:?}): quoted, with \\, \" and control characters escaped.
std::string rust_debug(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\0':
        out += "\\0";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char buf[12];
          std::snprintf(buf, sizeof buf, "\\u{%x}",
                        static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// vmm/src/migration.rs url_to_path: only file://, and the path must be a directory; both
// failures are MigratableError::MigrateSend ("Failed to send migratable component snapshot"),
// for a restore too. Returns the path, or the two last elements of CH's chain.
struct UrlPath {
  std::string path;
  std::vector<std::string> error;
};
UrlPath url_to_path(const std::string& url) {
  const std::string send = "Failed to send migratable component snapshot";
  if (url.rfind("file://", 0) != 0) return {"", {send, "Could not extract path from URL: " + url}};
  const std::string path = url.substr(7);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return {"", {send, "Destination is not a directory: " + rust_debug(path)}};
  return {path, {}};
}

bool write_file_new(const std::string& path, const std::string& data, int& err) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    err = errno;
    return false;
  }
  std::size_t off = 0;
  while (off < data.size()) {
    const ssize_t n =
        common::retry_eintr([&] { return ::write(fd, data.data() + off, data.size() - off); });
    if (n <= 0) {
      err = errno;
      ::close(fd);
      return false;
    }
    off += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    err = errno;
    ::close(fd);
    return false;
  }
  ::close(fd);
  return true;
}

bool read_whole(const std::string& path, std::string& out, int& err) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    err = errno;
    return false;
  }
  char buf[65536];
  for (;;) {
    const ssize_t n = common::retry_eintr([&] { return ::read(fd, buf, sizeof buf); });
    if (n < 0) {
      err = errno;
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return true;
}

std::string detect_image_type(const std::string& path) {
  char magic[8] = {};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "Raw";
  const ssize_t n = ::read(fd, magic, sizeof magic);
  ::close(fd);
  if (n >= 4 && std::memcmp(magic, "QFI\xfb", 4) == 0) return "Qcow2";
  if (n >= 8 && std::memcmp(magic, "vhdxfile", 8) == 0) return "Vhdx";
  return "Raw";
}

}  // namespace

Vmm::Vmm(CliOptions opts, Faults faults) : opts_(std::move(opts)), faults_(std::move(faults)) {}

void Vmm::log(int level, const std::string& msg) const {
  if (opts_.verbosity < level) return;
  const std::string line = "vmm-double: " + msg + "\n";
  const int fd = log_fd_ ? log_fd_.get() : STDERR_FILENO;
  (void)!::write(fd, line.data(), line.size());
}

void Vmm::crash(const std::string& phase) const {
  if (!faults_.crash(phase)) return;
  log(0, "VMM_DOUBLE_CRASH_AT=" + phase + ": SIGKILL");
  ::kill(::getpid(), SIGKILL);
}

void Vmm::quit_without_events(const std::string& phase) {
  if (!faults_.quit(phase)) return;
  log(0, "VMM_DOUBLE_EXIT_WITHOUT_EVENTS=" + phase + ": exit 0");
  exit_code_ = 0;
}

void Vmm::close_events(const std::string& phase) {
  if (!faults_.close_events(phase) || !events_.enabled()) return;
  log(0, "VMM_DOUBLE_CLOSE_EVENTS_AT=" + phase + ": closing the event monitor, running on");
  events_.close();
}

void Vmm::schedule(std::chrono::milliseconds after, std::function<void()> fn, bool guest_bound) {
  timers_.push_back({Clock::now() + after, guest_bound ? guest_gen_ : 0, std::move(fn)});
}

void Vmm::run_timers() {
  const auto now = Clock::now();
  std::vector<Timer> due;
  for (auto it = timers_.begin(); it != timers_.end();) {
    if (it->when <= now) {
      due.push_back(std::move(*it));
      it = timers_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& t : due) {
    if (exit_code_) return;
    if (t.generation != 0 && t.generation != guest_gen_) continue;  // that guest is gone
    t.fn();
  }
}

// ---------------------------------------------------------------------------------------------
// Main loop

int Vmm::run() {
  ::signal(SIGPIPE, SIG_IGN);
  // SIGTERM/SIGINT are handled from the loop (CH: signal thread -> exit event) from the start.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  signal_fd_.reset(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!opts_.log_file.empty()) {
    log_fd_.reset(::open(opts_.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640));
  }
  // Event monitor first: CH emits vmm/starting before the API is served.
  if (opts_.event_fd >= 0) {
    if (::fcntl(opts_.event_fd, F_GETFD) < 0) {
      std::fprintf(stderr, "Error: Failed to open event monitor fd=%d: %s\n", opts_.event_fd,
                   std::strerror(errno));
      return 1;
    }
    events_.open(common::UniqueFd(opts_.event_fd), faults_.garbage_events,
                 std::chrono::milliseconds(faults_.event_lag_ms));
  } else if (!opts_.event_path.empty()) {
    common::UniqueFd f(
        ::open(opts_.event_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640));
    if (!f) {
      std::fprintf(stderr, "Error: Failed to open event monitor file %s: %s\n",
                   opts_.event_path.c_str(), std::strerror(errno));
      return 1;
    }
    events_.open(std::move(f), faults_.garbage_events, std::chrono::milliseconds(faults_.event_lag_ms));
  }
  events_.emit("vmm", "starting");

  if (opts_.api_fd >= 0) {
    if (auto st = http_.adopt_fd(opts_.api_fd); !st) {
      std::fprintf(stderr, "Error: Failed to start the HTTP API: %s\n",
                   st.error().message().c_str());
      return 1;
    }
  } else if (!opts_.api_path.empty()) {
    if (auto st = http_.listen_path(opts_.api_path); !st) {
      std::fprintf(stderr, "Error: Failed to start the HTTP API: %s\n",
                   st.error().message().c_str());
      return 1;
    }
  }

  crash("start");
  quit_without_events("start");
  close_events("start");
  log(1, "started (api " +
             (opts_.api_fd >= 0 ? "fd=" + std::to_string(opts_.api_fd) : opts_.api_path) + ")");

  while (!exit_code_) {
    // Serve requests while the API is not blocked behind a held one.
    while (!held_conn_ && !tearing_down_ && !exit_code_) {
      auto req = http_.next_request();
      if (!req) break;
      serve(*req);
    }
    if (exit_code_) break;

    std::vector<pollfd> fds;
    std::vector<std::uint64_t> tags;
    http_.fill_poll(fds, tags);
    const std::size_t http_count = fds.size();
    enum Extra : std::uint64_t { kSignal = 1, kEvents, kSerialIn, kSerialOut, kMigration };
    std::vector<std::uint64_t> extra;
    if (migration_ && migration_->poll_entry().fd >= 0) {
      fds.push_back(migration_->poll_entry());
      extra.push_back(kMigration);
    }
    // CH's control loop is inside the migration: a signal waits until it ends.
    if (signal_fd_ && !migration_) {
      fds.push_back({signal_fd_.get(), POLLIN, 0});
      extra.push_back(kSignal);
    }
    events_.release_due();
    if (events_.pending()) {
      fds.push_back({events_.fd(), POLLOUT, 0});
      extra.push_back(kEvents);
    }
    const bool guest_reads =
        serial_ && guest_running_ && !guest_halted_ && state_ == VmState::Running;
    if (guest_reads && serial_->input_fd() >= 0) {
      fds.push_back({serial_->input_fd(), POLLIN, 0});
      extra.push_back(kSerialIn);
    }
    if (serial_ && serial_->output_pending()) {
      fds.push_back({serial_->output_fd(), POLLOUT, 0});
      extra.push_back(kSerialOut);
    }
    int timeout = -1;
    if (!timers_.empty() || events_.next_due()) {
      auto next = events_.next_due().value_or(Clock::time_point::max());
      if (!timers_.empty())
        next = std::min(next, std::min_element(timers_.begin(), timers_.end(),
                                               [](const Timer& a, const Timer& b) {
                                                 return a.when < b.when;
                                               })->when);
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
      timeout = static_cast<int>(std::max<long long>(0, ms + 1));
    }
    const int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) {
      log(0, std::string("poll: ") + std::strerror(errno));
      return 1;
    }
    if (n > 0) {
      for (std::size_t i = 0; i < http_count; ++i) {
        if (fds[i].revents) http_.handle(tags[i], fds[i].revents);
      }
      for (std::size_t i = 0; i < extra.size(); ++i) {
        const auto& p = fds[http_count + i];
        if (!p.revents) continue;
        switch (extra[i]) {
          case kSignal: {
            signalfd_siginfo si{};
            while (::read(signal_fd_.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
              log(1, std::string("signal ") + strsignal(static_cast<int>(si.ssi_signo)) +
                         ": shutting down");
              // CH: the signal handler writes exit_evt; the control loop runs vmm_shutdown.
              vmm_shutdown_and_exit(0);
            }
            break;
          }
          case kEvents:
            events_.flush();
            break;
          case kSerialIn: {
            std::string in;
            if (serial_ && serial_->read(in) && !in.empty()) guest_input(in);
            break;
          }
          case kSerialOut:
            if (serial_) serial_->flush();
            break;
          case kMigration:
            if (migration_) migration_->ready(p.revents);
            if (migration_ && migration_->finished()) migration_.reset();
            break;
          default:
            break;
        }
        if (exit_code_) break;
      }
    }
    if (!exit_code_) run_timers();
  }

  // Leave like CH: answers and events out, then the socket file removed (when we made it).
  answer_after_vmm_thread();
  http_.drain(1000);
  events_.drain(std::chrono::milliseconds(1000));
  if (serial_) serial_->flush();
  http_.close_listener();
  log(1, "exit " + std::to_string(*exit_code_));
  return *exit_code_;
}

// ---------------------------------------------------------------------------------------------
// HTTP -> API

void Vmm::serve(HttpRequest& req) {
  const std::string root = "/api/v1/";
  const std::string endpoint =
      req.path.rfind(root, 0) == 0 ? req.path.substr(root.size()) : std::string();
  log(1, req.method + " " + req.path);
  if (faults_.hang.count(endpoint) && find_route(endpoint)) {
    log(0, "VMM_DOUBLE_HANG: holding " + endpoint + " forever");
    held_conn_ = req.conn;
    return;
  }
  Reply r = dispatch(req, endpoint);
  if (r.hold) {
    held_conn_ = req.conn;
    return;
  }
  http_.respond(req.conn, r.status, r.body);
}

Reply Vmm::api_error(const std::string& endpoint, std::vector<std::string> chain) const {
  const Route* route = find_route(endpoint);
  std::vector<std::string> full{"Error from API"};
  if (route && *route->api_error) full.emplace_back(route->api_error);
  for (auto& c : chain) full.push_back(std::move(c));
  return {500, error_body(full), false};
}

Reply Vmm::dispatch(HttpRequest& req, const std::string& endpoint) {
  const Route* route = find_route(endpoint);
  if (!route) return {404, error_body({"Not Found"}), false};
  // VMM_DOUBLE_CRASH_AT=<endpoint>: die on that request, unanswered (as real CH v52 does on
  // vm.send-migration with no VM).
  crash(endpoint);
  const bool put = req.method == "PUT";
  const bool get = req.method == "GET";
  const Reply bad_request{400, error_body({"Bad Request"}), false};

  Json body;
  switch (route->style) {
    case Style::Create: {
      if (!put) return bad_request;
      if (!req.body) return {400, "", false};
      auto cfg = deserialize(*req.body, vm_config_type());
      if (!cfg) return {400, error_body({"Failed to deserialize JSON", cfg.error()}), false};
      body = std::move(*cfg);
      break;
    }
    case Style::Get:
      if (!get) return bad_request;
      break;
    case Style::VmmShutdown:
      if (!put) return bad_request;
      break;
    case Style::ActionNoBody:
    case Style::ActionBody:
    case Style::ActionGet:
      if (!put && !get) return {400, "", false};
      if (get != (route->style == Style::ActionGet)) return bad_request;
      if (route->style == Style::ActionNoBody && req.body) return bad_request;
      if (route->style == Style::ActionBody) {
        if (!req.body) return bad_request;
        if (route->body_type) {
          auto b = deserialize(*req.body, *route->body_type());
          if (!b) return {400, error_body({"Failed to deserialize JSON", b.error()}), false};
          body = std::move(*b);
        } else {
          auto node = parse_json(*req.body);
          if (!node) return {400, error_body({"Failed to deserialize JSON", node.error()}), false};
        }
      }
      break;
  }

  if (faults_.fail.count(endpoint)) {
    // CH emits these before it can fail.
    static const std::map<std::string, std::string> kIng = {
        {"vm.boot", "booting"},    {"vm.reboot", "rebooting"},      {"vm.pause", "pausing"},
        {"vm.resume", "resuming"}, {"vm.snapshot", "snapshotting"}, {"vm.resize", "resizing"}};
    if (auto it = kIng.find(endpoint);
        it != kIng.end() && (vm_ || endpoint == "vm.boot" || endpoint == "vm.reboot")) {
      events_.emit("vm", it->second);
    }
    log(0, "VMM_DOUBLE_FAIL: " + endpoint);
    return api_error(endpoint, {"vmm-double: injected failure"});
  }

  if (endpoint == "vm.create") return vm_create(body);
  if (endpoint == "vm.boot") return vm_boot(req.conn);
  if (endpoint == "vm.pause") return vm_pause();
  if (endpoint == "vm.resume") return vm_resume();
  if (endpoint == "vm.shutdown") return vm_shutdown();
  if (endpoint == "vm.reboot") return vm_reboot();
  if (endpoint == "vm.power-button") return vm_power_button();
  if (endpoint == "vm.delete") return vm_delete();
  if (endpoint == "vm.info") return vm_info();
  if (endpoint == "vm.counters") return vm_counters();
  if (endpoint == "vmm.ping") return vmm_ping();
  if (endpoint == "vmm.shutdown") {
    vmm_shutdown_and_exit(0);
    return {200, "", false};
  }
  if (endpoint == "vm.nmi") {
    if (!vm_) return api_error(endpoint, {"VM is not running"});
    return {204, "", false};
  }
  for (const auto& h : kHotAdds) {
    if (endpoint == h.endpoint) return vm_add(endpoint, body, req.fds);
  }
  if (endpoint == "vm.remove-device") return vm_remove_device(body);
  if (endpoint == "vm.resize") return vm_resize(body);
  if (endpoint == "vm.snapshot") return vm_snapshot(body);
  if (endpoint == "vm.restore") return vm_restore(body);
  if (endpoint == "vm.send-migration") return vm_send_migration(body, req.conn);
  if (endpoint == "vm.receive-migration") return vm_receive_migration(body, req.conn);
  // Routes CH has that the double does not model.
  if (!config_) return api_error(endpoint, {"VM is not created"});
  return api_error(endpoint, {"vmm-double does not implement " + endpoint});
}

// ---------------------------------------------------------------------------------------------
// VM lifecycle

Reply Vmm::vm_create(const Json& config) {
  crash("create");
  quit_without_events("create");
  close_events("create");
  if (exit_code_) return {204, "", true};
  if (config_) return api_error("vm.create", {"VM is already created"});
  hotplugged_ram_ = 0;
  config_ = config;
  // CH ignores fds written in the body and does not take SCM_RIGHTS fds on vm.create.
  if ((*config_)["net"].is_array()) {
    for (auto& n : (*config_)["net"]) n["fds"] = nullptr;
  }
  auto err = open_consoles();
  if (!err.empty()) {
    config_.reset();
    return api_error("vm.create", err);
  }
  return {204, "", false};
}

std::vector<std::string> Vmm::open_consoles() {
  close_consoles();
  auto& cfg = *config_;
  auto s = SerialPort::open(
      SerialPort::parse_mode(cfg["serial"]["mode"].get<std::string>()),
      cfg["serial"]["file"].is_string() ? cfg["serial"]["file"].get<std::string>() : "");
  if (!s) return {"Error creating console devices", s.error().message()};
  if (s->mode() == SerialPort::Mode::Pty) cfg["serial"]["file"] = s->path();
  serial_ = std::move(*s);
  auto c = SerialPort::open(
      SerialPort::parse_mode(cfg["console"]["mode"].get<std::string>()),
      cfg["console"]["file"].is_string() ? cfg["console"]["file"].get<std::string>() : "");
  if (!c) return {"Error creating console devices", c.error().message()};
  if (c->mode() == SerialPort::Mode::Pty) cfg["console"]["file"] = c->path();
  console_ = std::move(*c);
  return {};
}

void Vmm::close_consoles() {
  if (serial_) serial_->flush();
  serial_.reset();
  console_.reset();
}

std::vector<std::string> Vmm::open_vsock() {
  vsock_.reset();
  if (!config_ || !(*config_)["vsock"].is_object()) return {};
  const Json& v = (*config_)["vsock"];
  std::vector<std::string> chain;
  vsock_ = HybridVsock::open(v["socket"].get<std::string>(), v["cid"].get<std::uint64_t>(),
                             HybridVsock::listeners_from_env(), chain);
  if (!vsock_) chain.insert(chain.begin(), "Error from device manager");
  return vsock_ ? std::vector<std::string>{} : chain;
}

std::vector<std::string> Vmm::validate_config(const Json& cfg) {
  // VmConfig::validate (vmm/src/config.rs), in its order: the payload first (a missing payload is
  // MissingBootitem too), vCPU counts, then device ids unique across the lists.
  const Json& payload = cfg["payload"];
  const bool fw = payload.is_object() && payload["firmware"].is_string();
  const bool kernel = payload.is_object() && payload["kernel"].is_string();
  if (!fw && !kernel) {
    return {"Failed to validate config", "Payload configuration is not bootable",
            "No bootitem provided: neither firmware nor kernel"};
  }
  if (fw && kernel) {
    return {"Failed to validate config", "Payload configuration is not bootable",
            "Specifying a kernel is not supported when a firmware is provided"};
  }
  if (cfg["cpus"]["boot_vcpus"].get<std::uint64_t>() >
      cfg["cpus"]["max_vcpus"].get<std::uint64_t>()) {
    return {"Failed to validate config", "Max CPUs lower than boot CPUs"};
  }
  // vhost-user devices (virtio-fs always is one) need guest memory the backend can map:
  // backed_by_shared_memory() is memory.shared or hugepages (or every zone's, with size 0).
  const Json& mem = cfg["memory"];
  bool shared = mem["shared"].is_boolean() && mem["shared"].get<bool>();
  shared = shared || (mem["hugepages"].is_boolean() && mem["hugepages"].get<bool>());
  if (!shared && mem["size"].is_number_unsigned() && mem["size"].get<std::uint64_t>() == 0 && mem["zones"].is_array()) {
    shared = true;
    for (const auto& z : mem["zones"]) {
      const bool zs = z.contains("shared") && z["shared"].is_boolean() && z["shared"].get<bool>();
      const bool zh = z.contains("hugepages") && z["hugepages"].is_boolean() && z["hugepages"].get<bool>();
      shared = shared && (zs || zh);
    }
  }
  bool vhost_user = cfg["fs"].is_array() && !cfg["fs"].empty();
  for (const char* list : {"disks", "net"}) {
    if (!cfg[list].is_array()) continue;
    for (const auto& d : cfg[list]) vhost_user = vhost_user || (d["vhost_user"].is_boolean() && d["vhost_user"].get<bool>());
  }
  if (vhost_user && !shared)
    return {"Failed to validate config", "Using vhost-user requires using shared memory or huge pages"};
  // Each VFIO device's path once (vmm/src/config.rs:3150-3157, ValidationError::
  // DuplicateDevicePath "Duplicated device path: {0}"). CH checks it inside its walk of the lists
  // and the ids; a config with both faults gets this one here.
  if (cfg["devices"].is_array()) {
    std::set<std::string> paths;
    for (const auto& d : cfg["devices"]) {
      if (d["path"].is_string() && !paths.insert(d["path"].get<std::string>()).second)
        return {"Failed to validate config", "Duplicated device path: " + d["path"].get<std::string>()};
    }
  }
  // Unique device ids across the device lists.
  std::set<std::string> ids;
  for (const char* list : kDeviceLists) {
    if (!cfg[list].is_array()) continue;
    for (const auto& d : cfg[list]) {
      if (!d["id"].is_string()) continue;
      if (!ids.insert(d["id"].get<std::string>()).second) {
        return {"Failed to validate config",
                "Identifier " + d["id"].get<std::string>() + " is not unique"};
      }
    }
  }
  if (cfg["vsock"].is_object() && cfg["vsock"]["id"].is_string() &&
      !ids.insert(cfg["vsock"]["id"].get<std::string>()).second) {
    return {"Failed to validate config",
            "Identifier " + cfg["vsock"]["id"].get<std::string>() + " is not unique"};
  }
  // Then the memory zones and NUMA nodes (guest_memory.hpp).
  return validate_memory_config(cfg, ids);
}

std::vector<std::string> Vmm::check_bootable() {
  net_devices_.clear();  // the previous Vm's devices (reboot) are gone before the new ones
  disk_files_.clear();
  auto& cfg = *config_;
  if (auto err = validate_config(cfg); !err.empty()) return err;
  // Vm::new makes the guest memory (MemoryManager::new) and its NUMA nodes first.
  const GuestMemoryOutcome memory = create_guest_memory(cfg);
  if (!memory.error.empty()) return memory.error;
  const Json& payload = cfg["payload"];
  // Vm::new creates the devices (disks opened) before the payload is loaded.
  if (cfg["disks"].is_array()) {
    for (const auto& d : cfg["disks"]) {
      if (d["vhost_user"].get<bool>()) continue;
      if (!d["path"].is_string()) return {"Failed to validate config", "Path missing for disk"};
      if (auto err = open_disk(d); !err.empty()) {
        disk_files_.clear();
        return err;
      }
    }
  }
  // Then the nets (taps opened as CH does: tap_device.hpp), then fs and pmem (CH's
  // make_virtio_devices order: block, net, rng, fs, pmem).
  if (auto err = open_net_devices(); !err.empty()) {
    disk_files_.clear();
    return err;
  }
  // Then the virtio-fs devices (make_virtio_fs_devices): each connects to its backend and
  // negotiates (vhost_user.hpp); the connections live as long as this VM.
  vhost_user_.clear();
  if (cfg["fs"].is_array()) {
    for (const auto& f : cfg["fs"]) {
      VhostUserSession s;
      auto err = vhost_user_fs_connect(f["socket"].get<std::string>(), f["num_queues"].get<std::uint64_t>(), s);
      if (!err.empty()) {
        vhost_user_.clear();
        net_devices_.clear();
        disk_files_.clear();
        err.insert(err.begin(), "Error from device manager");
        return err;
      }
      vhost_user_[f["socket"].get<std::string>()] = std::move(s);
    }
  }
  if (cfg["pmem"].is_array()) {
    for (const auto& p : cfg["pmem"]) {
      if (auto err = open_pmem(p); !err.empty()) {
        vhost_user_.clear();
        net_devices_.clear();
        disk_files_.clear();
        return err;
      }
    }
  }
  // Then the VFIO devices (DeviceManager::add_vfio_devices, after the virtio ones), in the
  // config's order: the first opens the VFIO container, each its IOMMU group (vfio.hpp, with
  // CH's chains: "Cannot create a VFIO device", "failed to open /dev/vfio/vfio container: ..."
  // as CH v52 answers on a machine without VFIO).
  vfio_.reset();
  if (cfg["devices"].is_array()) {
    for (const auto& d : cfg["devices"]) {
      auto err = vfio_.attach(d["path"].get<std::string>());
      if (err.empty()) continue;
      vfio_.reset();
      vhost_user_.clear();
      net_devices_.clear();
      disk_files_.clear();
      err.insert(err.begin(), "Error from device manager");
      return err;
    }
  }
  struct PayloadFile {
    const char* field;
    const char* error;
  };
  static const PayloadFile kFiles[] = {{"firmware", "Error manipulating firmware file"},
                                       {"kernel", "Cannot open kernel file"},
                                       {"initramfs", "Cannot open initramfs file"}};
  for (const auto& f : kFiles) {
    if (!payload[f.field].is_string()) continue;
    const std::string p = payload[f.field].get<std::string>();
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      net_devices_.clear();
      disk_files_.clear();
      return {f.error, os_error(e)};
    }
    ::close(fd);
  }
  // Loading the payload writes guest memory: hugetlb memory with no free hugepage faults, and
  // CH dies of SIGBUS with vm.boot unanswered (checked with the real v52: exit 135).
  if (memory.sigbus) {
    log(0, "dying of SIGBUS as cloud-hypervisor does: " + memory.why);
    ::signal(SIGBUS, SIG_DFL);
    ::raise(SIGBUS);
  }
  return {};
}

std::string Vmm::next_device_name(const std::string& prefix) {
  std::set<std::string> used;
  for (const char* list : kDeviceLists) {
    if (!(*config_)[list].is_array()) continue;
    for (const auto& d : (*config_)[list]) {
      if (d["id"].is_string()) used.insert(d["id"].get<std::string>());
    }
  }
  if ((*config_)["vsock"].is_object() && (*config_)["vsock"]["id"].is_string()) {
    used.insert((*config_)["vsock"]["id"].get<std::string>());
  }
  for (;;) {
    std::string name = prefix + std::to_string(device_counter_++);
    if (!used.count(name)) return name;
  }
}

std::string Vmm::allocate_bdf(const std::string& id) {
  std::set<std::string> taken;
  for (const auto& [k, v] : bdfs_) taken.insert(v);
  for (int slot = 1; slot < 32; ++slot) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0000:00:%02x.0", slot);
    if (!taken.count(buf)) {
      bdfs_[id] = buf;
      return buf;
    }
  }
  return "0000:00:1f.0";
}

void Vmm::assign_device_ids() {
  // A new Vm has a new DeviceManager: device names and PCI slots start over.
  auto& cfg = *config_;
  device_counter_ = 0;
  bdfs_.clear();
  if (cfg["console"]["mode"] != "Off") allocate_bdf("__console");
  struct Order {
    const char* list;
    const char* prefix;
  };
  static const Order kOrder[] = {{"disks", "_disk"}, {"net", "_net"}};
  for (const auto& o : kOrder) {
    if (!cfg[o.list].is_array()) continue;
    std::size_t index = 0;
    for (auto& d : cfg[o.list]) {
      if (!d["id"].is_string()) {
        d["id"] = next_device_name(o.prefix);
        // A net cold-added without an id: its fds and open taps were filed by position.
        const std::string pos = "#" + std::to_string(index);
        if (auto f = net_fds_.find(pos); std::string(o.list) == "net" && f != net_fds_.end()) {
          net_fds_[d["id"].get<std::string>()] = std::move(f->second);
          net_fds_.erase(f);
        }
        if (auto t = net_devices_.find(pos);
            std::string(o.list) == "net" && t != net_devices_.end()) {
          net_devices_[d["id"].get<std::string>()] = std::move(t->second);
          net_devices_.erase(t);
        }
      }
      ++index;
      allocate_bdf(d["id"].get<std::string>());
      if (std::string(o.list) == "disks" && d["image_type"].is_null() && d["path"].is_string()) {
        d["image_type"] = detect_image_type(d["path"].get<std::string>());
      }
    }
  }
  allocate_bdf("__rng");
  static const Order kRest[] = {{"fs", "_fs"}, {"pmem", "_pmem"}};
  for (const auto& o : kRest) {
    if (!cfg[o.list].is_array()) continue;
    for (auto& d : cfg[o.list]) {
      if (!d["id"].is_string()) d["id"] = next_device_name(o.prefix);
      allocate_bdf(d["id"].get<std::string>());
    }
  }
  if (cfg["vsock"].is_object()) {
    if (!cfg["vsock"]["id"].is_string()) cfg["vsock"]["id"] = next_device_name("_vsock");
    allocate_bdf(cfg["vsock"]["id"].get<std::string>());
  }
  static const Order kLast[] = {
      {"devices", "_vfio"}, {"user_devices", "_vfio_user"}, {"vdpa", "_vdpa"}};
  for (const auto& o : kLast) {
    if (!cfg[o.list].is_array()) continue;
    for (auto& d : cfg[o.list]) {
      if (!d["id"].is_string()) d["id"] = next_device_name(o.prefix);
      allocate_bdf(d["id"].get<std::string>());
    }
  }
  if (cfg["pvpanic"].get<bool>()) allocate_bdf("__pvpanic");
}

void Vmm::enter_state(VmState s) {
  state_ = s;
  const std::string phase = s == VmState::Running  ? "running"
                            : s == VmState::Paused ? "paused"
                                                   : "";
  if (phase.empty() || (!faults_.crash(phase) && !faults_.quit(phase) && !faults_.close_events(phase)))
    return;
  schedule(
      std::chrono::milliseconds(faults_.phase_delay_ms),
      [this, phase] {
        crash(phase);
        quit_without_events(phase);
        close_events(phase);
      },
      false);
}

Reply Vmm::vm_boot(std::uint64_t conn) {
  crash("boot");
  quit_without_events("boot");
  close_events("boot");
  if (exit_code_) return {204, "", true};
  events_.emit("vm", "booting");
  if (!config_) return api_error("vm.boot", {"VM config is missing"});
  if (!serial_) {
    if (auto err = open_consoles(); !err.empty()) return api_error("vm.boot", err);
  }
  if (vm_) {
    // Vm::boot on a paused VM resumes it; anything else must be a valid transition to Running.
    if (state_ == VmState::Paused) {
      events_.emit("vm", "resuming");
      events_.emit("vm", "resumed");
      enter_state(VmState::Running);
      if (power_button_pending_) guest_power_button();
      if (!unplug_pending_.empty()) guest_pci_eject();
      events_.emit("vm", "booted");
      return {204, "", false};
    }
    return api_error("vm.boot", {std::string("invalid VM state transition: ") + to_string(state_) +
                                 " to Running"});
  }
  if (auto err = check_bootable(); !err.empty()) return api_error("vm.boot", err);
  // Vm::boot takes the disks' advisory locks (vmm/src/vm.rs, DeviceManager::try_lock_disks).
  if (auto err = lock_disks(); !err.empty()) {
    net_devices_.clear();
    disk_files_.clear();
    return api_error("vm.boot", err);
  }
  assign_device_ids();
  if (auto err = open_vsock(); !err.empty()) return api_error("vm.boot", err);
  // CH starts the boot vCPUs before it says "booted"; a vCPU that cannot take its cpus.affinity
  // leaves the vmm thread waiting on the vCPU barrier for ever (vcpu_threads.hpp): no answer.
  if (!vcpus_.start((*config_)["cpus"])) {
    log(0, "a vCPU thread could not take its affinity: vm.boot waits on the vCPU barrier for ever (as CH)");
    return {204, "", true};
  }
  auto finish = [this] {
    vm_ = true;
    enter_state(VmState::Running);
    events_.emit("vm", "booted");
    guest_start(true);
  };
  if (faults_.boot_delay_ms > 0) {
    schedule(
        std::chrono::milliseconds(faults_.boot_delay_ms),
        [this, finish, conn] {
          finish();
          held_conn_.reset();
          http_.respond(conn, 204, "");
        },
        false);
    return {204, "", true};
  }
  finish();
  if (faults_.boot_answer_delay_ms > 0) {
    // The VM runs and said so on the event monitor; the API answer comes late (a busy VMM).
    schedule(
        std::chrono::milliseconds(faults_.boot_answer_delay_ms),
        [this, conn] {
          held_conn_.reset();
          http_.respond(conn, 204, "");
        },
        false);
    return {204, "", true};
  }
  return {204, "", false};
}

Reply Vmm::vm_pause() {
  if (!vm_) return api_error("vm.pause", {"VM is not running"});
  events_.emit("vm", "pausing");
  if (state_ != VmState::Running) {
    return api_error("vm.pause", {"Cannot pause VM", "Failed to pause migratable component",
                                  std::string("Invalid transition: InvalidStateTransition(") +
                                      to_string(state_) + ", Paused)"});
  }
  enter_state(VmState::Paused);
  events_.emit("vm", "paused");
  if (vsock_) vsock_->set_paused(true);
  return {204, "", false};
}

Reply Vmm::vm_resume() {
  if (!vm_) return api_error("vm.resume", {"VM is not running"});
  events_.emit("vm", "resuming");
  if (state_ != VmState::Paused) {
    return api_error("vm.resume", {"Cannot resume VM", "Failed to resume migratable component",
                                   std::string("Invalid transition: InvalidStateTransition(") +
                                       to_string(state_) + ", Running)"});
  }
  enter_state(VmState::Running);
  if (vsock_) vsock_->set_paused(false);
  events_.emit("vm", "resumed");
  if (power_button_pending_) guest_power_button();
  if (!unplug_pending_.empty()) guest_pci_eject();
  return {204, "", false};
}

bool Vmm::vm_shutdown_internal() {
  if (!vm_) return false;
  vm_ = false;
  guest_stop();
  // The Vm's devices go with it: CH's Tap files close, disk locks go, virtiofsd sees its
  // frontend hang up.
  vhost_user_.clear();
  net_devices_.clear();
  disk_files_.clear();
  close_consoles();  // CH drains console_info: the PTY goes away with the VM
  vsock_.reset();    // the device shuts down: its socket file goes (vsock/device.rs:533)
  vfio_.reset();     // and the VFIO container with its groups
  events_.emit("vm", "shutdown");
  return true;
}

Reply Vmm::vm_shutdown() {
  crash("shutdown");
  quit_without_events("shutdown");
  close_events("shutdown");
  if (exit_code_) return {204, "", true};
  if (!vm_shutdown_internal()) return api_error("vm.shutdown", {"VM is not running"});
  return {204, "", false};
}

Reply Vmm::vm_reboot() {
  events_.emit("vm", "rebooting");
  if (!vm_) return api_error("vm.reboot", {"VM is not created"});
  // The old VM is shut down (no event), the console devices are created anew, a new VM boots.
  guest_stop();
  vm_ = false;
  close_consoles();
  vsock_.reset();
  if (auto err = open_consoles(); !err.empty()) return api_error("vm.reboot", err);
  if (auto err = check_bootable(); !err.empty()) return api_error("vm.reboot", err);
  if (auto err = lock_disks(); !err.empty()) {
    net_devices_.clear();
    disk_files_.clear();
    return api_error("vm.reboot", err);
  }
  assign_device_ids();
  if (auto err = open_vsock(); !err.empty()) return api_error("vm.reboot", err);
  vm_ = true;
  enter_state(VmState::Running);
  events_.emit("vm", "rebooted");
  guest_start(true);
  return {204, "", false};
}

Reply Vmm::vm_power_button() {
  if (!vm_) return api_error("vm.power-button", {"VM is not running"});
  // No event: the guest decides what a power button means.
  if (state_ == VmState::Paused) {
    power_button_pending_ = true;
  } else {
    guest_power_button();
  }
  return {204, "", false};
}

void Vmm::vm_delete_internal() {
  if (!config_) return;
  vm_shutdown_internal();
  config_.reset();
  close_consoles();
  net_fds_.clear();
  bdfs_.clear();
  events_.emit("vm", "deleted");
}

Reply Vmm::vm_delete() {
  vm_delete_internal();
  return {204, "", false};
}

void Vmm::vmm_shutdown_and_exit(int code) {
  vm_delete_internal();
  events_.emit("vmm", "shutdown");
  exit_code_ = code;
}

Reply Vmm::vm_info() const {
  if (!config_) return api_error("vm.info", {"VM is not created"});
  Json info;
  info["config"] = *config_;
  info["state"] = vm_ ? to_string(state_) : "Created";
  std::uint64_t size = (*config_)["memory"]["size"].get<std::uint64_t>();
  if ((*config_)["memory"]["zones"].is_array()) {
    for (const auto& z : (*config_)["memory"]["zones"]) {
      if (z.contains("size") && z["size"].is_number_unsigned())
        size += z["size"].get<std::uint64_t>();
    }
  }
  info["memory_actual_size"] = size;
  if (vm_) {
    Json tree = Json::object();
    for (const auto& [id, bdf] : bdfs_) {
      tree[id] = {{"id", id},
                  {"resources", Json::array()},
                  {"parent", nullptr},
                  {"children", Json::array()},
                  {"pci_bdf", bdf}};
    }
    info["device_tree"] = tree;
  }
  return {200, info.dump(), false};
}

Reply Vmm::vm_counters() const {
  if (!vm_) return api_error("vm.counters", {"VM is not running"});
  Json out = Json::object();
  const auto& cfg = *config_;
  if (cfg["disks"].is_array()) {
    for (const auto& d : cfg["disks"]) {
      if (!d["id"].is_string()) continue;
      Json c;
      c["read_bytes"] = 0;
      c["read_ops"] = 0;
      c["write_bytes"] = 0;
      c["write_ops"] = 0;
      c["read_latency_min"] = kU64Max;
      c["read_latency_max"] = kU64Max;
      c["read_latency_avg"] = kU64Max / 10000;
      c["write_latency_min"] = kU64Max;
      c["write_latency_max"] = kU64Max;
      c["write_latency_avg"] = kU64Max / 10000;
      out[d["id"].get<std::string>()] = c;
    }
  }
  if (cfg["net"].is_array()) {
    for (const auto& n : cfg["net"]) {
      if (!n["id"].is_string()) continue;
      out[n["id"].get<std::string>()] = {
          {"rx_bytes", 0}, {"rx_frames", 0}, {"tx_bytes", 0}, {"tx_frames", 0}};
    }
  }
  return {200, out.dump(), false};
}

Reply Vmm::vmm_ping() const {
  Json p;
  p["build_version"] = "v52.0.0-vmm-double";
  p["version"] = "52.0.0";
  p["pid"] = static_cast<std::int64_t>(::getpid());
  p["features"] = {"io_uring", "kvm"};
  return {200, p.dump(), false};
}

// ---------------------------------------------------------------------------------------------
// Devices

Reply Vmm::vm_add(const std::string& endpoint, const Json& body,
                  std::vector<common::UniqueFd>& fds) {
  if (!config_) return api_error(endpoint, {"VM is not created"});
  const HotAdd* h = nullptr;
  for (const auto& x : kHotAdds) {
    if (endpoint == x.endpoint) h = &x;
  }
  Json cfg = body;
  auto& config = *config_;
  const bool vsock = std::string(h->list) == "vsock";
  if (vsock && config["vsock"].is_object())
    return api_error(endpoint, {"Too many virtio-vsock devices"});
  {
    // VmConfig::validate on a copy of the config with the device added, as CH does before any
    // add, cold or hot: a VM created without a bootable payload refuses them all.
    Json candidate = config;
    if (vsock) {
      candidate["vsock"] = cfg;
    } else {
      if (!candidate[h->list].is_array()) candidate[h->list] = Json::array();
      candidate[h->list].push_back(cfg);
    }
    if (auto err = validate_config(candidate); !err.empty()) return api_error(endpoint, err);
  }
  // A running VM's device manager also refuses an id still in its device tree (a device removed
  // but not yet ejected by the guest keeps its node).
  if (vm_ && cfg["id"].is_string() && bdfs_.count(cfg["id"].get<std::string>()) != 0) {
    return api_error(endpoint, {"Error from device manager", "Invalid identifier as it is not unique: " +
                                                                 cfg["id"].get<std::string>()});
  }
  std::vector<common::UniqueFd> taps;
  if (endpoint == "vm.add-net") {
    // Only fds that came with SCM_RIGHTS count; numbers in the body are dropped.
    // CH only stores them here (vmm/src/lib.rs vm_add_net): the taps are opened when the
    // device is made (at boot, or now on a running VM: open_net_device).
    cfg["fds"] = nullptr;
    if (!fds.empty()) {
      Json list = Json::array();
      for (auto& fd : fds) {
        // Double only: the name of a tap it was handed (TUNGETIFF, a query that needs no
        // privilege) goes into vm.info's `tap`, so tests can check the launcher handed over
        // the right device. CH leaves `tap` null; a non-tap fd fails when the device is made.
        ifreq ifr{};
        if (::ioctl(fd.get(), TUNGETIFF, &ifr) == 0 && !cfg["tap"].is_string()) {
          log(0, "vm.add-net: fd " + std::to_string(fd.get()) + " is tap '" + ifr.ifr_name + "'");
          cfg["tap"] = std::string(ifr.ifr_name);
        }
        list.push_back(-1);
        taps.push_back(std::move(fd));
      }
      cfg["fds"] = list;
    }
  }
  if (!vm_) {
    // Cold add: only the config changes; 204 without body.
    if (vsock) {
      config["vsock"] = cfg;
    } else {
      if (!config[h->list].is_array()) config[h->list] = Json::array();
      config[h->list].push_back(cfg);
    }
    if (!taps.empty()) {
      const std::string key = cfg["id"].is_string()
                                  ? cfg["id"].get<std::string>()
                                  : "#" + std::to_string(config["net"].size() - 1);
      net_fds_[key] = std::move(taps);
    }
    return {204, "", false};
  }
  // Hot add: the device must be creatable now.
  if (endpoint == "vm.add-disk" && !cfg["vhost_user"].get<bool>()) {
    if (!cfg["path"].is_string())
      return api_error(endpoint, {"Failed to validate config", "Path missing for disk"});
    const std::string p = cfg["path"].get<std::string>();
    if (auto err = open_disk(cfg); !err.empty()) return api_error(endpoint, err);
    // A hot-plugged disk is locked at once (make_virtio_block_device with is_hotplug).
    if (auto tail = lock_disk(disk_files_.size() - 1); !tail.empty()) {
      disk_files_.pop_back();
      tail.insert(tail.begin(),
                  {"Error from device manager", "Cannot lock images of all block devices"});
      return api_error(endpoint, tail);
    }
    if (cfg["image_type"].is_null()) cfg["image_type"] = detect_image_type(p);
  }
  if (endpoint == "vm.add-fs" || endpoint == "vm.add-vsock") {
    // virtio-fs connects to the vhost-user backend; vsock binds its socket.
    const std::string p = cfg["socket"].get<std::string>();
    if (endpoint == "vm.add-fs") {
      VhostUserSession s;
      auto err = vhost_user_fs_connect(p, cfg["num_queues"].get<std::uint64_t>(), s);
      if (!err.empty()) {
        err.insert(err.begin(), "Error from device manager");
        return api_error(endpoint, err);
      }
      vhost_user_[p] = std::move(s);
    }
  }
  if (endpoint == "vm.add-pmem") {
    if (auto err = open_pmem(cfg); !err.empty()) return api_error(endpoint, err);
  }
  if (endpoint == "vm.add-device" && vm_) {
    // Vm::add_device -> DeviceManager::add_device -> add_vfio_device (vmm/src/vm.rs:2209-2215):
    // the container (the first VFIO device of this VM opens it), then the device's IOMMU group
    // (vfio.hpp). Not yet booted, CH only adds it to the config (vmm/src/lib.rs:2233-2236).
    if (auto err = vfio_.attach(cfg["path"].get<std::string>()); !err.empty()) {
      err.insert(err.begin(), "Error from device manager");
      return api_error(endpoint, err);
    }
  }
  if (!cfg["id"].is_string()) cfg["id"] = next_device_name(h->prefix);
  const std::string id = cfg["id"].get<std::string>();
  if (endpoint == "vm.add-net") {
    net_fds_[id] = std::move(taps);
    if (auto err = open_net_device(cfg, id); !err.empty()) {
      net_fds_.erase(id);
      return api_error(endpoint, err);
    }
  }
  const std::string bdf = allocate_bdf(id);
  if (vsock) {
    config["vsock"] = cfg;
  } else {
    if (!config[h->list].is_array()) config[h->list] = Json::array();
    config[h->list].push_back(cfg);
  }
  Json info;
  info["id"] = id;
  info["bdf"] = bdf;
  return {200, info.dump(), false};
}

Reply Vmm::vm_remove_device(const Json& body) {
  const std::string id = body["id"].get<std::string>();
  if (!config_) return api_error("vm.remove-device", {"VM is not created"});
  // A running VM (DeviceManager::remove_device): the id must be in the device tree. CH then
  // takes the device out of the config and asks the guest to eject it; only the guest's eject
  // (DeviceManager::eject_device) removes the node (guest_pci_eject, for a guest whose note says
  // it ejects). Until then removing the same id again succeeds again (real CH v52 answered 204
  // twice).
  if (vm_ && bdfs_.count(id) == 0) {
    return api_error("vm.remove-device",
                     {"Error from device manager", "Failed to find device corresponding to the given identifier"});
  }
  auto& config = *config_;
  bool found = false;
  std::string disk_path;
  for (const char* list : kDeviceLists) {
    if (!config[list].is_array()) continue;
    auto& arr = config[list];
    for (auto it = arr.begin(); it != arr.end(); ++it) {
      if ((*it)["id"] == id) {
        if (std::string(list) == "fs" && (*it)["socket"].is_string()) vhost_user_.erase((*it)["socket"].get<std::string>());
        if (std::string(list) == "disks" && (*it)["path"].is_string()) disk_path = (*it)["path"].get<std::string>();
        arr.erase(it);
        found = true;
        break;
      }
    }
    if (found) break;
  }
  if (!found && config["vsock"].is_object() && config["vsock"]["id"] == id) {
    config["vsock"] = nullptr;
    found = true;
  }
  // A created VM (no device manager): only the config, and an id not in it is refused.
  if (!vm_ && !found) return api_error("vm.remove-device", {"No device with id \"" + id + "\" to remove"});
  // CH closes a removed net device's preserved fds at once.
  net_fds_.erase(id);
  // Then it notifies the guest (GED PCI_DEVICES_CHANGED, the slot in PCID): a guest that ejects
  // does so once its vCPUs run; another never does.
  if (vm_) {
    if (guest_ejects_) {
      if (std::none_of(unplug_pending_.begin(), unplug_pending_.end(), [&id](const Unplug& u) { return u.id == id; }))
        unplug_pending_.push_back({id, disk_path});
      if (state_ == VmState::Running) schedule(std::chrono::milliseconds(10), [this] { guest_pci_eject(); }, true);
    } else {
      log(0, "vm.remove-device " + id + ": the guest does not eject it: its device-tree node stays");
    }
  }
  return {204, "", false};
}

Reply Vmm::vm_resize(const Json& body) {
  if (!config_) return api_error("vm.resize", {"VM is not created"});
  auto& config = *config_;
  if (vm_) events_.emit("vm", "resizing");
  if (body["desired_vcpus"].is_number()) {
    const auto v = body["desired_vcpus"].get<std::uint64_t>();
    if (vm_ && v > config["cpus"]["max_vcpus"].get<std::uint64_t>()) {
      return api_error("vm.resize",
                       {"Error from CPU manager", "Desired vCPUs count is greater than max"});
    }
    config["cpus"]["boot_vcpus"] = v;
  }
  if (body["desired_ram"].is_number()) {
    // As CH's ACPI hotplug (memory_manager.rs resize, hotplug_ram_region): more memory comes in
    // whole 128 MiB regions, within hotplug_size; less is not unplugged.
    const auto want = body["desired_ram"].get<std::uint64_t>();
    const auto now = config["memory"]["size"].get<std::uint64_t>();
    const auto& m = config["memory"];
    const auto hotplug = m.contains("hotplug_size") && m["hotplug_size"].is_number_unsigned()
                             ? m["hotplug_size"].get<std::uint64_t>() : std::uint64_t{0};
    if (vm_ && want > now) {
      if ((want - now) % (128ULL << 20) != 0)
        return api_error("vm.resize", {"Memory manager error", "The requested hotplug memory addition is not a valid size"});
      if (hotplugged_ram_ + (want - now) > hotplug)
        return api_error("vm.resize", {"Memory manager error", "Not enough space in the hotplug RAM region"});
      hotplugged_ram_ += want - now;
    }
    config["memory"]["size"] = want;
  }
  if (body["desired_balloon"].is_number() && config["balloon"].is_object()) {
    config["balloon"]["size"] = body["desired_balloon"].get<std::uint64_t>();
  }
  if (vm_) events_.emit("vm", "resized");
  return {204, "", false};
}

// ---------------------------------------------------------------------------------------------
// Snapshot / restore: the double writes config.json (the VM config, as CH) and state.json (its
// own small state) into the destination directory. Only a Paused VM can be snapshotted.

Reply Vmm::vm_snapshot(const Json& body) {
  const std::string url = body["destination_url"].get<std::string>();
  if (!vm_) return api_error("vm.snapshot", {"VM is not running"});
  events_.emit("vm", "snapshotting");
  if (state_ != VmState::Paused) {
    return api_error("vm.snapshot",
                     {"Cannot snapshot VM", "Failed to snapshot migratable component",
                      "Trying to snapshot while VM is running"});
  }
  events_.emit("vm", "snapshotted");
  const auto target = url_to_path(url);
  if (!target.error.empty()) {
    auto chain = target.error;
    chain.insert(chain.begin(), "Cannot send VM snapshot");
    return api_error("vm.snapshot", chain);
  }
  const auto* dir = &target.path;
  int err = 0;
  if (!write_file_new(*dir + "/config.json", config_->dump(), err)) {
    return api_error(
        "vm.snapshot",
        {"Cannot send VM snapshot", "Failed to send migratable component snapshot", os_error(err)});
  }
  crash("snapshot");
  Json state;
  state["vmm_double"] = {{"state", to_string(state_)},
                         {"guest_halted", guest_halted_},
                         {"note", "written by vmm-double, a test double of Cloud Hypervisor"}};
  if (!write_file_new(*dir + "/state.json", state.dump(), err)) {
    return api_error(
        "vm.snapshot",
        {"Cannot send VM snapshot", "Failed to send migratable component snapshot", os_error(err)});
  }
  return {204, "", false};
}

Reply Vmm::vm_restore(const Json& body) {
  if (vm_ || config_) return api_error("vm.restore", {"VM is already created"});
  crash("restore");
  quit_without_events("restore");
  close_events("restore");
  if (exit_code_) return {204, "", true};
  const std::string url = body["source_url"].get<std::string>();
  // recv_vm_config (vmm/src/migration.rs) -> VmError::Restore ("Cannot restore VM").
  const auto source = url_to_path(url);
  if (!source.error.empty()) {
    auto chain = source.error;
    chain.insert(chain.begin(), "Cannot restore VM");
    return api_error("vm.restore", chain);
  }
  const auto* dir = &source.path;
  std::string text;
  int err = 0;
  const std::vector<std::string> recv = {"Cannot restore VM",
                                         "Failed to receive migratable component snapshot"};
  if (!read_whole(*dir + "/config.json", text, err)) {
    auto chain = recv;
    chain.push_back(os_error(err));
    return api_error("vm.restore", chain);
  }
  auto cfg = deserialize(text, vm_config_type());
  if (!cfg) {
    auto chain = recv;
    chain.push_back(cfg.error());
    return api_error("vm.restore", chain);
  }
  std::string state_text;
  if (!read_whole(*dir + "/state.json", state_text, err)) {
    auto chain = recv;
    chain.push_back(os_error(err));
    return api_error("vm.restore", chain);
  }
  bool halted = false;
  try {
    halted = Json::parse(state_text).at("vmm_double").value("guest_halted", false);
  } catch (const std::exception& e) {
    auto chain = recv;
    chain.push_back(e.what());
    return api_error("vm.restore", chain);
  }
  config_ = std::move(*cfg);
  if (auto e = open_consoles(); !e.empty()) {
    vm_delete_internal();
    return api_error("vm.restore", e);
  }
  if (auto e = check_bootable(); !e.empty()) {
    vm_delete_internal();  // CH deletes the half-restored VM: vm/deleted
    return api_error("vm.restore", e);
  }
  assign_device_ids();
  if (auto e = open_vsock(); !e.empty()) {
    vm_delete_internal();
    return api_error("vm.restore", e);
  }
  vm_ = true;
  events_.emit("vm", "restoring");
  // Vm::restore takes the disks' advisory locks again (vmm/src/vm.rs).
  if (auto e = lock_disks(); !e.empty()) {
    vm_delete_internal();
    return api_error("vm.restore", e);
  }
  state_ = VmState::Paused;
  events_.emit("vm", "restored");
  guest_start(false);
  guest_halted_ = halted;
  enter_state(VmState::Paused);
  if (body["resume"].get<bool>()) {
    events_.emit("vm", "resuming");
    enter_state(VmState::Running);
    events_.emit("vm", "resumed");
  }
  return {204, "", false};
}

// ---------------------------------------------------------------------------------------------
// The pretend guest: what the project's minimal PVH test guest does, without running code.

bool Vmm::cmdline_has(const std::string& word) const {
  if (!config_ || !(*config_)["payload"].is_object() ||
      !(*config_)["payload"]["cmdline"].is_string())
    return false;
  const auto words = split_words((*config_)["payload"]["cmdline"].get<std::string>());
  return std::find(words.begin(), words.end(), word) != words.end();
}

void Vmm::guest_start(bool banner) {
  if (config_ && config_->contains("cpus") && !vcpus_.running()) (void)vcpus_.start((*config_)["cpus"]);
  ++guest_gen_;
  guest_running_ = true;
  guest_halted_ = false;
  power_button_pending_ = false;
  unplug_pending_.clear();
  ignore_acpi_ = cmdline_has("ignore-acpi");
  no_eject_ = cmdline_has("no-eject");
  guest_line_.clear();
  heartbeat_ = 0;
  // CH's power button: the GED register where CH's memory manager puts it; the guest sees the
  // button only if its kernel says it maps that address (acpi_ged.hpp).
  const Json& cfg = *config_;
  const auto field = [&cfg](const char* a, const char* b) -> Json {
    return cfg.contains(a) && cfg[a].is_object() && cfg[a].contains(b) ? cfg[a][b] : Json();
  };
  const Json bits = field("cpus", "max_phys_bits"), hp = field("memory", "hotplug_size"),
             kernel = field("payload", "kernel");
  const unsigned max_bits = bits.is_number_unsigned() ? bits.get<unsigned>() : 46;
  const bool acpi_hotplug = field("memory", "hotplug_method") != "VirtioMem" &&
                            hp.is_number_unsigned() && hp.get<std::uint64_t>() > 0;
  const std::uint64_t ged = ch_ged_address(ch_phys_bits(max_bits), acpi_hotplug);
  const auto reach =
      kernel.is_string() ? read_guest_reach(kernel.get<std::string>()) : std::nullopt;
  std::string why;
  ged_reachable_ = guest_reaches(reach, ged, why);
  char ged_hex[24];
  std::snprintf(ged_hex, sizeof ged_hex, "0x%016llx", static_cast<unsigned long long>(ged));
  log(0, std::string("power button: CH's GED register at ") + ged_hex +
             (ged_reachable_ ? ": the guest polls it" : ": not seen by the guest: " + why));
  // CH's PCI hotplug registers: the guest ejects what CH removes only if its note says it does
  // and it reaches them (the notification itself comes through the GED).
  const std::uint64_t pcst = ch_pcst_address(ch_phys_bits(max_bits), acpi_hotplug);
  std::string why_pcst;
  guest_ejects_ = ged_reachable_ && reach && reach->ejects_pci && guest_reaches(reach, pcst, why_pcst);
  char pcst_hex[24];
  std::snprintf(pcst_hex, sizeof pcst_hex, "0x%016llx", static_cast<unsigned long long>(pcst));
  log(0, std::string("PCI hot-unplug: CH's PCI hotplug registers at ") + pcst_hex +
             (guest_ejects_ ? ": the guest ejects removed devices"
                            : ": the guest never ejects a removed device: CH keeps its node"));
  const Json segments = field("platform", "num_pci_segments");
  if (banner && serial_) {
    std::string cmdline;
    if ((*config_)["payload"]["cmdline"].is_string())
      cmdline = (*config_)["payload"]["cmdline"].get<std::string>();
    serial_->write("vmm-double pretend guest: booted (a test double: no guest code runs)\r\n");
    serial_->write("cmdline: " + cmdline + "\r\n");
    // What the PVH guest prints once it has looked for the register (it says so in its note).
    if (reach) {
      serial_->write(
          ged_reachable_
              ? std::string("guest: ACPI power button: Cloud Hypervisor GED register at ") +
                    ged_hex + "\r\n"
              : "guest: ACPI power button: the GED register is out of reach, not polled\r\n");
      if (guest_ejects_)
        serial_->write(std::string("guest: ACPI PCI hotplug: Cloud Hypervisor PCST registers at ") + pcst_hex +
                       ", PCI segments: " +
                       std::to_string(segments.is_number_unsigned() ? segments.get<unsigned>() : 1U) + "\r\n");
    }
    serial_->write("ready\r\n");
  }
  if (banner && cmdline_has("poweroff")) {
    schedule(
        std::chrono::milliseconds(20), [this] { guest_poweroff(); }, true);
  }
  if (faults_.heartbeat_ms > 0) {
    auto tick = std::make_shared<std::function<void()>>();
    *tick = [this, tick] {
      if (state_ == VmState::Running && !guest_halted_ && serial_) {
        serial_->write("heartbeat " + std::to_string(++heartbeat_) + "\r\n");
      }
      schedule(std::chrono::milliseconds(faults_.heartbeat_ms), *tick, true);
    };
    schedule(std::chrono::milliseconds(faults_.heartbeat_ms), *tick, true);
  }
}

void Vmm::guest_stop() {
  vcpus_.stop();
  ++guest_gen_;
  guest_running_ = false;
  power_button_pending_ = false;
}

void Vmm::guest_input(const std::string& bytes) {
  for (const char c : bytes) {
    if (!guest_running_ || guest_halted_ || !serial_ || exit_code_) return;
    if (c == '\r' || c == '\n') {
      serial_->write("\r\n");
      const std::string line = guest_line_;
      guest_line_.clear();
      guest_line(line);
    } else if (c == 0x7f || c == '\b') {
      if (!guest_line_.empty()) {
        guest_line_.pop_back();
        serial_->write("\b \b");
      }
    } else {
      serial_->write(std::string(1, c));
      if (guest_line_.size() < 4096) guest_line_.push_back(c);
    }
  }
}

void Vmm::guest_line(const std::string& raw) {
  // As the PVH test guest's run_words: each known word of the line, in order; poweroff, reboot
  // and panic never return to the line.
  for (const auto& word : split_words(raw)) {
    if (word == "poweroff") {
      serial_->write("powering off\r\n");
      schedule(
          std::chrono::milliseconds(5), [this] { guest_poweroff(); }, true);
      return;
    }
    if (word == "reboot") {
      serial_->write("rebooting\r\n");
      schedule(
          std::chrono::milliseconds(5), [this] { guest_reboot(); }, true);
      return;
    }
    if (word == "panic") {
      guest_panic();
      return;
    }
    if (word == "ping") serial_->write("pong\r\n");
    if (word == "ignore-acpi") ignore_acpi_ = true;
    if (word == "no-eject") no_eject_ = true;
  }
}

void Vmm::guest_poweroff() {
  // ACPI power-off -> guest exit event -> vmm_shutdown (CH v52 vmm/src/lib.rs control_loop,
  // EpollDispatch::GuestExit): CH queues vm/shutdown, vm/deleted, vmm/shutdown for its
  // event-monitor thread, and main() then exits without joining that thread
  // (cloud-hypervisor/src/main.rs drops start_event_monitor_thread's JoinHandle): events not yet
  // written are lost. A real CH under load wrote vm/shutdown and lost the other two (issue 39);
  // the double always does that, so the launcher is tested without them.
  if (tearing_down_) return;  // powering off already (the button pressed again meanwhile)
  log(1, "guest powered off");
  auto finish = [this] {
    vm_shutdown_internal();
    events_.stop_accepting();
    vmm_shutdown_and_exit(0);
  };
  if (faults_.poweroff_teardown_ms > 0) {
    // CH's control loop is inside vmm_shutdown (vCPU threads joined, devices and guest memory
    // dropped) before it emits the events and breaks out (vmm/src/lib.rs:1722-1731, 2125-2146):
    // API requests sent meanwhile wait in its channel. The vCPUs have stopped: the guest too.
    tearing_down_ = true;
    guest_stop();
    schedule(std::chrono::milliseconds(faults_.poweroff_teardown_ms), finish, false);
    return;
  }
  finish();
}

void Vmm::answer_after_vmm_thread() {
  // CH v52: the VMM thread has returned and dropped its API receiver; the HTTP thread serves on
  // until main() shuts it down (cloud-hypervisor/src/main.rs:764-772). The request it was waiting
  // on, queued but never taken, finds its answer channel dropped; each later one cannot be sent
  // (vmm/src/api/mod.rs:617-620, ApiError ResponseRecv / RequestSend; both HTTP 500,
  // vmm/src/api/http/mod.rs:80-102). A request held here for another reason (VMM_DOUBLE_HANG, a
  // migration) stays unanswered: the connection closes with the process.
  if (held_conn_) return;
  bool first = true;
  while (auto req = http_.next_request()) {
    log(1, req->method + " " + req->path + " after the VMM thread ended");
    http_.respond(req->conn, 500,
                  first ? error_body({"Error from API", "API response receive error", "receiving on a closed channel"})
                        : error_body({"Error from API", "API request send error", "sending on a closed channel"}));
    first = false;
  }
}

void Vmm::guest_reboot() {
  // Guest reset -> reset event -> vm_reboot (new console devices, a new VM).
  log(1, "guest reboot");
  (void)vm_reboot();
}

void Vmm::guest_panic() {
  if (serial_) serial_->write("Kernel panic - not syncing: requested from the console\r\n");
  if ((*config_)["pvpanic"].get<bool>()) events_.emit("guest", "panic", {{"event", "panic"}});
  guest_halted_ = true;
}

void Vmm::guest_power_button() {
  power_button_pending_ = false;
  if (!guest_running_ || guest_halted_) return;
  if (!ged_reachable_) {
    log(0, "power button: pressed, but the guest does not map CH's GED register: nothing happens");
    return;
  }
  if (ignore_acpi_) {
    if (serial_) serial_->write("ignoring the power button\r\n");
    return;
  }
  if (serial_) serial_->write("ACPI power button: powering off\r\n");
  schedule(
      std::chrono::milliseconds(10), [this] { guest_poweroff(); }, true);
}

// The guest ejects what CH asked it to remove (its PCNT reads PCID, its _EJ0 writes B0EJ), as
// the PVH guest does: CH's DeviceManager::eject_device removes the device-tree node, frees the
// slot and emits vm/device-removed with the device's id and bdf (vmm/src/device_manager.rs).
void Vmm::guest_pci_eject() {
  if (state_ != VmState::Running || !guest_running_ || guest_halted_) return;  // on resume
  for (const auto& [id, disk_path] : unplug_pending_) {
    auto it = bdfs_.find(id);
    if (it == bdfs_.end()) continue;
    if (no_eject_) {  // the guest reads PCID (clearing it) and leaves the device to CH
      if (serial_)
        serial_->write("guest: ACPI PCI hotplug: not ejecting (no-eject) slot " +
                       std::to_string(std::stoul(it->second.substr(8, 2), nullptr, 16)) + "\r\n");
      continue;
    }
    const std::string bdf = it->second;
    bdfs_.erase(it);
    // The virtio device goes with its disk image: the file is closed, its lock released.
    if (!disk_path.empty()) {
      auto f = std::find_if(disk_files_.begin(), disk_files_.end(), [&](const DiskFile& d) { return d.path == disk_path; });
      if (f != disk_files_.end()) disk_files_.erase(f);
    }
    unsigned slot = 0;
    if (bdf.size() >= 10) slot = static_cast<unsigned>(std::stoul(bdf.substr(8, 2), nullptr, 16));
    if (serial_) serial_->write("guest: ACPI PCI hotplug: ejected slot " + std::to_string(slot) + "\r\n");
    log(0, "vm.remove-device " + id + ": the guest ejected it (" + bdf + ")");
    events_.emit("vm", "device-removed", {{"id", id}, {"bdf", bdf}});
  }
  unplug_pending_.clear();
}

}  // namespace chl::vmm_double

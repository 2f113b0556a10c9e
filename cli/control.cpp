// The virtctl-like client commands: status, pause, resume, stop, kill, reboot, events, snapshot,
// restore. Each talks to a running launcher's command socket (found from --state-dir, --vmi or
// --socket). Human output by default, --json for scripts. Exit 1 with a clear message when the
// launcher refuses (wrong state) or is not there.
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <ctime>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/args.hpp"
#include "cli/registry.hpp"
#include "control/command_client.hpp"
#include "cli/run_launcher.hpp"
#include "launcher/state_dir.hpp"
#include "vmi/parser.hpp"

namespace chl::cli {
namespace {
using nlohmann::json;
namespace fs = std::filesystem;

const char* kTarget = "[--state-dir DIR | --vmi FILE | --socket PATH] [--json]";

// The command socket from --socket, --state-dir or --vmi (its default state directory).
std::optional<fs::path> find_socket(const std::string& cmd, const Args& a) {
  if (auto s = a.get("--socket")) return fs::path(*s);
  if (auto d = a.get("--state-dir")) return cli::launcher_socket_path(*d, false);
  if (auto v = a.get("--vmi")) {
    auto text = vmi::read_manifest(*v);
    if (!text) {
      usage_error(cmd, text.error().message(), 1);
      return std::nullopt;
    }
    auto parsed = vmi::parse_vmi(*text);
    if (parsed.fatal || parsed.vmi.metadata.name.empty()) {
      usage_error(cmd, "cannot read the VMI's name from " + *v, 1);
      return std::nullopt;
    }
    return cli::launcher_socket_path(launcher::default_state_dir(parsed.vmi.metadata.namespace_, parsed.vmi.metadata.name), false);
  }
  usage_error(cmd, "say which VM: --state-dir DIR, --vmi FILE or --socket PATH");
  return std::nullopt;
}

std::string event_line(const json& e) {
  std::string s;
  if (e.value("type", "") == "Current") {
    s = "current state: " + e.value("state", "?") + " (" + e.value("reason", "?") + ")";
  } else {
    s = e.value("type", "?") + "/" + e.value("detail", "?") + " -> " + e.value("state", "?") + " (" +
        e.value("reason", "?") + ")";
    if (e.contains("cause")) s += "  [" + e.value("cause", "") + "]";
  }
  return s;
}

void print_status(const json& j) {
  std::printf("%s/%s on %s: %s (%s)%s\n", j.value("namespace", "").c_str(), j.value("name", "").c_str(),
              j.value("hypervisor", "").c_str(), j.value("state", "").c_str(), j.value("reason", "").c_str(),
              j.value("stopping", false) ? ", stopping" : "");
  if (j.contains("vmm")) {
    const auto& v = j["vmm"];
    std::printf("  vmm:       pid %s, %s\n", v.contains("pid") ? v["pid"].dump().c_str() : "-",
                v.value("version", "").c_str());
    if (v.contains("cpu_isolation") && v["cpu_isolation"].is_object()) {
      // isolateEmulatorThread: read from /proc when asked (drivers/cloud_hypervisor/thread_isolation.hpp).
      const auto& iso = v["cpu_isolation"];
      std::string vcpus;
      for (const auto& c : iso.value("vcpu_cpus", json::array())) vcpus += (vcpus.empty() ? "" : ",") + c.dump();
      std::printf("  cpus:      vCPUs on %s, every other VMM thread on %s: %s\n", vcpus.c_str(),
                  iso.value("emulator_cpus", "?").c_str(),
                  iso.value("isolated", false) ? "isolated" : "NOT isolated");
      for (const auto& pr : iso.value("problems", json::array()))
        std::printf("             %s\n", pr.get<std::string>().c_str());
      if (iso.contains("error")) std::printf("             %s\n", iso.value("error", "").c_str());
    }
    if (v.contains("realtime") && v["realtime"].is_object()) {
      // realtime: each vCPU thread's policy read now (drivers/cloud_hypervisor/vcpu_realtime.hpp).
      const auto& rt = v["realtime"];
      std::string vcpus;
      for (const auto& c : rt.value("vcpus", json::array()))
        vcpus += (vcpus.empty() ? "" : ", ") + ("vCPU " + c.value("vcpu", json()).dump() + " " +
                                                c.value("policy", "?") + " " + c.value("priority", json()).dump());
      std::printf("  realtime:  %s: %s\n", rt.value("realtime", false) ? "SCHED_FIFO" : "NOT realtime",
                  vcpus.empty() ? "no vCPU in the mask" : vcpus.c_str());
      for (const auto& pr : rt.value("problems", json::array()))
        std::printf("             %s\n", pr.get<std::string>().c_str());
    }
  }
  if (j.contains("console")) {
    const auto& c = j["console"];
    std::printf("  console:   %s%s%s\n", c.value("socket", "").c_str(),
                c.contains("pty") ? (" (pty " + c.value("pty", "") + ")").c_str() : "",
                c.value("client_connected", false) ? ", a client is attached" : "");
  }
  if (j.contains("info") && j["info"].is_object()) {
    const auto& info = j["info"];
    const auto& cfg = info.value("config", json::object());
    auto cpus = cfg.value("cpus", json::object()).value("boot_vcpus", 0);
    const auto memory = cfg.value("memory", json::object());
    auto mem = memory.value("size", 0ULL);
    // With NUMA passthrough the memory is in zones (memory.size 0).
    for (const auto& z : memory.value("zones", json::array())) mem += z.value("size", 0ULL);
    std::printf("  vm:        %d vCPU, %llu MiB, %zu disk(s), VMM state %s\n", cpus,
                static_cast<unsigned long long>(mem >> 20),
                cfg.contains("disks") && cfg["disks"].is_array() ? cfg["disks"].size() : 0,
                info.value("state", "").c_str());
  }
  std::printf("  state dir: %s\n", j.value("state_dir", "").c_str());
  if (j.contains("error")) std::printf("  error:     %s\n", j.value("error", "").c_str());
}

int report(const std::string& cmd, const common::Result<control::CommandResponse>& r, bool as_json,
           const std::function<void(const json&)>& human) {
  if (!r) return usage_error(cmd, r.error().message(), 1);
  json body = json::parse(r->body, nullptr, false);
  if (r->status != 200) {
    std::string msg = body.is_object() && body.contains("error") ? body["error"].get<std::string>() : r->body;
    return usage_error(cmd, msg, 1);
  }
  if (as_json) std::printf("%s\n", body.dump().c_str());
  else human(body);
  return 0;
}

Args target_args(std::set<std::string> extra_values = {}, std::set<std::string> extra_switches = {}) {
  std::set<std::string> values = {"--state-dir", "--vmi", "--socket"};
  values.insert(extra_values.begin(), extra_values.end());
  std::set<std::string> switches = {"--json"};
  switches.insert(extra_switches.begin(), extra_switches.end());
  return Args(values, switches);
}

// pause, resume, reboot, kill, status: no arguments of their own.
Command simple(const std::string& name, const std::string& summary, const std::string& method,
               const std::string& target, const std::string& done) {
  Command c;
  c.name = name;
  c.summary = summary;
  c.usage = "usage: ch-launcher " + name + " " + kTarget + "\n\n" + summary;
  c.run = [=](const std::vector<std::string>& argv) {
    Args a = target_args();
    if (!a.parse(argv)) return usage_error(name, a.error());
    auto sock = find_socket(name, a);
    if (!sock) return 2;
    auto r = control::command_request(*sock, method, target);
    return report(name, r, a.has("--json"), [&](const json& j) {
      if (name == "status") print_status(j);
      else std::printf("%s\n", done.c_str());
    });
  };
  return c;
}

Registrar r_status(simple("status", "show the VM's state, VMM, console and live counters", "GET", "/v1/domain", ""));
Registrar r_pause(simple("pause", "pause a running VM", "PUT", "/v1/pause", "paused"));
Registrar r_resume(simple("resume", "resume a paused VM", "PUT", "/v1/resume", "resumed"));
Registrar r_reboot(simple("reboot", "reboot the VM", "PUT", "/v1/reboot", "rebooting"));

// stop and kill: send the request, then follow the event stream until the VM is down.
int stop_or_kill(const std::string& name, const std::vector<std::string>& argv) {
  Args a = target_args({"--grace-period"}, {"--no-wait"});
  if (!a.parse(argv)) return usage_error(name, a.error());
  auto sock = find_socket(name, a);
  if (!sock) return 2;
  json body = json::object();
  if (auto g = a.get("--grace-period")) {
    try {
      body["grace_period_seconds"] = std::stoi(*g);
    } catch (...) {
      return usage_error(name, "--grace-period takes a whole number of seconds");
    }
  }
  const std::string target = name == "kill" ? "/v1/kill" : "/v1/shutdown";
  const std::string payload = body.empty() ? std::string() : body.dump();
  if (a.has("--no-wait")) {
    int rc = report(name, control::command_request(*sock, "PUT", target, payload), false, [](const json&) {});
    if (rc == 0) std::printf("%s\n", name == "kill" ? "killing" : "stopping");
    return rc;
  }
  // Follow the VM down. The event stream is opened *before* the request, so that the final
  // state is seen even when the VM is gone (and the launcher with it) a moment after the
  // request: the stream starts with the current state, then every change, and the launcher
  // closes it when the VM is gone.
  struct Follow {
    std::mutex m;
    std::condition_variable cv;
    bool subscribed = false, done = false;
    std::string state = "?", reason = "?";
  };
  auto f = std::make_shared<Follow>();  // shared with the follower, which may outlive a refusal
  std::thread follower([f, path = *sock] {
    (void)control::command_stream(path, "/v1/events", [&](const std::string& line) {
      json e = json::parse(line, nullptr, false);
      std::lock_guard lock(f->m);
      if (e.is_object()) {
        f->state = e.value("state", f->state);
        f->reason = e.value("reason", f->reason);
      }
      f->subscribed = true;
      f->cv.notify_all();
      return !(f->state == "Shutoff" || f->state == "Crashed");
    });
    std::lock_guard lock(f->m);
    f->done = true;
    f->cv.notify_all();
  });
  bool already_down = false;
  {
    std::unique_lock lock(f->m);
    f->cv.wait(lock, [&] { return f->subscribed || f->done; });
    already_down = f->state == "Shutoff" || f->state == "Crashed";
  }
  int rc = 0;
  if (!already_down) rc = report(name, control::command_request(*sock, "PUT", target, payload), false, [](const json&) {});
  if (rc != 0) {
    // Refused (the reason is printed): the VM is not going down, so stop following.
    follower.detach();
    return rc;
  }
  follower.join();
  std::string last_state = f->state, last_reason = f->reason;
  if (last_state == "?") {
    // No launcher answered the stream: it had already finished.
    last_state = "Shutoff";
    last_reason = "gone";
  }
  if (a.has("--json")) std::printf("%s\n", json{{"state", last_state}, {"reason", last_reason}}.dump().c_str());
  else std::printf("%s (%s)\n", last_state.c_str(), last_reason.c_str());
  return 0;
}

Registrar r_stop({"stop", "stop the VM gracefully (ACPI power button, forced off after the grace period)",
                  std::string("usage: ch-launcher stop ") + kTarget + " [--grace-period SECONDS] [--no-wait]\n\n"
                  "Press the ACPI power button; if the guest is not off within the grace period the VM is forced off.\n"
                  "Waits until the VM is down unless --no-wait.",
                  [](const std::vector<std::string>& a) { return stop_or_kill("stop", a); }});
Registrar r_kill({"kill", "force the VM off at once",
                  std::string("usage: ch-launcher kill ") + kTarget + " [--no-wait]",
                  [](const std::vector<std::string>& a) { return stop_or_kill("kill", a); }});

int events_cmd(const std::vector<std::string>& argv) {
  Args a = target_args({}, {"--follow-only"});
  if (!a.parse(argv)) return usage_error("events", a.error());
  auto sock = find_socket("events", a);
  if (!sock) return 2;
  const bool as_json = a.has("--json");
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  auto st = control::command_stream(*sock, "/v1/events", [&](const std::string& line) {
    if (as_json) {
      std::printf("%s\n", line.c_str());
    } else {
      json e = json::parse(line, nullptr, false);
      std::printf("%s\n", e.is_object() ? event_line(e).c_str() : line.c_str());
    }
    return true;
  });
  if (!st) return usage_error("events", st.error().message(), 1);
  return 0;
}

Registrar r_events({"events", "stream the VM's domain events (current state first) until it ends",
                    std::string("usage: ch-launcher events ") + kTarget, events_cmd});

int snapshot_restore(const std::string& name, const std::vector<std::string>& argv) {
  Args a = target_args({"--dir"});
  if (!a.parse(argv)) return usage_error(name, a.error());
  auto dir = a.get("--dir");
  if (!dir) return usage_error(name, "--dir DIR is required");
  auto sock = find_socket(name, a);
  if (!sock) return 2;
  json body = {{name == "snapshot" ? "destination" : "source", fs::absolute(*dir).string()}};
  auto r = control::command_request(*sock, "PUT", "/v1/" + name, body.dump());
  return report(name, r, a.has("--json"), [&](const json&) {
    std::printf("%s %s\n", name == "snapshot" ? "snapshot written to" : "restored from", fs::absolute(*dir).c_str());
  });
}

Registrar r_snapshot({"snapshot", "snapshot the VM into a new directory (paused around it)",
                      std::string("usage: ch-launcher snapshot ") + kTarget + " --dir DIR",
                      [](const std::vector<std::string>& a) { return snapshot_restore("snapshot", a); }});
Registrar r_restore({"restore", "restore the VM from a snapshot directory",
                     std::string("usage: ch-launcher restore ") + kTarget + " --dir DIR",
                     [](const std::vector<std::string>& a) { return snapshot_restore("restore", a); }});

}  // namespace
}  // namespace chl::cli

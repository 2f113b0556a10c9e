// Tests for the VMM double — written as tests of Cloud Hypervisor's behaviour, so they run
// against a real cloud-hypervisor too: CLOUD_HYPERVISOR_BIN=/path/to/cloud-hypervisor
// (boot tests then need CHL_TEST_GUEST_KERNEL, the project's minimal PVH test guest; they skip
// with a reason without it). Fault-injection tests are about the double only and skip on CH.
// Raw HTTP over the Unix socket (a tiny client below), so the bytes on the wire are checked.
#include <cpuid.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.hpp"
#include "common/unique_fd.hpp"
#include "common/unix_socket.hpp"
#include "tests/support/pod_devices.hpp"
#include "tests/support/real_vmm_limits.hpp"
#include "tests/support/test_support.hpp"

using chl::common::ChildProcess;
using chl::common::SpawnOptions;
using chl::common::UniqueFd;
using chl::test::TempDir;
using chl::test::wait_until;
using Json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

struct HttpReply {
  int status = -1;  // -1: no answer (timeout or connection closed)
  std::string head;
  std::string body;
};

// One request on a fresh connection; fds ride along with SCM_RIGHTS.
HttpReply http(const std::filesystem::path& sock, const std::string& method,
               const std::string& endpoint, const std::optional<std::string>& body = std::nullopt,
               const std::vector<int>& fds = {}, std::chrono::milliseconds timeout = 10s) {
  HttpReply r;
  auto connected = chl::common::connect_unix(sock);
  if (!connected) return r;
  UniqueFd s = std::move(*connected);
  std::string req =
      method + " /api/v1/" + endpoint + " HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n";
  if (body)
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body->size()) +
           "\r\n";
  req += "\r\n";
  if (body) req += *body;
  iovec iov{req.data(), req.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> cbuf;
  if (!fds.empty()) {
    cbuf.resize(CMSG_SPACE(sizeof(int) * fds.size()));
    msg.msg_control = cbuf.data();
    msg.msg_controllen = cbuf.size();
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cm), fds.data(), sizeof(int) * fds.size());
  }
  if (::sendmsg(s.get(), &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) return r;
  std::string in;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto he = in.find("\r\n\r\n");
    if (he != std::string::npos) {
      r.head = in.substr(0, he);
      std::smatch m;
      std::size_t len = 0;
      if (std::regex_search(r.head, m, std::regex("Content-Length: (\\d+)")))
        len = std::stoul(m[1]);
      if (in.size() >= he + 4 + len) {
        r.status = std::stoi(r.head.substr(9, 3));
        r.body = in.substr(he + 4, len);
        return r;
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return r;
    pollfd p{s.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return r;
    char buf[65536];
    const ssize_t n = ::read(s.get(), buf, sizeof buf);
    if (n <= 0) return r;
    in.append(buf, static_cast<std::size_t>(n));
  }
}

struct Event {
  std::string source;
  std::string event;
  Json properties;
};

// CH's stream: pretty JSON objects, each followed by a blank line.
std::vector<Event> parse_events(const std::string& text) {
  std::vector<Event> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto end = text.find("\n}\n\n", pos);
    if (end == std::string::npos) break;
    const std::string chunk = text.substr(pos, end + 2 - pos);
    pos = end + 4;
    const auto start = chunk.rfind("\n{\n");
    const std::string obj = start == std::string::npos ? chunk : chunk.substr(start + 1);
    auto j = Json::parse(obj, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("event")) continue;
    out.push_back({j["source"], j["event"], j["properties"]});
  }
  return out;
}

std::vector<std::string> names(const std::vector<Event>& evs) {
  std::vector<std::string> n;
  for (const auto& e : evs) n.push_back(e.source + "/" + e.event);
  return n;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

struct VmmOptions {
  bool api_fd = false;           // pass a listening socket as fd 3 instead of path=
  bool event_fd = false;         // event monitor on a pipe (fd 4) instead of a file
  std::vector<std::string> env;  // extra KEY=VALUE (fault injection)
};

// Who the VMM runs as: argv before the VMM's (setpriv … to drop privileges), and the owner its
// directory is given (uid and gid).
struct RunAs {
  std::vector<std::string> prefix;
  std::optional<uid_t> owner;
};

// A VMM process (the double or CLOUD_HYPERVISOR_BIN) with its API socket and event file.
class Vmm {
 public:
  explicit Vmm(const VmmOptions& o = VmmOptions(), const RunAs& as = RunAs()) : dir_("vmmd") {
    SpawnOptions so;
    if (as.owner) REQUIRE(::chown(dir_.path().c_str(), *as.owner, *as.owner) == 0);
    so.argv = as.prefix;
    so.argv.insert(so.argv.end(), {chl::test::vmm_binary(), "--api-socket"});
    UniqueFd listener;
    if (o.api_fd) {
      auto bound = chl::common::listen_unix(sock());
      REQUIRE_MESSAGE(bound, (bound ? "" : bound.error().message()));
      listener = std::move(*bound);
      so.argv.push_back("fd=3");
      so.pass_fds.emplace_back(listener.get(), 3);
    } else {
      so.argv.push_back("path=" + sock().string());
    }
    so.argv.push_back("--event-monitor");
    int pipefd[2] = {-1, -1};
    if (o.event_fd) {
      REQUIRE(::pipe2(pipefd, O_CLOEXEC) == 0);
      event_pipe_.reset(pipefd[0]);
      so.argv.push_back("fd=4");
      so.pass_fds.emplace_back(pipefd[1], 4);
    } else {
      so.argv.push_back("path=" + (dir_ / "events").string());
    }
    for (char** e = environ; *e; ++e) so.env.emplace_back(*e);
    for (const auto& e : o.env) so.env.push_back(e);
    stderr_.reset(
        ::open((dir_ / "stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    so.stderr_fd = stderr_.get();
    so.stdout_fd = stderr_.get();
    auto child = ChildProcess::spawn(so);
    if (pipefd[1] >= 0) ::close(pipefd[1]);
    REQUIRE_MESSAGE(child, (child ? "" : child.error().message()));
    child_ = std::move(*child);
    if (event_pipe_) (void)::fcntl(event_pipe_.get(), F_SETFL, O_NONBLOCK);
    REQUIRE_MESSAGE(
        wait_until(
            10s,
            [&] { return http(sock(), "GET", "vmm.ping", std::nullopt, {}, 1s).status == 200; }),
        "VMM did not answer vmm.ping; stderr: " << stderr_text());
  }

  [[nodiscard]] std::filesystem::path sock() const { return dir_ / "api.sock"; }
  [[nodiscard]] const TempDir& dir() const { return dir_; }
  ChildProcess& child() { return child_; }

  HttpReply put(const std::string& ep, const std::optional<std::string>& body = std::nullopt,
                const std::vector<int>& fds = {}) {
    return http(sock(), "PUT", ep, body, fds);
  }
  HttpReply get(const std::string& ep) { return http(sock(), "GET", ep); }

  std::string events_text() {
    if (event_pipe_) {
      char buf[65536];
      for (;;) {
        const ssize_t n = ::read(event_pipe_.get(), buf, sizeof buf);
        if (n <= 0) break;
        pipe_text_.append(buf, static_cast<std::size_t>(n));
      }
      return pipe_text_;
    }
    return chl::test::read_file(dir_ / "events");
  }
  std::vector<Event> events() { return parse_events(events_text()); }
  // The event pipe reached end of file (every writer closed it); reads what is pending first.
  bool events_closed() {
    if (!event_pipe_) return false;
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(event_pipe_.get(), buf, sizeof buf);
      if (n == 0) return true;
      if (n < 0) return false;
      pipe_text_.append(buf, static_cast<std::size_t>(n));
    }
  }
  std::string stderr_text() const { return chl::test::read_file(dir_ / "stderr"); }

  // Wait until `seq` appears in order (other events may sit between).
  bool wait_events(const std::vector<std::string>& seq, std::chrono::milliseconds t = 10s) {
    return wait_until(t, [&] {
      const auto got = names(events());
      std::size_t i = 0;
      for (const auto& g : got) {
        if (i < seq.size() && g == seq[i]) ++i;
      }
      return i == seq.size();
    });
  }

  std::optional<chl::common::ExitStatus> wait_exit(std::chrono::milliseconds t = 10s) {
    auto r = child_.wait_for(t);
    if (!r) return std::nullopt;
    return *r;
  }

 private:
  TempDir dir_;
  UniqueFd stderr_;
  UniqueFd event_pipe_;
  std::string pipe_text_;
  ChildProcess child_;
};

// A kernel to boot: the real guest for a real VMM; for the double the project's PVH guest when
// it is built (the double reads its ELF note: how it reaches CH's power button), else any
// readable file (whose guest never sees the power button).
std::optional<std::string> guest_kernel(const TempDir& dir) {
  if (chl::test::using_real_vmm()) {
    const char* k = std::getenv("CHL_TEST_GUEST_KERNEL");
    if (!k || !*k) return std::nullopt;
    return std::string(k);
  }
  if (std::filesystem::exists(chl::test::project_pvh_guest()))
    return chl::test::project_pvh_guest().string();
  const auto p = dir / "fake-kernel.elf";
  chl::test::write_file(p, "not a kernel: the VMM double only checks that it can be read\n");
  return p.string();
}

std::string vm_config(const std::string& kernel, const std::string& cmdline,
                      const std::string& extra = "") {
  Json c;
  c["cpus"] = {{"boot_vcpus", 1}, {"max_vcpus", 1}};
  c["memory"] = {{"size", 64 << 20}};
  c["payload"] = {{"kernel", kernel}, {"cmdline", cmdline}};
  c["serial"] = {{"mode", "Pty"}};
  c["console"] = {{"mode", "Off"}};
  c["pvpanic"] = true;
  std::string s = c.dump();
  if (!extra.empty()) s = s.substr(0, s.size() - 1) + "," + extra + "}";
  return s;
}

// The guest's serial line, from the host side.
class Serial {
 public:
  explicit Serial(const std::string& path)
      : fd_(::open(path.c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK)) {
    termios t{};
    if (fd_ && ::tcgetattr(fd_.get(), &t) == 0) {
      ::cfmakeraw(&t);
      ::tcsetattr(fd_.get(), TCSANOW, &t);
    }
  }
  bool ok() const { return fd_.valid(); }
  void send(const std::string& s) { (void)!::write(fd_.get(), s.data(), s.size()); }
  bool wait_for(const std::string& needle, std::chrono::milliseconds t = 10s) {
    return wait_until(t, [&] {
      char buf[4096];
      for (;;) {
        const ssize_t n = ::read(fd_.get(), buf, sizeof buf);
        if (n <= 0) break;
        seen_.append(buf, static_cast<std::size_t>(n));
      }
      return seen_.find(needle) != std::string::npos;
    });
  }
  const std::string& seen() const { return seen_; }

 private:
  UniqueFd fd_;
  std::string seen_;
};

std::string serial_path(Vmm& vmm) {
  auto info = vmm.get("vm.info");
  auto j = Json::parse(info.body, nullptr, false);
  if (j.is_discarded()) return {};
  return j["config"]["serial"]["file"].is_string()
             ? j["config"]["serial"]["file"].get<std::string>()
             : "";
}

// The events of a VMM that ended through CH's vmm_shutdown (vmm.shutdown, SIGTERM/SIGINT, a
// guest power-off: CH v52 vmm/src/lib.rs control_loop -> vmm_shutdown -> vm_delete): `head`,
// then `tail`. CH queues the tail for its event-monitor thread, but main() returns as soon as the
// VMM thread is joined and never joins that thread (cloud-hypervisor/src/main.rs drops
// start_event_monitor_thread's JoinHandle), so a real CH's stream ends after any prefix of the
// tail (issue 39: `vm/shutdown` alone after a guest power-off, `vm/deleted` alone after
// vmm.shutdown, under load). The double writes the whole tail, except after a guest power-off
// (guest_poweroff_events). The exit status and the socket file say the VMM ended.
bool ch_exit_events(const std::string& got, const std::string& head, const std::vector<std::string>& tail) {
  std::string want = head;
  if (!chl::test::using_real_vmm()) {
    for (const auto& t : tail) want += " " + t;
    return got == want;
  }
  if (got == want) return true;
  for (const auto& t : tail) {
    want += " " + t;
    if (got == want) return true;
  }
  return false;
}

// After a guest power-off the double writes `vm/shutdown` and loses CH's `vm/deleted` and
// `vmm/shutdown`, the outcome a real CH gave under load (docs/vmm-double.md), so the launcher is
// always tested without them; a real CH writes any prefix of the three.
bool guest_poweroff_events(const std::string& got) {
  const std::string head = "vmm/starting vm/booting vm/booted";
  if (!chl::test::using_real_vmm()) return got == head + " vm/shutdown";
  return ch_exit_events(got, head, {"vm/shutdown", "vm/deleted", "vmm/shutdown"});
}

#define SKIP_ON_REAL_VMM(why)        \
  if (chl::test::using_real_vmm()) { \
    chl::test::skip(why);            \
    return;                          \
  }

}  // namespace

// Every case here is a test of Cloud Hypervisor (ctest label vmm: run against the double and
// against a real CH) but those of test suite "double", the double's own knobs (label double too:
// never against a real CH). tests/vmm_double_tests/CMakeLists.txt: SUITE_LANES.
TEST_CASE("version line and clap's error for an unknown flag") {
  auto v = chl::test::run_command({chl::test::vmm_binary(), "--version"});
  CHECK(v.exit_code == 0);
  CHECK(v.output.rfind("cloud-hypervisor v", 0) == 0);
  if (!chl::test::using_real_vmm())
    CHECK(v.output == "cloud-hypervisor v52.0.0 (vmm-double test double)\n");
  auto u = chl::test::run_command({chl::test::vmm_binary(), "--no-such-flag"});
  CHECK(u.exit_code == 2);
  CHECK(u.output.find("error: unexpected argument '--no-such-flag' found") != std::string::npos);
}

TEST_CASE(
    "event monitor: vmm/starting first / pretty JSON and a blank line / monotonic timestamps") {
  Vmm vmm;
  REQUIRE(vmm.wait_events({"vmm/starting"}));
  const std::string text = vmm.events_text();
  const std::regex first(
      "^\\{\\n  \"timestamp\": \\{\\n    \"secs\": 0,\\n    \"nanos\": \\d+\\n  \\},\\n  "
      "\"source\": \"vmm\",\\n"
      "  \"event\": \"starting\",\\n  \"properties\": null\\n\\}\\n\\n");
  CHECK_MESSAGE(std::regex_search(text, first), "events: [" << text << "]");
}

TEST_CASE("no VM: ping / info / boot / pause / counters answer as CH v52") {
  Vmm vmm;
  auto ping = vmm.get("vmm.ping");
  CHECK(ping.status == 200);
  CHECK(ping.head.find("Server: Cloud Hypervisor API") != std::string::npos);
  auto pj = Json::parse(ping.body);
  CHECK(pj["version"].get<std::string>().rfind("52.", 0) == 0);
  CHECK(pj["pid"] == vmm.child().pid());

  CHECK(vmm.get("vm.info").body ==
        R"J(["Error from API","The VM info is not available","VM is not created"])J");
  auto boot = vmm.put("vm.boot");
  CHECK(boot.status == 500);
  CHECK(boot.body == R"J(["Error from API","The VM could not boot","VM config is missing"])J");
  CHECK(vmm.put("vm.pause").body ==
        R"J(["Error from API","The VM could not be paused","VM is not running"])J");
  CHECK(vmm.get("vm.counters").body ==
        R"J(["Error from API","The VM info is not available","VM is not running"])J");
  // Refused boot still emits vm/booting; the failed pause emits nothing.
  REQUIRE(vmm.wait_events({"vmm/starting", "vm/booting"}));
  CHECK(join(names(vmm.events())) == "vmm/starting vm/booting");
}

TEST_CASE(
    "HTTP errors: 400 deserialize with serde positions / 404 unknown endpoint / 400 wrong method") {
  Vmm vmm;
  auto missing = vmm.put("vm.create", R"J({"cpus": {"boot_vcpus": 1}})J");
  CHECK(missing.status == 400);
  CHECK(missing.body ==
        R"J(["Failed to deserialize JSON","missing field `max_vcpus` at line 1 column 26"])J");
  auto notjson = vmm.put("vm.create", R"J("notjson")J");
  CHECK(notjson.status == 400);
  CHECK(
      notjson.body ==
      R"J(["Failed to deserialize JSON","invalid type: string \"notjson\", expected struct VmConfig at line 1 column 9"])J");
  auto unknown = vmm.get("vm.no-such-thing");
  CHECK(unknown.status == 404);
  CHECK(unknown.body == R"J(["Not Found"])J");
  auto wrong = vmm.get("vm.boot");
  CHECK(wrong.status == 400);
  CHECK(wrong.body == R"J(["Bad Request"])J");
  // A body where none is expected is refused too.
  CHECK(vmm.put("vm.pause", "{}").status == 400);
}

TEST_CASE(
    "Created state: empty payload accepted / boot refused with CH's chain / create twice / "
    "delete") {
  Vmm vmm;
  auto c = vmm.put("vm.create",
                   R"J({"cpus":{"boot_vcpus":1,"max_vcpus":1},"payload":{},"bogus_field":true})J");
  CHECK(c.status == 204);
  CHECK(c.head.find("Content-Length") == std::string::npos);
  auto info = Json::parse(vmm.get("vm.info").body);
  CHECK(info["state"] == "Created");
  CHECK_FALSE(info["config"].contains("bogus_field"));
  CHECK(info["config"]["memory"]["size"] == 536870912);
  CHECK(info["config"]["rng"]["src"] == "/dev/urandom");
  auto boot = vmm.put("vm.boot");
  CHECK(boot.status == 500);
  CHECK(
      boot.body ==
      R"J(["Error from API","The VM could not boot","Failed to validate config","Payload configuration is not bootable","No bootitem provided: neither firmware nor kernel"])J");
  CHECK(vmm.put("vm.create", R"J({"payload":{}})J").body ==
        R"J(["Error from API","The VM could not be created","VM is already created"])J");
  CHECK(vmm.put("vm.resume").body ==
        R"J(["Error from API","The VM could not resume","VM is not running"])J");
  CHECK(vmm.put("vm.delete").status == 204);
  REQUIRE(vmm.wait_events({"vmm/starting", "vm/booting", "vm/deleted"}));
  CHECK(join(names(vmm.events())) == "vmm/starting vm/booting vm/deleted");
  CHECK(vmm.get("vm.info").status == 500);
}

TEST_CASE("boot checks the disk: CH's 'Cannot open disk path' chain") {
  Vmm vmm;
  auto kernel = guest_kernel(vmm.dir());
  if (!kernel) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  const std::string nope = (vmm.dir() / "nope.img").string();
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0",
                                         R"J("disks":[{"path":")J" + nope + R"J("}])J"))
              .status == 204);
  auto boot = vmm.put("vm.boot");
  CHECK(boot.status == 500);
  CHECK_MESSAGE(boot.body.find(R"J("Cannot open disk path","I/O error (path=)J" + nope +
                               R"J( op=open)","No such file or directory (os error 2)"])J") !=
                    std::string::npos,
                boot.body);
}

TEST_CASE(
    "lifecycle events: boot / pause / resume / refused transitions / reboot / shutdown / boot "
    "again / delete") {
  Vmm vmm;
  auto kernel = guest_kernel(vmm.dir());
  if (!kernel) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0 stay-up")).status == 204);
  REQUIRE(vmm.put("vm.boot").status == 204);
  CHECK(Json::parse(vmm.get("vm.info").body)["state"] == "Running");
  CHECK(
      vmm.put("vm.boot").body ==
      R"J(["Error from API","The VM could not boot","invalid VM state transition: Running to Running"])J");
  CHECK(vmm.put("vm.pause").status == 204);
  CHECK(Json::parse(vmm.get("vm.info").body)["state"] == "Paused");
  CHECK(
      vmm.put("vm.pause").body ==
      R"J(["Error from API","The VM could not be paused","Cannot pause VM","Failed to pause migratable component","Invalid transition: InvalidStateTransition(Paused, Paused)"])J");
  CHECK(vmm.put("vm.resume").status == 204);
  CHECK(
      vmm.put("vm.resume").body ==
      R"J(["Error from API","The VM could not resume","Cannot resume VM","Failed to resume migratable component","Invalid transition: InvalidStateTransition(Running, Running)"])J");
  CHECK(vmm.put("vm.reboot").status == 204);
  CHECK(vmm.put("vm.shutdown").status == 204);
  CHECK(vmm.get("vm.info").status == 200);  // still defined after vm.shutdown
  CHECK(vmm.put("vm.boot").status == 204);
  CHECK(vmm.put("vm.delete").status == 204);
  const std::vector<std::string> expected = {
      "vmm/starting", "vm/booting",  "vm/booted",  "vm/booting",  "vm/pausing",   "vm/paused",
      "vm/pausing",   "vm/resuming", "vm/resumed", "vm/resuming", "vm/rebooting", "vm/rebooted",
      "vm/shutdown",  "vm/booting",  "vm/booted",  "vm/shutdown", "vm/deleted"};
  REQUIRE(vmm.wait_events(expected));
  CHECK(join(names(vmm.events())) == join(expected));
}

TEST_CASE("api socket fd= and event monitor on a pipe fd= - vmm.shutdown answers 200 and exits 0") {
  Vmm vmm({.api_fd = true, .event_fd = true, .env = {}});
  REQUIRE(vmm.wait_events({"vmm/starting"}));
  auto r = vmm.put("vmm.shutdown");
  CHECK(r.status == 200);
  CHECK(r.body.empty());
  auto st = vmm.wait_exit();
  REQUIRE(st);
  CHECK(st->success());
  CHECK(vmm.events_closed());  // the VMM is gone: everything it wrote is in
  const auto got = join(names(vmm.events()));
  CHECK_MESSAGE(ch_exit_events(got, "vmm/starting", {"vmm/shutdown"}), got);
}

TEST_CASE(
    "path= socket: vmm.shutdown with a VM created emits vm/deleted and vmm/shutdown / removes the "
    "socket") {
  Vmm vmm;
  REQUIRE(vmm.put("vm.create", R"J({"payload":{}})J").status == 204);
  CHECK(vmm.put("vmm.shutdown").status == 200);
  auto st = vmm.wait_exit();
  REQUIRE(st);
  CHECK(st->success());
  CHECK_FALSE(std::filesystem::exists(vmm.sock()));
  const auto got = join(names(vmm.events()));
  CHECK_MESSAGE(ch_exit_events(got, "vmm/starting", {"vm/deleted", "vmm/shutdown"}), got);
}

TEST_CASE("SIGTERM: shutdown events / exit 0 / socket removed") {
  Vmm vmm;
  REQUIRE(vmm.put("vm.create", R"J({"payload":{}})J").status == 204);
  REQUIRE(vmm.child().signal(SIGTERM));
  auto st = vmm.wait_exit();
  REQUIRE(st);
  CHECK_MESSAGE(st->success(), st->describe());
  CHECK_FALSE(std::filesystem::exists(vmm.sock()));
  const auto got = join(names(vmm.events()));
  CHECK_MESSAGE(ch_exit_events(got, "vmm/starting", {"vm/deleted", "vmm/shutdown"}), got);
}

TEST_CASE("SIGINT while running: vm/shutdown / vm/deleted / vmm/shutdown and exit 0") {
  Vmm vmm;
  auto kernel = guest_kernel(vmm.dir());
  if (!kernel) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0")).status == 204);
  REQUIRE(vmm.put("vm.boot").status == 204);
  REQUIRE(vmm.child().signal(SIGINT));
  auto st = vmm.wait_exit();
  REQUIRE(st);
  CHECK_MESSAGE(st->success(), st->describe());
  CHECK_FALSE(std::filesystem::exists(vmm.sock()));
  const auto got = join(names(vmm.events()));
  CHECK_MESSAGE(ch_exit_events(got, "vmm/starting vm/booting vm/booted", {"vm/shutdown", "vm/deleted", "vmm/shutdown"}),
                got);
}

TEST_CASE(
    "serial PTY exists from vm.create - the guest echoes and powers off on a `poweroff` line, the "
    "VMM exits 0, its event stream may end before vm/deleted vmm/shutdown") {
  Vmm vmm;
  auto kernel = guest_kernel(vmm.dir());
  if (!kernel) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0 marker-4711")).status == 204);
  auto info = Json::parse(vmm.get("vm.info").body);
  CHECK(info["config"]["serial"]["mode"] == "Pty");
  const std::string pty = serial_path(vmm);
  REQUIRE(pty.rfind("/dev/pts/", 0) == 0);
  Serial serial(pty);
  REQUIRE(serial.ok());
  REQUIRE(vmm.put("vm.boot").status == 204);
  CHECK_MESSAGE(serial.wait_for("marker-4711"), serial.seen());
  serial.send("echo-me");
  CHECK_MESSAGE(serial.wait_for("echo-me"), serial.seen());
  serial.send("\rpoweroff\r");
  auto st = vmm.wait_exit();
  REQUIRE(st);
  CHECK(st->success());
  CHECK_FALSE(std::filesystem::exists(vmm.sock()));
  const auto got = join(names(vmm.events()));
  CHECK_MESSAGE(guest_poweroff_events(got), got);
}

TEST_CASE("cmdline word poweroff: the guest powers off right after its banner") {
  Vmm vmm;
  auto kernel = guest_kernel(vmm.dir());
  if (!kernel) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0 poweroff")).status == 204);
  REQUIRE(vmm.put("vm.boot").status == 204);
  auto st = vmm.wait_exit();
  REQUIRE(st);
  CHECK(st->success());
  CHECK_FALSE(std::filesystem::exists(vmm.sock()));
  const auto got = join(names(vmm.events()));
  CHECK_MESSAGE(guest_poweroff_events(got), got);
}

TEST_CASE("power button: 204 without event - the guest powers off unless ignore-acpi (command line or typed)") {
  Vmm vmm;
  auto kernel = guest_kernel(vmm.dir());
  if (!kernel) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  CHECK(vmm.put("vm.power-button").body ==
        R"J(["Error from API","Error triggering power button","VM is not running"])J");
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0 ignore-acpi")).status == 204);
  REQUIRE(vmm.put("vm.boot").status == 204);
  CHECK(vmm.put("vm.power-button").status == 204);
  CHECK(vmm.put("vm.shutdown").status == 204);  // still up: the button was ignored
  REQUIRE(vmm.put("vm.delete").status == 204);
  // The rest needs a guest that powers off on the button (the PVH guest does, under real CH too).
  if (!chl::test::needs_cooperative_guest(*kernel)) return;
  // ignore-acpi typed on the console counts as on the command line (the guest reads words).
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0")).status == 204);
  {
    Serial serial(serial_path(vmm));
    REQUIRE(serial.ok());
    REQUIRE(vmm.put("vm.boot").status == 204);
    REQUIRE_MESSAGE(serial.wait_for("ready"), serial.seen());
    serial.send("ping ignore-acpi\r");
    REQUIRE_MESSAGE(serial.wait_for("pong"), serial.seen());
    CHECK(vmm.put("vm.power-button").status == 204);
    CHECK_MESSAGE(serial.wait_for("ignoring the power button"), serial.seen());
    CHECK(vmm.put("vm.shutdown").status == 204);  // still up
    REQUIRE(vmm.put("vm.delete").status == 204);
  }
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0")).status == 204);
  REQUIRE(vmm.put("vm.boot").status == 204);
  CHECK(vmm.put("vm.power-button").status == 204);
  auto st = vmm.wait_exit();
  REQUIRE(st);
  CHECK(st->success());
}

// CH v52 while a VM ends: its control loop tears the VM down (vmm_shutdown), emits the events
// and breaks out; the VMM thread drops its API receiver with the request queued meanwhile, and
// the HTTP thread answers until main() stops it (vmm/src/lib.rs:1722-1731,
// cloud-hypervisor/src/main.rs:764-772). A power button pressed again and again while the guest
// powers off by itself: 204 while the VM runs, then what an ending VMM answers — 500 "API
// response receive error: receiving on a closed channel" (queued during the teardown), 500 "API
// request send error: sending on a closed channel" (after it), or no answer once it has exited
// (vmm/src/api/mod.rs:617-620). The double holds the API for VMM_DOUBLE_POWEROFF_TEARDOWN_MS, so
// the press taken during the teardown gets the first of these, always.
TEST_CASE("power button while the guest powers off: 204, then an ending VMM's answers (closed channel, none), exit 0") {
  const bool real = chl::test::using_real_vmm();
  VmmOptions o;
  if (!real) o.env.push_back("VMM_DOUBLE_POWEROFF_TEARDOWN_MS=2000");
  Vmm vmm(o);
  auto kernel = guest_kernel(vmm.dir());
  if (!kernel) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0")).status == 204);
  Serial serial(serial_path(vmm));
  REQUIRE(serial.ok());
  REQUIRE(vmm.put("vm.boot").status == 204);
  REQUIRE_MESSAGE(serial.wait_for("ready", 30s), serial.seen());
  serial.send("poweroff\r");  // the guest's own power-off: no button needed to end it
  const std::string recv_closed =
      R"J(["Error from API","API response receive error","receiving on a closed channel"])J";
  const std::string send_closed =
      R"J(["Error from API","API request send error","sending on a closed channel"])J";
  HttpReply last;
  int presses = 0;
  const bool ended = wait_until(30s, [&] {
    last = http(vmm.sock(), "PUT", "vm.power-button", std::nullopt, {}, 10s);
    ++presses;
    return last.status != 204;
  }, 0ms);
  INFO("presses: " << presses << ", last answer: " << last.status << " " << last.body);
  REQUIRE(ended);
  if (real) {
    // Which answer comes is a matter of microseconds on a real CH.
    const bool ch_answer = last.status == -1 ||
                           (last.status == 500 && (last.body == recv_closed || last.body == send_closed ||
                                                   last.body.find("VM is not running") != std::string::npos));
    CHECK_MESSAGE(ch_answer, "an ending Cloud Hypervisor answered " << last.status << " " << last.body);
    MESSAGE("an ending Cloud Hypervisor answered the press " << presses << ": " << last.status << " "
                                                             << last.body);
  } else {
    CHECK(last.status == 500);
    CHECK(last.body == recv_closed);
  }
  auto st = vmm.wait_exit(30s);
  REQUIRE(st);
  CHECK(st->success());
}

TEST_CASE("panic line: guest/panic with properties (event: panic)") {
  Vmm vmm;
  auto kernel = guest_kernel(vmm.dir());
  if (!kernel) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0")).status == 204);
  Serial serial(serial_path(vmm));
  REQUIRE(vmm.put("vm.boot").status == 204);
  serial.send("panic\r");
  REQUIRE(vmm.wait_events({"vm/booted", "guest/panic"}));
  for (const auto& e : vmm.events()) {
    if (e.event == "panic") CHECK(e.properties == Json({{"event", "panic"}}));
  }
}

TEST_CASE("reboot line: vm/rebooting / vm/rebooted / banner again on the (new) serial PTY") {
  Vmm vmm;
  auto kernel = guest_kernel(vmm.dir());
  if (!kernel) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0 marker-reboot")).status == 204);
  Serial serial(serial_path(vmm));
  REQUIRE(vmm.put("vm.boot").status == 204);
  REQUIRE(serial.wait_for("marker-reboot"));
  serial.send("reboot\r");
  REQUIRE(vmm.wait_events({"vm/booted", "vm/rebooting", "vm/rebooted"}));
  Serial again(serial_path(vmm));
  REQUIRE(again.ok());
  CHECK(Json::parse(vmm.get("vm.info").body)["state"] == "Running");
  again.send("x");
  CHECK(again.wait_for("x"));
}

// vm.remove-device (vmm/src/vm.rs Vm::remove_device): CH takes the device out of the config at
// once and notifies the guest (GED PCI_DEVICES_CHANGED); the device-tree node, the slot and the
// id stay until the guest ejects it (B0EJ: DeviceManager::eject_device, which emits
// vm/device-removed). The project's PVH guest ejects, as an ACPI OS does.
TEST_CASE(
    "hot plug: add-disk answers (id / bdf) / a missing file gives CH's chain / remove-device: the "
    "PVH guest ejects (device-removed) and the id is free again") {
  Vmm vmm;
  auto kernel = guest_kernel(vmm.dir());
  if (!kernel) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0")).status == 204);
  Serial serial(serial_path(vmm));
  REQUIRE(serial.ok());
  REQUIRE(vmm.put("vm.boot").status == 204);
  REQUIRE_MESSAGE(serial.wait_for("ready"), serial.seen());
  const auto disk = vmm.dir() / "disk2.img";
  chl::test::write_file(disk, std::string(1 << 20, '\0'));
  auto add = vmm.put("vm.add-disk", R"J({"path":")J" + disk.string() + R"J(","id":"disk2"})J");
  CHECK(add.status == 200);
  auto aj = Json::parse(add.body);
  CHECK(aj["id"] == "disk2");
  const std::string bdf = aj["bdf"].get<std::string>();
  CHECK(std::regex_match(bdf, std::regex("0000:00:[0-9a-f]{2}\\.0")));
  auto info = Json::parse(vmm.get("vm.info").body);
  REQUIRE(info["config"]["disks"].is_array());
  CHECK(info["config"]["disks"].back()["path"] == disk.string());
  auto bad = vmm.put("vm.add-disk", R"J({"path":"/nonexistent/nope.img"})J");
  CHECK(
      bad.body ==
      R"J(["Error from API","The disk could not be added to the VM","Error from device manager","Cannot open disk path","I/O error (path=/nonexistent/nope.img op=open)","No such file or directory (os error 2)"])J");
  CHECK(vmm.put("vm.remove-device", R"J({"id":"disk2"})J").status == 204);
  // Out of the config at once.
  info = Json::parse(vmm.get("vm.info").body);
  for (const auto& d : info["config"]["disks"].is_array() ? info["config"]["disks"] : Json::array())
    CHECK(d["id"] != "disk2");
  const auto in_tree = [&vmm] {
    const auto j = Json::parse(vmm.get("vm.info").body, nullptr, false);
    return j.is_object() && j.contains("device_tree") && j["device_tree"].contains("disk2");
  };
  if (chl::test::is_project_pvh_guest(*kernel)) {
    // The guest ejects it: the node goes, CH says so, the id can be used again.
    CHECK_MESSAGE(chl::test::wait_until(30s, [&] { return !in_tree(); }), vmm.get("vm.info").body);
    const std::string slot = std::to_string(std::stoul(bdf.substr(8, 2), nullptr, 16));
    CHECK_MESSAGE(serial.wait_for("guest: ACPI PCI hotplug: ejected slot " + slot + "\r\n"), serial.seen());
    CHECK_MESSAGE(vmm.wait_events({"vm/device-removed"}), vmm.events_text());
    const auto evs = vmm.events();
    const auto removed = std::find_if(evs.begin(), evs.end(), [](const Event& e) { return e.event == "device-removed"; });
    REQUIRE(removed != evs.end());
    CHECK(removed->properties.value("id", "") == "disk2");
    CHECK(removed->properties.value("bdf", "") == bdf);
    CHECK(vmm.put("vm.remove-device", R"J({"id":"disk2"})J").body ==
          R"J(["Error from API","The device could not be removed from the VM","Error from device manager","Failed to find device corresponding to the given identifier"])J");
    auto again = vmm.put("vm.add-disk", R"J({"path":")J" + disk.string() + R"J(","id":"disk2"})J");
    CHECK_MESSAGE(again.status == 200, again.body);
    CHECK(Json::parse(again.body).value("bdf", "") == bdf);  // the freed slot, first free again
  } else if (!chl::test::using_real_vmm()) {
    // A kernel with no note saying it ejects (the double's stand-in file): the node stays,
    // removing it again succeeds again (real CH v52 answered 204 twice), the id stays taken.
    CHECK(in_tree());
    CHECK(vmm.put("vm.remove-device", R"J({"id":"disk2"})J").status == 204);
    CHECK(vmm.put("vm.add-disk", R"J({"path":")J" + disk.string() + R"J(","id":"disk2"})J").body ==
          R"J(["Error from API","The disk could not be added to the VM","Error from device manager","Invalid identifier as it is not unique: disk2"])J");
  }
  CHECK(
      vmm.put("vm.remove-device", R"J({"id":"never-added"})J").body ==
      R"J(["Error from API","The device could not be removed from the VM","Error from device manager","Failed to find device corresponding to the given identifier"])J");
  auto counters = vmm.get("vm.counters");
  CHECK(counters.status == 200);
}

// The double runs no guest code: it takes the guest's note (type 2) for whether the guest ejects
// a removed PCI device. Without it -- as a guest that runs no AML -- CH keeps the device-tree
// node and the id, and emits no device-removed; a paused guest ejects once resumed.
TEST_CASE("double: remove-device: a guest whose note does not say it ejects keeps the device - a paused one ejects on resume" *
          doctest::test_suite("double")) {
  SKIP_ON_REAL_VMM("lane double: the double's own reading of the guest's ELF note");
  if (!std::filesystem::exists(chl::test::project_pvh_guest())) {
    chl::test::skip("the PVH test guest is not built (target pvh_guest)");
    return;
  }
  const std::string elf = chl::test::read_file(chl::test::project_pvh_guest());
  const std::string name("chl-test-guest\0\0", 16);
  const auto first = elf.find(name);
  REQUIRE(first != std::string::npos);
  const auto second = elf.find(name, first + 1);
  REQUIRE(second != std::string::npos);
  std::uint32_t type = 0, value = 0;
  std::memcpy(&type, elf.data() + second - 4, 4);
  std::memcpy(&value, elf.data() + second + 16, 4);
  REQUIRE(type == 2);
  CHECK(value == 1);  // as built: it ejects
  for (const bool ejects : {false, true}) {
    CAPTURE(ejects);
    Vmm vmm;
    std::string patched = elf;
    const std::uint32_t v = ejects ? 1 : 0;
    std::memcpy(patched.data() + second + 16, &v, 4);
    const auto kernel = vmm.dir() / "guest.elf";
    chl::test::write_file(kernel, patched);
    REQUIRE(vmm.put("vm.create", vm_config(kernel.string(), "console=ttyS0")).status == 204);
    Serial serial(serial_path(vmm));
    REQUIRE(serial.ok());
    REQUIRE(vmm.put("vm.boot").status == 204);
    REQUIRE_MESSAGE(serial.wait_for("ready"), serial.seen());
    CHECK((serial.seen().find("PCST registers at 0x") != std::string::npos) == ejects);
    const auto disk = vmm.dir() / "disk2.img";
    chl::test::write_file(disk, std::string(1 << 20, '\0'));
    REQUIRE(vmm.put("vm.add-disk", R"J({"path":")J" + disk.string() + R"J(","id":"disk2"})J").status == 200);
    REQUIRE(vmm.put("vm.pause").status == 204);
    REQUIRE(vmm.put("vm.remove-device", R"J({"id":"disk2"})J").status == 204);
    const auto in_tree = [&vmm] {
      return Json::parse(vmm.get("vm.info").body)["device_tree"].contains("disk2");
    };
    CHECK_FALSE(serial.wait_for("ejected slot", 300ms));  // paused: no vCPU runs
    CHECK(in_tree());
    REQUIRE(vmm.put("vm.resume").status == 204);
    if (ejects) {
      CHECK(chl::test::wait_until(10s, [&] { return !in_tree(); }));
      CHECK(vmm.wait_events({"vm/resumed", "vm/device-removed"}));
    } else {
      CHECK_FALSE(serial.wait_for("ejected slot", 300ms));
      CHECK(in_tree());
      CHECK(vmm.events_text().find("device-removed") == std::string::npos);
      CHECK(vmm.put("vm.remove-device", R"J({"id":"disk2"})J").status == 204);
    }
  }
}

TEST_CASE("add-net takes a tap fd with SCM_RIGHTS - a non-tap fd is refused") {
  Vmm vmm;
  auto kernel = guest_kernel(vmm.dir());
  if (!kernel) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  UniqueFd tun(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
  ifreq ifr{};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "chlvd%d", static_cast<int>(::getpid() % 100000));
  if (!tun || ::ioctl(tun.get(), TUNSETIFF, &ifr) != 0) {
    chl::test::skip("cannot create a tap device here (needs /dev/net/tun and CAP_NET_ADMIN)");
    return;
  }
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0")).status == 204);
  REQUIRE(vmm.put("vm.boot").status == 204);
  auto add = vmm.put("vm.add-net", R"J({"id":"net9","mac":"52:54:00:12:34:56"})J", {tun.get()});
  CHECK_MESSAGE(add.status == 200, add.body);
  CHECK(Json::parse(add.body)["id"] == "net9");
  auto info = Json::parse(vmm.get("vm.info").body);
  REQUIRE(info["config"]["net"].is_array());
  CHECK(info["config"]["net"][0]["mac"] == "52:54:00:12:34:56");
  if (!chl::test::using_real_vmm()) CHECK(info["config"]["net"][0]["tap"] == std::string(ifr.ifr_name));
  UniqueFd devnull(::open("/dev/null", O_RDWR | O_CLOEXEC));
  auto bad = vmm.put("vm.add-net", R"J({"id":"net10"})J", {devnull.get()});
  CHECK(bad.status == 500);
}

TEST_CASE("snapshot needs a Paused VM - restore from a missing directory fails like CH") {
  Vmm vmm;
  auto kernel = guest_kernel(vmm.dir());
  if (!kernel) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0")).status == 204);
  REQUIRE(vmm.put("vm.boot").status == 204);
  const std::string url = "file://" + vmm.dir().path().string();
  CHECK(
      vmm.put("vm.snapshot", R"J({"destination_url":")J" + url + R"J("})J").body ==
      R"J(["Error from API","The VM could not be snapshotted","Cannot snapshot VM","Failed to snapshot migratable component","Trying to snapshot while VM is running"])J");
  CHECK(vmm.wait_events({"vm/booted", "vm/snapshotting"}));

  // vmm/src/migration.rs url_to_path: a source that is not a directory is refused as
  // MigrateSend (what real CH v52 answered, issue 33); a directory without the snapshot's files
  // fails opening config.json (MigrateReceive, os error 2: the v52 observation).
  Vmm fresh;
  CHECK(
      fresh.put("vm.restore", R"J({"source_url":"file:///nonexistent/snap"})J").body ==
      R"J(["Error from API","The VM could not be restored","Cannot restore VM","Failed to send migratable component snapshot","Destination is not a directory: \"/nonexistent/snap\""])J");
  const auto empty = fresh.dir() / "empty-snap";
  std::filesystem::create_directory(empty);
  CHECK(
      fresh.put("vm.restore", R"J({"source_url":"file://)J" + empty.string() + R"J("})J").body ==
      R"J(["Error from API","The VM could not be restored","Cannot restore VM","Failed to receive migratable component snapshot","No such file or directory (os error 2)"])J");
  CHECK(fresh.get("vm.info").status == 500);
  // A snapshot to a destination that is not a directory: the same check (Vm::send, after the
  // state is taken - which fails first under the nested KVM of our machines, GetNestedState).
  REQUIRE(vmm.put("vm.pause").status == 204);
  if (!chl::test::using_real_vmm())
    CHECK(
        vmm.put("vm.snapshot", R"J({"destination_url":"file:///nonexistent/snap"})J").body ==
        R"J(["Error from API","The VM could not be snapshotted","Cannot send VM snapshot","Failed to send migratable component snapshot","Destination is not a directory: \"/nonexistent/snap\""])J");
}

TEST_CASE("double: snapshot of a Paused VM round-trips through restore") {
  if (const auto& why = chl::test::real_vmm_cannot_save_vcpu_state()) {
    chl::test::skip(*why);
    return;
  }
  Vmm vmm;
  auto kernel = guest_kernel(vmm.dir());
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0 snap-marker")).status == 204);
  REQUIRE(vmm.put("vm.boot").status == 204);
  REQUIRE(vmm.put("vm.pause").status == 204);
  const auto snap = vmm.dir() / "snap";
  std::filesystem::create_directory(snap);
  CHECK(vmm.put("vm.snapshot", R"J({"destination_url":"file://)J" + snap.string() + R"J("})J")
            .status == 204);
  CHECK(std::filesystem::exists(snap / "config.json"));
  CHECK(std::filesystem::exists(snap / "state.json"));
  CHECK(vmm.wait_events({"vm/paused", "vm/snapshotting", "vm/snapshotted"}));

  Vmm other;
  CHECK(other.put("vm.restore", R"J({"source_url":"file://)J" + snap.string() + R"J("})J").status ==
        204);
  auto info = Json::parse(other.get("vm.info").body);
  CHECK(info["state"] == "Paused");
  CHECK(info["config"]["payload"]["cmdline"] == "console=ttyS0 snap-marker");
  CHECK(other.put("vm.resume").status == 204);
  CHECK(other.wait_events(
      {"vmm/starting", "vm/restoring", "vm/restored", "vm/resuming", "vm/resumed"}));
}

TEST_CASE(
    "double faults: VMM_DOUBLE_CRASH_AT=boot dies by SIGKILL / no events / socket left behind" *
          doctest::test_suite("double")) {
  SKIP_ON_REAL_VMM("lane double: fault injection is a knob of the double, not of Cloud Hypervisor");
  Vmm vmm({.api_fd = false, .event_fd = false, .env = {"VMM_DOUBLE_CRASH_AT=boot"}});
  auto kernel = guest_kernel(vmm.dir());
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "x")).status == 204);
  CHECK(vmm.put("vm.boot").status == -1);
  auto st = vmm.wait_exit();
  REQUIRE(st);
  CHECK_FALSE(st->exited);
  CHECK(st->signal == SIGKILL);
  CHECK(std::filesystem::exists(vmm.sock()));
  CHECK(join(names(vmm.events())) == "vmm/starting");
}

TEST_CASE(
    "double faults: HANG never answers / FAIL answers CH-style 500 and keeps the ...ing event" *
          doctest::test_suite("double")) {
  SKIP_ON_REAL_VMM("lane double: fault injection is a knob of the double, not of Cloud Hypervisor");
  Vmm vmm({.api_fd = false,
           .event_fd = false,
           .env = {"VMM_DOUBLE_FAIL=vm.boot", "VMM_DOUBLE_HANG=vm.info"}});
  REQUIRE(vmm.put("vm.create", R"J({"payload":{}})J").status == 204);
  auto boot = vmm.put("vm.boot");
  CHECK(boot.status == 500);
  CHECK(boot.body ==
        R"J(["Error from API","The VM could not boot","vmm-double: injected failure"])J");
  CHECK(vmm.wait_events({"vm/booting"}));
  CHECK(http(vmm.sock(), "GET", "vm.info", std::nullopt, {}, 300ms).status == -1);
}

TEST_CASE("double faults: garbage between events / and EXIT_WITHOUT_EVENTS=running" *
          doctest::test_suite("double")) {
  SKIP_ON_REAL_VMM("lane double: fault injection is a knob of the double, not of Cloud Hypervisor");
  Vmm vmm({.api_fd = false,
           .event_fd = false,
           .env = {"VMM_DOUBLE_GARBAGE_EVENTS=1", "VMM_DOUBLE_EXIT_WITHOUT_EVENTS=running"}});
  auto kernel = guest_kernel(vmm.dir());
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "x")).status == 204);
  REQUIRE(vmm.put("vm.boot").status == 204);
  auto st = vmm.wait_exit();
  REQUIRE(st);
  CHECK(st->success());
  const std::string text = vmm.events_text();
  CHECK(text.find("not json at all") != std::string::npos);
  // The real events are all there, and no shutdown events were written.
  const auto got = names(vmm.events());
  CHECK(std::find(got.begin(), got.end(), "vm/booted") != got.end());
  CHECK(std::find(got.begin(), got.end(), "vmm/shutdown") == got.end());
}

TEST_CASE("double faults: VMM_DOUBLE_BOOT_DELAY_MS holds vm.boot / then booted and 204" *
          doctest::test_suite("double")) {
  SKIP_ON_REAL_VMM("lane double: fault injection is a knob of the double, not of Cloud Hypervisor");
  Vmm vmm({.api_fd = false, .event_fd = false, .env = {"VMM_DOUBLE_BOOT_DELAY_MS=200"}});
  auto kernel = guest_kernel(vmm.dir());
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "x")).status == 204);
  CHECK(vmm.put("vm.boot").status == 204);
  CHECK(join(names(vmm.events())) == "vmm/starting vm/booting vm/booted");
}

TEST_CASE("double faults: VMM_DOUBLE_CLOSE_EVENTS_AT=running closes the monitor and the VMM runs on" *
          doctest::test_suite("double")) {
  SKIP_ON_REAL_VMM("lane double: fault injection is a knob of the double, not of Cloud Hypervisor");
  Vmm vmm({.api_fd = false, .event_fd = true, .env = {"VMM_DOUBLE_CLOSE_EVENTS_AT=running"}});
  auto kernel = guest_kernel(vmm.dir());
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "x")).status == 204);
  REQUIRE(vmm.put("vm.boot").status == 204);
  REQUIRE(wait_until(10s, [&] { return vmm.events_closed(); }));
  CHECK(join(names(vmm.events())) == "vmm/starting vm/booting vm/booted");
  // Still alive and serving: the API works, the VM runs, nothing more is written.
  CHECK(vmm.child().running());
  CHECK(vmm.get("vm.info").body.find("\"Running\"") != std::string::npos);
  CHECK(vmm.put("vm.pause").status == 204);
  CHECK(vmm.get("vm.info").body.find("\"Paused\"") != std::string::npos);
  CHECK(join(names(vmm.events())) == "vmm/starting vm/booting vm/booted");
  CHECK(vmm.stderr_text().find("VMM_DOUBLE_CLOSE_EVENTS_AT=running") != std::string::npos);
}

// CH v52 makes a virtio-net device at vm.boot and does to the tap it was handed (an fd, as the
// launcher hands it over with vm.add-net) what Net::from_tap_fds does (virtio-devices/src/net.rs):
// TUNGETIFF, TUNSETIFF, TUNSETVNETHDRSZ - none needs a privilege on an attached tap - and, when
// the config has `mtu`, SIOCSIFMTU, which needs CAP_NET_ADMIN. As uid 107 with no capability (a
// KubeVirt pod's VMM) the boot fails with CH's chain; without `mtu` it boots. The double issues
// the same ioctls, so it fails the same way (tests/vmm_double/tap_device.cpp).
TEST_CASE(
    "a tap fd as uid 107 without capabilities: with `mtu` vm.boot fails on SIOCSIFMTU as CH's, "
    "without it boots") {
  const auto setpriv = chl::test::tool("setpriv");
  if (::geteuid() != 0 || !setpriv) {
    chl::test::skip(
        "needs root (to make a tap) and setpriv (util-linux) to run the VMM as uid 107");
    return;
  }
  // The VMM sees the pod's own /dev/kvm and /dev/net/tun, owned by 107, as a container runtime
  // gives them to a KubeVirt pod (tests/support/pod_devices.hpp); the machine's stay root's.
  TempDir nodes("chl-nodes");
  const auto devices = chl::test::pod_device_nodes(nodes.path(), 107, 107);
  if (!devices.why.empty()) {
    chl::test::skip(devices.why);
    return;
  }
  UniqueFd tun(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
  ifreq ifr{};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "chlmt%d", static_cast<int>(::getpid() % 100000));
  if (!tun || ::ioctl(tun.get(), TUNSETIFF, &ifr) != 0) {
    chl::test::skip("cannot create a tap device here (needs /dev/net/tun and CAP_NET_ADMIN)");
    return;
  }
  std::vector<std::string> uid107 = devices.prefix;
  uid107.insert(uid107.end(), {*setpriv, "--reuid", "107", "--regid", "107", "--clear-groups",
                               "--inh-caps", "-all", "--bounding-set", "-all", "--no-new-privs"});
  for (const bool with_mtu : {true, false}) {
    CAPTURE(with_mtu);
    Vmm vmm(VmmOptions(), RunAs{uid107, 107});
    auto kernel = guest_kernel(vmm.dir());
    if (!kernel) {
      chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
      return;
    }
    REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0")).status == 204);
    const std::string net = with_mtu ? R"J({"id":"net0","mac":"02:00:00:aa:bb:cc","mtu":1400})J"
                                     : R"J({"id":"net0","mac":"02:00:00:aa:bb:cc"})J";
    // Cold add: CH only stores the config and the fd (vmm/src/lib.rs vm_add_net).
    REQUIRE(vmm.put("vm.add-net", net, {tun.get()}).status == 204);
    auto boot = vmm.put("vm.boot");
    if (with_mtu) {
      CHECK(boot.status == 500);
      CHECK_MESSAGE(
          boot.body ==
              R"J(["Error from API","The VM could not boot","Error from device manager","Cannot create virtio-net device","Using existing tap","ioctl (35106) failed: Operation not permitted (os error 1)","Operation not permitted (os error 1)"])J",
          boot.body);
      CHECK(vmm.get("vm.info").body.find("\"Created\"") != std::string::npos);
    } else {
      CHECK_MESSAGE(boot.status == 204, boot.body << "\n" << vmm.stderr_text());
      CHECK(vmm.get("vm.info").body.find("\"Running\"") != std::string::npos);
    }
  }
}

// By name (NetConfig.tap) CH opens /dev/net/tun itself and attaches with TUNSETIFF (net_util
// open_tap.rs): only the tap's owner (or CAP_NET_ADMIN) may, and a tap not up needs SIOCSIFFLAGS.
TEST_CASE(
    "double: a tap by name is opened as CH does - a missing /dev/net/tun permission or a foreign "
    "tap fail with CH's chain") {
  const auto setpriv = chl::test::tool("setpriv");
  if (::geteuid() != 0 || !setpriv) {
    chl::test::skip(
        "needs root (to make a tap) and setpriv (util-linux) to run the VMM as another uid");
    return;
  }
  // The other uid's VMM sees the pod's own /dev/kvm and /dev/net/tun, owned by it, as a
  // container runtime gives them (tests/support/pod_devices.hpp): a real CH needs /dev/kvm to
  // start at all, and the open of /dev/net/tun then succeeds, so TUNSETIFF is what refuses.
  TempDir nodes("chl-nodes");
  const auto devices = chl::test::pod_device_nodes(nodes.path(), 107, 107);
  if (!devices.why.empty()) {
    chl::test::skip(devices.why);
    return;
  }
  const std::string name = "chlmn" + std::to_string(::getpid() % 100000);
  {
    UniqueFd tun(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
    ifreq ifr{};
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name.c_str());
    // Owned by root (TUNSETOWNER): a tap with no owner and no group lets any uid attach
    // (drivers/net/tun.c tun_not_capable), as a real CH as uid 107 showed.
    if (!tun || ::ioctl(tun.get(), TUNSETIFF, &ifr) != 0 ||
        ::ioctl(tun.get(), TUNSETOWNER, 0) != 0 || ::ioctl(tun.get(), TUNSETPERSIST, 1) != 0) {
      chl::test::skip("cannot create a tap device here (needs /dev/net/tun and CAP_NET_ADMIN)");
      return;
    }
  }
  struct Gone {
    std::string n;
    ~Gone() { (void)chl::test::run_command({"ip", "link", "del", n}); }
  } gone{name};
  const std::string net = R"J({"id":"net0","tap":")J" + name + R"J(","num_queues":2})J";
  // Root: TUNSETIFF attaches, the tap is brought up (SIOCSIFFLAGS), the device is made; vm.info
  // then shows the tap's own MAC as host_mac (CH writes it back).
  {
    Vmm vmm;
    auto kernel = guest_kernel(vmm.dir());
    REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0", R"J("net":[)J" + net + "]"))
                .status == 204);
    auto boot = vmm.put("vm.boot");
    REQUIRE_MESSAGE(boot.status == 204, boot.body);
    auto info = Json::parse(vmm.get("vm.info").body);
    CHECK(info["config"]["net"][0]["host_mac"].is_string());
    CHECK((std::stoul(chl::test::read_file("/sys/class/net/" + name + "/flags"), nullptr, 16) &
           IFF_UP) != 0);
  }
  // Another uid without capabilities: the tap belongs to root, so TUNSETIFF is refused (when
  // /dev/net/tun opens at all for it; on a 0600 node the open is refused first).
  std::vector<std::string> uid107 = devices.prefix;
  uid107.insert(uid107.end(), {*setpriv, "--reuid", "107", "--regid", "107", "--clear-groups",
                               "--inh-caps", "-all", "--bounding-set", "-all", "--no-new-privs"});
  Vmm vmm(VmmOptions(), RunAs{uid107, 107});
  auto kernel = guest_kernel(vmm.dir());
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0", R"J("net":[)J" + net + "]"))
              .status == 204);
  auto boot = vmm.put("vm.boot");
  CHECK(boot.status == 500);
  const std::string head =
      R"J(["Error from API","The VM could not boot","Error from device manager","Cannot create virtio-net device","Failed to open taps","Open tap device failed",)J";
  CHECK_MESSAGE(
      (boot.body == head + R"J("Couldn't open /dev/net/tun","Permission denied (os error 13)"])J" ||
       boot.body ==
           head +
               R"J("Unable to configure tap interface","Operation not permitted (os error 1)"])J"),
      boot.body);
}

// CH v52's power button is its GED register, allocated at the top of the guest physical address
// space (vmm/src/memory_manager.rs: platform MMIO below 2^phys_bits - 64 KiB, top-down, one page
// for the device manager's ACPI device, one for the CPU manager's, then the GED; one more first
// for the memory manager's with ACPI memory hotplug). The PVH guest finds it in the DSDT and
// prints where it is; a guest that cannot map it never sees the button.
TEST_CASE(
    "power button: CH's GED register at the top of the guest address space, reached by the PVH "
    "guest") {
  Vmm vmm;
  auto kernel = guest_kernel(vmm.dir());
  if (!kernel) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  if (!chl::test::is_project_pvh_guest(*kernel)) {
    chl::test::skip(
        "needs the project's PVH guest (it prints where the GED register is; target pvh_guest)");
    return;
  }
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  REQUIRE(__get_cpuid(0x80000008, &eax, &ebx, &ecx, &edx));
  const unsigned phys_bits = std::min(eax & 0xffu, 46u);  // max_phys_bits: 46 by default
  const std::uint64_t top = (std::uint64_t{1} << phys_bits) - 0x10000;
  for (const bool hotplug : {false, true}) {
    CAPTURE(hotplug);
    std::string cfg = vm_config(*kernel, "console=ttyS0", "");
    if (hotplug) {
      auto j = Json::parse(cfg);
      j["memory"]["hotplug_size"] = 128 << 20;
      cfg = j.dump();
    }
    REQUIRE(vmm.put("vm.create", cfg).status == 204);
    Serial serial(serial_path(vmm));
    REQUIRE(serial.ok());
    REQUIRE(vmm.put("vm.boot").status == 204);
    char want[96];
    std::snprintf(want, sizeof want,
                  "guest: ACPI power button: Cloud Hypervisor GED register at 0x%016llx",
                  static_cast<unsigned long long>(top - (hotplug ? 0x4000 : 0x3000)));
    CHECK_MESSAGE(serial.wait_for(want), serial.seen());
    REQUIRE(vmm.put("vm.delete").status == 204);
  }
}

// The double runs no guest code: it takes the guest's word (its ELF note) for how it reaches the
// GED register, and a guest that does not reach it (no note, flat 32-bit addressing, too few
// address bits) ignores the button against the double as it would against CH.
TEST_CASE(
    "double: a guest whose note does not reach CH's GED register never sees the power button" *
          doctest::test_suite("double")) {
  SKIP_ON_REAL_VMM("lane double: the double's own reading of the guest's ELF note");
  if (!std::filesystem::exists(chl::test::project_pvh_guest())) {
    chl::test::skip("the PVH test guest is not built (target pvh_guest)");
    return;
  }
  const std::string elf = chl::test::read_file(chl::test::project_pvh_guest());
  const std::string name("chl-test-guest\0\0", 16);
  const auto at = elf.find(name);
  REQUIRE(at != std::string::npos);
  struct Case {
    const char* what;
    std::uint32_t bits, paging;
    bool reaches;
  };
  std::vector<Case> cases = {{"as built: 4-level paging, MAXPHYADDR", 0, 2, true},
                             {"flat 32-bit addressing", 0, 0, false},
                             {"4-level paging, 40 address bits", 40, 2, false}};
  if (::access("/sys/module/kvm_pvm", F_OK) == 0)
    cases.push_back({"PAE paging under kvm_pvm", 0, 1, false});
  for (const auto& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    Vmm vmm;
    std::string patched = elf;
    std::memcpy(patched.data() + at + 16, &c.bits, 4);
    std::memcpy(patched.data() + at + 20, &c.paging, 4);
    const auto kernel = vmm.dir() / "guest.elf";
    chl::test::write_file(kernel, patched);
    REQUIRE(vmm.put("vm.create", vm_config(kernel.string(), "console=ttyS0")).status == 204);
    Serial serial(serial_path(vmm));
    REQUIRE(serial.ok());
    REQUIRE(vmm.put("vm.boot").status == 204);
    REQUIRE_MESSAGE(serial.wait_for("ready"), serial.seen());
    CHECK((serial.seen().find("GED register at 0x") != std::string::npos) == c.reaches);
    CHECK((serial.seen().find("the GED register is out of reach, not polled") !=
           std::string::npos) == !c.reaches);
    CHECK(vmm.put("vm.power-button").status == 204);
    if (c.reaches) {
      CHECK(vmm.wait_exit().has_value());
    } else {
      CHECK_FALSE(serial.wait_for("powering off", 500ms));
      CHECK(serial.seen().find("ignoring the power button") == std::string::npos);
      CHECK(vmm.child().running());
    }
  }
  // No note at all (any other file): no line about the register, the button unseen.
  Vmm vmm;
  const auto kernel = vmm.dir() / "other.elf";
  chl::test::write_file(kernel, "not the PVH guest");
  REQUIRE(vmm.put("vm.create", vm_config(kernel.string(), "console=ttyS0")).status == 204);
  REQUIRE(vmm.put("vm.boot").status == 204);
  CHECK(vmm.put("vm.power-button").status == 204);
  CHECK(vmm.put("vm.shutdown").status == 204);  // still running: the button was not seen
}

// CH v52 takes an advisory OFD lock on every disk image when the VM boots (vmm/src/vm.rs
// Vm::boot -> DeviceManager::try_lock_disks, block/src/fcntl.rs): a write lock, a read lock for
// a read-only disk, over [0, size) (lock_granularity ByteRange) or the whole file (Full). A second
// VMM booting the same image is refused; a hot-added disk is locked at once.
TEST_CASE("disk images: a second VMM cannot boot or hot-add an image another VMM's VM holds") {
  Vmm first;
  auto kernel = guest_kernel(first.dir());
  if (!kernel) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  const auto disk = first.dir() / "shared.img";
  {
    UniqueFd f(::open(disk.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    REQUIRE(f);
    REQUIRE(::ftruncate(f.get(), 1 << 20) == 0);
  }
  const std::string disks = R"J("disks":[{"path":")J" + disk.string() + R"J("}])J";
  REQUIRE(first.put("vm.create", vm_config(*kernel, "console=ttyS0", disks)).status == 204);
  REQUIRE(first.put("vm.boot").status == 204);
  Vmm second;
  REQUIRE(second.put("vm.create", vm_config(*kernel, "console=ttyS0", disks)).status == 204);
  auto boot = second.put("vm.boot");
  CHECK(boot.status == 500);
  CHECK_MESSAGE(
      boot.body ==
          R"J(["Error from API","The VM could not boot","Error locking disk images: Another instance likely holds a lock","Cannot lock images of all block devices","Failed to get Write lock for disk image: )J" +
              disk.string() + R"J(","The file is already locked"])J",
      boot.body);
  // Without disks it boots, and then a hot-add of the locked image is refused at once.
  REQUIRE(second.put("vm.delete").status == 204);
  REQUIRE(second.put("vm.create", vm_config(*kernel, "console=ttyS0")).status == 204);
  REQUIRE(second.put("vm.boot").status == 204);
  auto add = second.put("vm.add-disk", R"J({"path":")J" + disk.string() + R"J("})J");
  CHECK(add.status == 500);
  CHECK_MESSAGE(
      add.body.find(
          R"J("Cannot lock images of all block devices","Failed to get Write lock for disk image: )J") !=
          std::string::npos,
      add.body);
  // Once the first VM is shut down its lock is gone.
  REQUIRE(first.put("vm.shutdown").status == 204);
  add = second.put("vm.add-disk", R"J({"path":")J" + disk.string() + R"J("})J");
  CHECK_MESSAGE(add.status == 200, add.body);
}

// ---------------------------------------------------------------------------------------------
// Live migration (vm.send-migration / vm.receive-migration, CH v52 vmm/src/lib.rs:2502-2640):
// the wire is CH's (vm-migration/src/protocol.rs: 16-byte requests {u16 command, 6 padding,
// u64 length} and responses {u16 status, 6 padding, u64 length}).

namespace {

std::string mig_header(std::uint16_t code, std::uint64_t length) {
  std::string h(16, '\0');
  h[0] = static_cast<char>(code & 0xff);
  h[1] = static_cast<char>(code >> 8);
  for (int i = 0; i < 8; ++i) h[8 + i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return h;
}

// Read exactly n bytes (or fewer at end of file / timeout).
std::string read_n(int fd, std::size_t n, std::chrono::milliseconds t = 10s) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + t;
  while (out.size() < n) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[65536];
    const ssize_t r = ::read(fd, buf, std::min(sizeof buf, n - out.size()));
    if (r <= 0) break;
    out.append(buf, static_cast<std::size_t>(r));
  }
  return out;
}

// The largest "heartbeat N" in a serial transcript (0: none).
unsigned last_heartbeat(const std::string& text) {
  unsigned last = 0;
  std::regex re("heartbeat (\\d+)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it)
    last = static_cast<unsigned>(std::stoul((*it)[1]));
  return last;
}

unsigned first_heartbeat(const std::string& text) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("heartbeat (\\d+)"))) return 0;
  return static_cast<unsigned>(std::stoul(m[1]));
}

// The heartbeat period: the double's as asked, the PVH test guest's 5 s on a real VMM.
VmmOptions heartbeat_vmm() {
  VmmOptions o;
  o.env = {"VMM_DOUBLE_HEARTBEAT_MS=50"};
  return o;
}
const auto kBeat = chl::test::using_real_vmm() ? 12s : 2s;

// A real CH that cannot save vCPU state on this machine (the probe of
// tests/support/real_vmm_limits.hpp, and this very call answering CH's GetNestedState): the
// sender runs on (CH resumes the VM after a failed send); says which part cannot run and why.
bool nested_snapshot_failure(const HttpReply& r, Vmm& src) {
  const auto& why = chl::test::real_vmm_cannot_save_vcpu_state();
  if (!why || r.status != 500 || r.body.find("GetNestedState") == std::string::npos) return false;
  const auto state = Json::parse(src.get("vm.info").body, nullptr, false).value("state", "");
  CHECK_MESSAGE((state == "Running" || state == "Paused"), state);
  chl::test::skip_part("the migration's completion: " + *why +
                       "; this test's vm.send-migration answered the same: " + r.body);
  return true;
}

}  // namespace

TEST_CASE("migration: the receiver runs the sender's VM, its guest continues, the sender exits") {
  Vmm src(heartbeat_vmm());
  auto kernel = guest_kernel(src.dir());
  if (!kernel) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  Vmm dst(heartbeat_vmm());
  REQUIRE(src.put("vm.create", vm_config(*kernel, "console=ttyS0 mig-marker")).status == 204);
  REQUIRE(src.put("vm.boot").status == 204);
  Serial before(serial_path(src));
  REQUIRE(before.ok());
  REQUIRE_MESSAGE(before.wait_for("heartbeat 2", kBeat * 2), before.seen());

  const auto url = "unix:" + (dst.dir() / "migration.sock").string();
  HttpReply received;
  std::thread receiver([&] {
    received = http(dst.sock(), "PUT", "vm.receive-migration",
                    Json{{"receiver_url", url}}.dump(), {}, 60s);
  });
  REQUIRE(wait_until(5s, [&] { return std::filesystem::exists(dst.dir() / "migration.sock"); }));
  const auto sent = http(src.sock(), "PUT", "vm.send-migration",
                         Json{{"destination_url", url}}.dump(), {}, 60s);
  receiver.join();
  if (nested_snapshot_failure(sent, src)) return;
  CHECK_MESSAGE(sent.status == 204, sent.body << src.stderr_text() << dst.stderr_text());
  CHECK_MESSAGE(received.status == 204, received.body);
  (void)before.wait_for("\x01", 200ms);  // collect what the source printed last
  const unsigned last_on_source = last_heartbeat(before.seen());

  // The sender's VMM exits 0 after migration-finished, as after vmm.shutdown.
  auto st = src.wait_exit();
  REQUIRE(st);
  CHECK(st->success());
  CHECK(src.wait_events({"vm/migration-started", "vm/migration-memory-iteration", "vm/pausing",
                         "vm/paused", "vm/snapshotting", "vm/snapshotted",
                         "vm/migration-finished", "vm/shutdown", "vmm/shutdown"}));
  CHECK(dst.wait_events({"vm/migration-receive-started", "vm/restoring", "vm/restored",
                         "vm/resuming", "vm/resumed", "vm/migration-receive-finished"}));
  const auto ev = src.events();
  const auto it = std::find_if(ev.begin(), ev.end(), [](const Event& e) {
    return e.event == "migration-memory-iteration";
  });
  REQUIRE(it != ev.end());
  CHECK(it->properties["id"] == "0");

  // The receiver runs the sender's config; its guest goes on counting from where it was.
  auto info = Json::parse(dst.get("vm.info").body);
  CHECK(info["state"] == "Running");
  CHECK(info["config"]["payload"]["cmdline"] == "console=ttyS0 mig-marker");
  CHECK(info["config"]["memory"]["size"] == 64 << 20);
  Serial after(serial_path(dst));
  REQUIRE(after.ok());
  REQUIRE_MESSAGE(after.wait_for("heartbeat", kBeat), after.seen());
  const unsigned first_on_target = first_heartbeat(after.seen());
  // An order, not a rate: the counter goes on from where the source left it (a guest started
  // over would say 1 <= last_on_source, which is >= 2), however long the move took on a loaded
  // machine; and the target counts on from there, one by one.
  CHECK_MESSAGE(first_on_target > last_on_source,
                "source " << last_on_source << ", target " << after.seen());
  REQUIRE_MESSAGE(after.wait_for("heartbeat " + std::to_string(first_on_target + 1), kBeat * 2),
                  after.seen());
  CHECK(dst.put("vm.pause").status == 204);  // the VM is the receiver's now
}

TEST_CASE("migration: a paused VM arrives paused (CompletePaused), no pause on the sender") {
  Vmm src;
  auto kernel = guest_kernel(src.dir());
  if (!kernel) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  Vmm dst;
  REQUIRE(src.put("vm.create", vm_config(*kernel, "console=ttyS0")).status == 204);
  REQUIRE(src.put("vm.boot").status == 204);
  REQUIRE(src.put("vm.pause").status == 204);
  const auto url = "unix:" + (dst.dir() / "m.sock").string();
  HttpReply received;
  std::thread receiver([&] {
    received = http(dst.sock(), "PUT", "vm.receive-migration",
                    Json{{"receiver_url", url}}.dump(), {}, 60s);
  });
  REQUIRE(wait_until(5s, [&] { return std::filesystem::exists(dst.dir() / "m.sock"); }));
  const auto sent = http(src.sock(), "PUT", "vm.send-migration",
                         Json{{"destination_url", url}}.dump(), {}, 60s);
  receiver.join();
  if (nested_snapshot_failure(sent, src)) return;
  CHECK_MESSAGE(sent.status == 204, sent.body << src.stderr_text() << dst.stderr_text());
  CHECK_MESSAGE(received.status == 204, received.body);
  CHECK(Json::parse(dst.get("vm.info").body)["state"] == "Paused");
  const auto src_names = join(names(src.events()));
  CHECK(src_names.find("vm/migration-started") != std::string::npos);
  CHECK(src_names.find("vm/pausing", src_names.find("vm/migration-started")) == std::string::npos);
  const auto dst_names = join(names(dst.events()));
  CHECK(dst_names.find("vm/resum") == std::string::npos);
  CHECK(dst.wait_events({"vm/restored", "vm/migration-receive-finished"}));
  CHECK(dst.put("vm.resume").status == 204);
}

TEST_CASE("migration: the sender's framing - a receiver gone after Config fails it and the VM runs on") {
  Vmm src;
  auto kernel = guest_kernel(src.dir());
  if (!kernel) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  REQUIRE(src.put("vm.create", vm_config(*kernel, "console=ttyS0")).status == 204);
  REQUIRE(src.put("vm.boot").status == 204);
  const auto path = src.dir() / "fake-receiver.sock";
  auto listener = chl::common::listen_unix(path);
  REQUIRE(listener);
  HttpReply sent;
  std::thread sender([&] {
    sent = http(src.sock(), "PUT", "vm.send-migration",
                Json{{"destination_url", "unix:" + path.string()}}.dump(), {}, 60s);
  });
  UniqueFd conn(::accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC));
  REQUIRE(conn);
  // Start: command 1, no payload.
  CHECK(read_n(conn.get(), 16) == mig_header(1, 0));
  REQUIRE(::write(conn.get(), mig_header(1, 0).data(), 16) == 16);  // Ok
  // Config: command 2 and the VmMigrationConfig JSON with the sender's vm_config.
  const auto cfg_head = read_n(conn.get(), 16);
  REQUIRE(cfg_head.size() == 16);
  CHECK(cfg_head[0] == 2);
  std::uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(cfg_head[8 + i]);
  const auto cfg = Json::parse(read_n(conn.get(), len), nullptr, false);
  REQUIRE(cfg.is_object());
  CHECK(cfg["vm_config"]["memory"]["size"] == 64 << 20);
  CHECK(cfg.contains("memory_manager_data"));
  conn.reset();  // the receiver dies before answering
  sender.join();
  CHECK(sent.status == 500);
  CHECK_MESSAGE(sent.body.find("Error starting migration sender") != std::string::npos, sent.body);
  CHECK_MESSAGE(sent.body.find("Socket error") != std::string::npos, sent.body);
  CHECK(src.wait_events({"vm/migration-started", "vm/migration-failed"}));
  CHECK(Json::parse(src.get("vm.info").body)["state"] == "Running");
}

TEST_CASE("migration: the receiver's errors - path in use, a sender gone, an Abandon") {
  Vmm dst;
  const auto path = dst.dir() / "r.sock";
  const std::string body = Json{{"receiver_url", "unix:" + path.string()}}.dump();
  {
    // UnixListener::bind refuses an existing path.
    chl::test::write_file(path, "");
    const auto r = dst.put("vm.receive-migration", body);
    CHECK(r.status == 500);
    CHECK_MESSAGE(r.body.find("Error binding to UNIX socket") != std::string::npos, r.body);
    CHECK(r.body.find("os error 98") != std::string::npos);
    std::filesystem::remove(path);
  }
  {
    // A sender that says Start and goes: a socket error, no receive-failed event.
    HttpReply r;
    std::thread t([&] { r = http(dst.sock(), "PUT", "vm.receive-migration", body, {}, 30s); });
    REQUIRE(wait_until(5s, [&] { return std::filesystem::exists(path); }));
    auto c = chl::common::connect_unix(path);
    REQUIRE(c);
    REQUIRE(::write(c->get(), mig_header(1, 0).data(), 16) == 16);
    CHECK(read_n(c->get(), 16) == mig_header(1, 0));  // Ok
    c->reset();
    t.join();
    CHECK(r.status == 500);
    CHECK_MESSAGE(r.body.find("Error starting migration receiver") != std::string::npos, r.body);
    CHECK(r.body.find("Socket error") != std::string::npos);
    CHECK(dst.wait_events({"vm/migration-receive-started"}));
    CHECK(join(names(dst.events())).find("migration-receive-failed") == std::string::npos);
    std::filesystem::remove(path);  // CH leaves the socket file
  }
  {
    // Start, then Abandon: Ok, migration-receive-failed, and the call answers 204.
    HttpReply r;
    std::thread t([&] { r = http(dst.sock(), "PUT", "vm.receive-migration", body, {}, 30s); });
    REQUIRE(wait_until(5s, [&] { return std::filesystem::exists(path); }));
    auto c = chl::common::connect_unix(path);
    REQUIRE(c);
    REQUIRE(::write(c->get(), mig_header(1, 0).data(), 16) == 16);
    CHECK(read_n(c->get(), 16) == mig_header(1, 0));
    REQUIRE(::write(c->get(), mig_header(6, 0).data(), 16) == 16);
    CHECK(read_n(c->get(), 16) == mig_header(1, 0));
    t.join();
    CHECK_MESSAGE(r.status == 204, r.body);
    CHECK(dst.wait_events({"vm/migration-receive-started", "vm/migration-receive-failed"}));
    CHECK(dst.get("vm.info").status == 500);  // no VM
  }
}

// VFIO devices (devices[], vm.add-device). Our machines have no /dev/vfio: CH v52 then fails at
// the container, whatever the path (answers read from the real binary with curl, as below).
TEST_CASE("VFIO: without /dev/vfio, CH's container chain at boot and on vm.add-device - nothing attached") {
  if (std::filesystem::exists("/dev/vfio/vfio")) {
    chl::test::skip("this machine has /dev/vfio/vfio: what CH answers depends on its IOMMU groups");
    return;
  }
  Vmm vmm;
  auto kernel = guest_kernel(vmm.dir());
  if (!kernel) {
    chl::test::skip("real VMM without CHL_TEST_GUEST_KERNEL");
    return;
  }
  const std::string container =
      R"J("Cannot create a VFIO device","failed to open /dev/vfio/vfio container: No such file or directory (os error 2)","No such file or directory (os error 2)"])J";
  // A path given twice: VmConfig::validate at boot (and before any add).
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0",
                                         R"J("devices":[{"path":"/sys/bus/pci/devices/0000:00:00.0/","id":"a"},)J"
                                         R"J({"path":"/sys/bus/pci/devices/0000:00:00.0/","id":"b"}])J"))
              .status == 204);
  CHECK(vmm.put("vm.boot").body ==
        R"J(["Error from API","The VM could not boot","Failed to validate config","Duplicated device path: /sys/bus/pci/devices/0000:00:00.0/"])J");
  REQUIRE(vmm.put("vm.delete").status == 204);
  // A host device that is no VFIO device (the host bridge's sysfs node, bound to no vfio-pci).
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0",
                                         R"J("devices":[{"path":"/sys/bus/pci/devices/0000:00:00.0/","id":"hostdevice-dev1"}])J"))
              .status == 204);
  CHECK(vmm.put("vm.boot").body ==
        R"J(["Error from API","The VM could not boot","Error from device manager",)J" + container);
  REQUIRE(vmm.put("vm.delete").status == 204);
  // Hotplug into a running VM: the same chain, and the config and device tree stay without it.
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0")).status == 204);
  REQUIRE(vmm.put("vm.boot").status == 204);
  for (const char* path : {"/sys/bus/pci/devices/0000:00:00.0/", "/nonexistent/0000:81:00.1/"}) {
    auto add = vmm.put("vm.add-device", Json{{"path", path}, {"id", "hostdevice-dev1"}}.dump());
    CHECK(add.status == 500);
    CHECK(add.body == R"J(["Error from API","The device could not be added to the VM","Error from device manager",)J" +
                          container);
  }
  const auto info = Json::parse(vmm.get("vm.info").body);
  CHECK(info["config"]["devices"].is_null());
  CHECK_FALSE(info["device_tree"].contains("hostdevice-dev1"));
}

// The double's VMM_DOUBLE_VFIO_ROOT: a directory standing for / with a container, groups and
// sysfs links, so the device-path checks past the container are reached (vfio.hpp).
TEST_CASE("double: VFIO device paths - no iommu_group link - a group without its file - then attached" *
          doctest::test_suite("double")) {
  SKIP_ON_REAL_VMM("lane double: VMM_DOUBLE_VFIO_ROOT is a knob of the double (a machine with VFIO)");
  TempDir root("vfioroot");
  std::filesystem::create_directories(root / "dev/vfio");
  chl::test::write_file(root / "dev/vfio/vfio", "");
  const std::string good = "/sys/bus/pci/devices/0000:81:00.1";
  const std::string nogroup = "/sys/bus/pci/devices/0000:81:00.2";
  const std::string nolink = "/sys/bus/pci/devices/0000:81:00.3";
  for (const auto& p : {good, nogroup, nolink}) std::filesystem::create_directories(root.path().string() + p);
  std::filesystem::create_symlink("../../../../kernel/iommu_groups/7", root.path().string() + good + "/iommu_group");
  std::filesystem::create_symlink("../../../../kernel/iommu_groups/8", root.path().string() + nogroup + "/iommu_group");
  chl::test::write_file(root / "dev/vfio/7", "");
  Vmm vmm({.api_fd = false, .event_fd = false, .env = {"VMM_DOUBLE_VFIO_ROOT=" + root.path().string()}});
  auto kernel = guest_kernel(vmm.dir());
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0",
                                         R"J("devices":[{"path":")J" + nolink + R"J(/","id":"hostdevice-a"}])J"))
              .status == 204);
  CHECK(vmm.put("vm.boot").body ==
        R"J(["Error from API","The VM could not boot","Error from device manager","Cannot create a VFIO device","invalid file path"])J");
  REQUIRE(vmm.put("vm.delete").status == 204);
  REQUIRE(vmm.put("vm.create", vm_config(*kernel, "console=ttyS0",
                                         R"J("devices":[{"path":")J" + good + R"J(/","id":"hostdevice-a"}])J"))
              .status == 204);
  REQUIRE(vmm.put("vm.boot").status == 204);
  auto info = Json::parse(vmm.get("vm.info").body);
  CHECK(info["device_tree"]["hostdevice-a"]["pci_bdf"].is_string());
  auto bad = vmm.put("vm.add-device", Json{{"path", nogroup + "/"}, {"id", "gpu-b"}}.dump());
  CHECK(bad.body ==
        R"J(["Error from API","The device could not be added to the VM","Error from device manager","Cannot create a VFIO device","failed to open /dev/vfio/8 group: No such file or directory (os error 2)","No such file or directory (os error 2)"])J");
  chl::test::write_file(root / "dev/vfio/8", "");
  auto add = vmm.put("vm.add-device", Json{{"path", nogroup + "/"}, {"id", "gpu-b"}}.dump());
  CHECK(add.status == 200);
  CHECK(Json::parse(add.body)["id"] == "gpu-b");
  info = Json::parse(vmm.get("vm.info").body);
  REQUIRE(info["config"]["devices"].size() == 2);
  CHECK(info["config"]["devices"][1]["path"] == nogroup + "/");
  CHECK(info["device_tree"].contains("gpu-b"));
}

#include "tests/support/test_support.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <doctest/doctest.h>

#include "common/child_process.hpp"
#include "common/unix_socket.hpp"

namespace chl::test {

TempDir::TempDir(const std::string& prefix) {
  std::string templ = "/tmp/" + prefix + "-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

bool wait_until(std::chrono::milliseconds timeout, const std::function<bool()>& pred,
                std::chrono::milliseconds interval) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    std::this_thread::sleep_for(interval);
  }
}

std::string vmm_binary() {
  if (const char* env = std::getenv("CLOUD_HYPERVISOR_BIN"); env && *env) return env;
  return CHL_VMM_DOUBLE_PATH;
}

bool using_real_vmm() { return vmm_binary() != std::string(CHL_VMM_DOUBLE_PATH); }

std::filesystem::path project_pvh_guest() { return binary_dir() / "guests" / "pvh-guest.elf"; }

bool is_project_pvh_guest(const std::filesystem::path& kernel) {
  std::error_code ec;
  if (std::filesystem::equivalent(kernel, project_pvh_guest(), ec)) return true;
  if (!std::filesystem::is_regular_file(kernel, ec) || !std::filesystem::is_regular_file(project_pvh_guest(), ec))
    return false;
  return read_file(kernel) == read_file(project_pvh_guest());
}

bool needs_cooperative_guest(const std::filesystem::path& kernel) {
  if (is_project_pvh_guest(kernel)) return true;
  if (!using_real_vmm()) {
    // The double acts on the power button only for a guest whose ELF note says it maps CH's GED
    // register (docs/vmm-double.md, "The power button").
    skip(
        "the VMM double's guest sees the power button only with a kernel that says it reaches CH's "
        "GED register "
        "(the project's PVH guest, target pvh_guest); " +
        kernel.string() + " is not it");
    return false;
  }
  if (const char* c = std::getenv("CHL_TEST_GUEST_COOPERATIVE"); c && std::string(c) == "1") return true;
  skip("needs a guest that powers off on the ACPI power button; " + kernel.string() +
       " is not the project's PVH guest (" + project_pvh_guest().string() +
       "); set CHL_TEST_GUEST_COOPERATIVE=1 if it powers off on the button");
  return false;
}

std::string launcher_binary() {
  if (const char* w = std::getenv("CHL_LAUNCHER_WRAPPER"); w && *w) return w;
  return CHL_LAUNCHER_PATH;
}
std::filesystem::path source_dir() { return CHL_SOURCE_DIR; }
std::filesystem::path binary_dir() { return CHL_BINARY_DIR; }

std::optional<std::string> tool(const std::string& name) { return common::find_program(name); }

void skip(const std::string& reason) {
  const auto* tc = doctest::getContextOptions();
  (void)tc;
  std::cerr << "SKIPPED: " << reason << std::endl;
  MESSAGE("SKIPPED: " << reason);
}

void skip_part(const std::string& reason) {
  std::cerr << "SKIPPED PART: " << reason << std::endl;
  MESSAGE("SKIPPED PART: " << reason);
}

CommandResult run_command(const std::vector<std::string>& argv, const std::string& stdin_data) {
  CommandResult res;
  int out[2], in[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(in, O_CLOEXEC) != 0) return res;
  common::SpawnOptions opts;
  opts.argv = argv;
  if (argv.empty()) return res;
  if (argv[0].find('/') == std::string::npos) {
    auto p = common::find_program(argv[0]);
    if (!p) {
      res.output = "not found: " + argv[0];
      return res;
    }
    opts.argv[0] = *p;
  }
  for (char** e = environ; *e; ++e) opts.env.emplace_back(*e);
  opts.stdin_fd = in[0];
  opts.stdout_fd = out[1];
  opts.stderr_fd = out[1];
  opts.new_session = false;
  auto child = common::ChildProcess::spawn(opts);
  ::close(out[1]);
  ::close(in[0]);
  if (!child) {
    ::close(out[0]);
    ::close(in[1]);
    res.output = child.error().message();
    return res;
  }
  // Feed stdin and drain stdout concurrently so neither side can fill up and deadlock.
  std::thread feeder([fd = in[1], data = stdin_data] {
    std::size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::write(fd, data.data() + off, data.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      off += static_cast<std::size_t>(n);
    }
    ::close(fd);
  });
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    res.output.append(buf, static_cast<std::size_t>(n));
  }
  ::close(out[0]);
  feeder.join();
  auto st = child->wait();
  if (st) res.exit_code = st->exited ? st->code : 128 + st->signal;
  return res;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file(const std::filesystem::path& p, const std::string& data) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << data;
}

void leave_stale_socket(const std::filesystem::path& path) {
  auto addr = common::unix_address(path);
  REQUIRE_MESSAGE(addr, path.string());
  common::UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(s);
  REQUIRE(::bind(s.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr) == 0);
}

std::string read_socket_until(const std::filesystem::path& path, const std::string& marker,
                              std::chrono::milliseconds timeout) {
  return read_socket_until(
      path, [&](const std::string& got) { return got.find(marker) != std::string::npos; }, timeout);
}

std::string read_socket_until(const std::filesystem::path& path,
                              const std::function<bool(const std::string&)>& done,
                              std::chrono::milliseconds timeout) {
  auto conn = common::connect_unix(path);
  if (!conn) return {};
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done(got) && std::chrono::steady_clock::now() < deadline) {
    pollfd p{conn->get(), POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      char buf[4096];
      ssize_t n = ::read(conn->get(), buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
    }
  }
  return got;
}

}  // namespace chl::test

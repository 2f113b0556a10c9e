// Console relay benchmark: chl::console_bridge::Bridge versus socat, side by side in one run.
//
// For each relay a fresh openpty pair stands in for the guest's serial port and the relay runs
// as its own process (this binary re-executed with --serve-bridge, or socat):
//   slave-path: the "guest" (this process) holds the master, the relay opens the slave path —
//               as with Cloud Hypervisor, which keeps the master and reports /dev/pts/N.
//               socat UNIX-LISTEN:<sock> OPEN:<pts>,rawer
//   master-fd:  the "guest" holds the slave, the relay is given the master fd.
//               socat UNIX-LISTEN:<sock> FD:3
// Figures: throughput guest -> client (MiB/s; median of the trials) and the round trip of a
// one-byte echo client -> relay -> guest -> relay -> client (p50, p99 over all trials, and the
// spread of the per-trial p99). Trials of the relays alternate so all see the same machine load.
// Relays: socat; the bridge with its console log beside the socket (ext4 /tmp here, as in a pod's
// state dir); the bridge with its log on tmpfs (/dev/shm), to see what the log write costs.
//
// A stall watchdog aborts the run with a message naming the phase when nothing has moved for
// --stall-seconds (default 20): a relay that stops relaying must not hang the benchmark. The
// relays die with the bench (PR_SET_PDEATHSIG) and the temporary directory is removed.
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "common/child_process.hpp"
#include "common/unique_fd.hpp"
#include "console_bridge/bridge.hpp"

using chl::common::ChildProcess;
using chl::common::SpawnOptions;
using chl::common::UniqueFd;
using Clock = std::chrono::steady_clock;

namespace {

// The run's temporary directories, removed on every way out (normal end, die(), stall).
std::vector<std::filesystem::path> g_temp_dirs;

void remove_temp_dirs() {
  for (const auto& d : g_temp_dirs) {
    std::error_code ec;
    std::filesystem::remove_all(d, ec);
  }
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "console_bridge_bench: %s\n", msg.c_str());
  remove_temp_dirs();
  std::exit(1);
}

// Aborts the process when the progress counter has not moved for `limit`: every blocking step
// of the benchmark (in any thread) calls tick() when it gets somewhere.
class StallWatchdog {
 public:
  void start(std::chrono::seconds limit) {
    limit_ = limit;
    thread_ = std::thread([this] { loop(); });
    thread_.detach();  // lives as long as the process
  }
  void tick() { progress_.fetch_add(1, std::memory_order_relaxed); }
  void phase(std::string p) {
    std::lock_guard<std::mutex> lock(mu_);
    phase_ = std::move(p);
    tick();
  }

 private:
  void loop() {
    std::uint64_t last = progress_.load();
    auto since = Clock::now();
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::uint64_t now = progress_.load();
      if (now != last) {
        last = now;
        since = Clock::now();
        continue;
      }
      if (Clock::now() - since < limit_) continue;
      std::string phase;
      {
        std::lock_guard<std::mutex> lock(mu_);
        phase = phase_;
      }
      std::fprintf(stderr,
                   "console_bridge_bench: STALL: no progress for %lld s during: %s; aborting (the relays "
                   "are killed with this process)\n",
                   static_cast<long long>(limit_.count()), phase.c_str());
      remove_temp_dirs();
      std::_Exit(2);
    }
  }
  std::atomic<std::uint64_t> progress_{0};
  std::mutex mu_;
  std::string phase_ = "starting";
  std::chrono::seconds limit_{20};
  std::thread thread_;
};

StallWatchdog watchdog;

// --serve-bridge SOCKET (path:P | fd:N) [LOG]: run the bridge until SIGTERM.
int serve_bridge(const std::string& socket, const std::string& pty, const std::string& log) {
  boost::asio::io_context io(1);
  chl::console_bridge::BridgeOptions o;
  o.socket_path = socket;
  o.log_path = log;  // empty: beside the socket
  // The pretend guest writes at PTY speed (~70 MiB/s, far beyond Cloud Hypervisor's byte-at-a-time
  // UART). With the default 1 MiB client buffer, a bench reader descheduled for ~15 ms on a loaded
  // machine is dropped as a client that stopped reading (the bridge never holds the PTY for a
  // client: CH would then overwrite guest output past its 16 KiB buffer). The throughput run
  // measures relaying, not that policy, so the buffer is large here, as in the megabyte test.
  o.client_buffer_bytes = 64 << 20;
  chl::console_bridge::Bridge bridge(io, o);
  if (auto st = bridge.start(); !st) die(st.error().message());
  auto st = pty.rfind("fd:", 0) == 0 ? bridge.attach_pty_fd(UniqueFd(std::stoi(pty.substr(3))))
                                     : bridge.attach_pty_path(pty.substr(5));
  if (!st) die(st.error().message());
  boost::asio::signal_set sigs(io, SIGTERM, SIGINT);
  sigs.async_wait([&](const boost::system::error_code&, int) {
    bridge.stop();
    io.stop();
  });
  io.run();
  return 0;
}

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      pollfd pf{fd, POLLOUT, 0};
      ::poll(&pf, 1, 100);
      continue;
    }
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
    watchdog.tick();
  }
  return true;
}

// Read exactly n bytes (blocking fd), false on end of file / error.
bool read_exactly(int fd, char* p, std::size_t n) {
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
    watchdog.tick();
  }
  return true;
}

enum class Relay { BridgeLogBeside, BridgeLogTmpfs, Socat };

const char* relay_name(Relay r) {
  switch (r) {
    case Relay::BridgeLogBeside: return "bridge, log on /tmp";
    case Relay::BridgeLogTmpfs: return "bridge, log on tmpfs";
    case Relay::Socat: return "socat";
  }
  return "?";
}

struct Rig {
  std::string name;
  UniqueFd guest;     // the guest's end of the PTY
  ChildProcess relay;
  UniqueFd client;
  UniqueFd held_slave;  // slave-path: kept open until the relay has opened it (else EIO on the master)
};

UniqueFd connect_retry(const std::filesystem::path& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  for (int i = 0; i < 500; ++i) {
    watchdog.tick();
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  die("relay never listened on " + path.string());
}

Rig make_rig(Relay relay, bool slave_path, const std::filesystem::path& dir, const std::filesystem::path& shm_dir,
             const std::string& self, const std::string& socat) {
  const bool bridge = relay != Relay::Socat;
  int m = -1, s = -1;
  if (::openpty(&m, &s, nullptr, nullptr, nullptr) != 0) die("openpty failed");
  UniqueFd master(m), slave(s);
  std::string pts = ::ttyname(s);
  termios t{};
  ::tcgetattr(s, &t);
  ::cfmakeraw(&t);
  ::tcsetattr(s, TCSANOW, &t);
  Rig rig;
  rig.name = relay_name(relay);
  watchdog.phase("starting relay: " + rig.name);
  auto sock = dir / (relay == Relay::Socat ? "socat.sock" : relay == Relay::BridgeLogTmpfs ? "bridge-shm.sock" : "bridge.sock");
  SpawnOptions o;
  for (char** e = environ; *e; ++e) o.env.emplace_back(*e);
  o.stderr_fd = 2;
  std::string pty_arg;
  if (slave_path) {
    rig.guest = std::move(master);
    rig.held_slave = std::move(slave);  // the relay opens the path itself
  } else {
    rig.guest = std::move(slave);
    o.pass_fds.emplace_back(master.get(), 3);
  }
  if (bridge) {
    std::string log = relay == Relay::BridgeLogTmpfs ? (shm_dir / "virt-serial0-log").string() : "";
    o.argv = {self, "--serve-bridge", sock.string(), slave_path ? "path:" + pts : "fd:3", log};
  } else {
    o.argv = {socat, "UNIX-LISTEN:" + sock.string(), slave_path ? "OPEN:" + pts + ",rawer" : "FD:3"};
  }
  auto child = ChildProcess::spawn(o);
  if (!child) die(child.error().message());
  rig.relay = std::move(*child);
  rig.client = connect_retry(sock);
  // Warm up and make sure the path works: one echo.
  char c = 'w';
  if (!write_all(rig.client.get(), &c, 1) || !read_exactly(rig.guest.get(), &c, 1)) die(rig.name + ": no input");
  if (!write_all(rig.guest.get(), &c, 1) || !read_exactly(rig.client.get(), &c, 1)) die(rig.name + ": no output");
  rig.held_slave.reset();
  return rig;
}

double throughput_mib_s(Rig& rig, std::size_t bytes) {
  std::vector<char> data(64 * 1024, 'x');
  std::vector<char> sink(256 * 1024);
  auto t0 = Clock::now();
  std::thread writer([&] {
    for (std::size_t left = bytes; left > 0;) {
      std::size_t n = std::min(left, data.size());
      if (!write_all(rig.guest.get(), data.data(), n)) die(rig.name + ": guest write failed");
      left -= n;
    }
  });
  std::size_t got = 0;
  watchdog.phase(rig.name + ": throughput guest -> client, " + std::to_string(bytes >> 20) + " MiB");
  while (got < bytes) {
    ssize_t r = ::read(rig.client.get(), sink.data(), std::min(sink.size(), bytes - got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) die(rig.name + ": client connection ended during the throughput run");
    got += static_cast<std::size_t>(r);
    watchdog.tick();
  }
  auto t1 = Clock::now();
  writer.join();
  return static_cast<double>(bytes) / (1024.0 * 1024.0) / std::chrono::duration<double>(t1 - t0).count();
}

// Round trips of one byte; the guest echoes from a thread. Returns microseconds per trip.
std::vector<double> echo_round_trips(Rig& rig, int rounds) {
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    char c;
    while (!stop) {
      pollfd p{rig.guest.get(), POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      if (::read(rig.guest.get(), &c, 1) == 1) write_all(rig.guest.get(), &c, 1);
    }
  });
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(rounds));
  watchdog.phase(rig.name + ": " + std::to_string(rounds) + " one-byte echoes");
  for (int i = 0; i < rounds; ++i) {
    char c = static_cast<char>('a' + i % 26), back = 0;
    auto t0 = Clock::now();
    if (!write_all(rig.client.get(), &c, 1) || !read_exactly(rig.client.get(), &back, 1)) {
      die(rig.name + ": echo failed");
    }
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (back != c) die(rig.name + ": echo returned the wrong byte");
  }
  stop = true;
  echo.join();
  return us;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  std::size_t i = static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size() - 1));
  return v[i];
}

double median(std::vector<double> v) { return percentile(std::move(v), 50); }

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if ((args.size() == 3 || args.size() == 4) && args[0] == "--serve-bridge") {
    return serve_bridge(args[1], args[2], args.size() == 4 ? args[3] : "");
  }
  std::size_t mib = 64;
  int rounds = 5000, trials = 5, stall_seconds = 20;
  bool want_slave_path = true, want_master_fd = true;
  for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
    if (args[i] == "--mib") mib = std::stoul(args[i + 1]);
    else if (args[i] == "--rounds") rounds = std::stoi(args[i + 1]);
    else if (args[i] == "--trials") trials = std::stoi(args[i + 1]);
    else if (args[i] == "--stall-seconds") stall_seconds = std::stoi(args[i + 1]);
    else if (args[i] == "--arrangement" && args[i + 1] == "slave-path") want_master_fd = false;
    else if (args[i] == "--arrangement" && args[i + 1] == "master-fd") want_slave_path = false;
    else if (args[i] == "--arrangement" && args[i + 1] == "both") {}
    else die("unknown option " + args[i] + " " + args[i + 1] +
             " (--mib N --rounds N --trials N --stall-seconds N --arrangement slave-path|master-fd|both)");
  }
  if (args.size() % 2 != 0) die("options take a value: " + args.back());
  if (mib == 0 || rounds < 1 || trials < 1 || stall_seconds < 1) die("--mib, --rounds, --trials, --stall-seconds must be >= 1");
  auto socat = chl::common::find_program("socat");
  if (!socat) die("socat is not installed (apt-get install socat)");
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  char tmpl[] = "/tmp/chl-cbbench-XXXXXX";
  if (!::mkdtemp(tmpl)) die("mkdtemp failed");
  std::filesystem::path dir = tmpl;
  g_temp_dirs.push_back(dir);
  char shm_tmpl[] = "/dev/shm/chl-cbbench-XXXXXX";
  if (!::mkdtemp(shm_tmpl)) die("mkdtemp in /dev/shm failed");
  std::filesystem::path shm_dir = shm_tmpl;
  g_temp_dirs.push_back(shm_dir);
  watchdog.start(std::chrono::seconds(stall_seconds));

  double load[3] = {0, 0, 0};
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
    std::fclose(f);
  }
  std::printf("console relay benchmark: %zu MiB guest->client x %d trials, %d one-byte echoes x %d trials, "
              "%u cores, load average %.2f %.2f %.2f at start\n",
              mib, trials, rounds, trials, std::thread::hardware_concurrency(), load[0], load[1], load[2]);
  constexpr Relay kRelays[] = {Relay::BridgeLogBeside, Relay::BridgeLogTmpfs, Relay::Socat};
  constexpr int kN = 3;
  std::vector<bool> arrangements;
  if (want_slave_path) arrangements.push_back(true);
  if (want_master_fd) arrangements.push_back(false);
  for (bool slave_path : arrangements) {
    const char* arrangement = slave_path ? "slave-path (as with Cloud Hypervisor)" : "master-fd";
    Rig rigs[kN];
    for (int r = 0; r < kN; ++r) rigs[r] = make_rig(kRelays[r], slave_path, dir, shm_dir, self, *socat);
    std::vector<double> tput[kN];
    std::vector<double> lat[kN];
    std::vector<double> trial_p99[kN];
    for (int t = 0; t < trials; ++t) {
      for (int r = 0; r < kN; ++r) tput[r].push_back(throughput_mib_s(rigs[r], mib << 20));
      for (int r = 0; r < kN; ++r) {
        auto v = echo_round_trips(rigs[r], rounds);
        trial_p99[r].push_back(percentile(v, 99));
        lat[r].insert(lat[r].end(), v.begin(), v.end());
      }
    }
    std::printf("\n%s\n", arrangement);
    std::printf("  %-22s %10s %10s %10s   %s\n", "relay", "MiB/s", "p50 us", "p99 us", "p99 per trial (us)");
    double m[kN], p50[kN], p99[kN];
    for (int r = 0; r < kN; ++r) {
      m[r] = median(tput[r]);
      p50[r] = percentile(lat[r], 50);
      p99[r] = percentile(lat[r], 99);
      std::string per;
      for (double v : trial_p99[r]) per += (per.empty() ? "" : " ") + std::to_string(static_cast<long>(v));
      std::printf("  %-22s %10.1f %10.1f %10.1f   %s\n", rigs[r].name.c_str(), m[r], p50[r], p99[r], per.c_str());
    }
    for (int r = 0; r < 2; ++r) {
      std::printf("  %s / socat: throughput %.2fx (target >= 1.0), p50 %.2fx, p99 %.2fx (target <= 1.0)\n",
                  rigs[r].name.c_str(), m[r] / m[2], p50[r] / p50[2], p99[r] / p99[2]);
      // Trial t of each relay ran back to back: the ratio within a trial sees (nearly) the same
      // machine load, so its median is steadier than ratios of pooled figures when load drifts.
      std::vector<double> rt, rp;
      for (int t = 0; t < trials; ++t) {
        rt.push_back(tput[r][static_cast<std::size_t>(t)] / tput[2][static_cast<std::size_t>(t)]);
        rp.push_back(trial_p99[r][static_cast<std::size_t>(t)] / trial_p99[2][static_cast<std::size_t>(t)]);
      }
      std::printf("    paired per trial (median [min..max]): throughput %.2fx [%.2f..%.2f], p99 %.2fx [%.2f..%.2f]\n",
                  median(rt), *std::min_element(rt.begin(), rt.end()), *std::max_element(rt.begin(), rt.end()),
                  median(rp), *std::min_element(rp.begin(), rp.end()), *std::max_element(rp.begin(), rp.end()));
    }
    if (slave_path) {
      // For bench/run.sh: the bridge as the launcher runs it (log beside the socket) vs socat.
      // key, what, ours, peer name, peer, unit, target kind, target.
      std::printf("RESULT\tconsole_tput\tconsole relay throughput, guest->client\t%.1f\tsocat\t%.1f\tMiB/s\trate_ge\t1.0\n",
                  m[0], m[2]);
      std::printf("RESULT\tconsole_p50\tconsole echo round trip p50\t%.1f\tsocat\t%.1f\tus\tfaster_ge\t1.0\n", p50[0],
                  p50[2]);
      std::printf("RESULT\tconsole_p99\tconsole echo round trip p99\t%.1f\tsocat\t%.1f\tus\tfaster_ge\t1.0\n", p99[0],
                  p99[2]);
    }
    watchdog.phase(std::string("stopping the relays of ") + arrangement);
    for (auto& rig : rigs) {
      rig.client.reset();
      (void)rig.relay.signal(SIGTERM);
      (void)rig.relay.wait_for(std::chrono::seconds(5));
    }
  }
  remove_temp_dirs();
  return 0;
}

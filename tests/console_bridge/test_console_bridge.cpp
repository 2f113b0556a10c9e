// Tests for console_bridge/: a real openpty pair stands in for the guest's serial port.
// The bridge runs on its own io_context thread; clients are plain sockets, the ch-launcher
// binary (pipe mode) and, under tmux, the interactive client as a person meets it.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <sstream>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <doctest/doctest.h>

#include "common/unique_fd.hpp"
#include "common/unix_socket.hpp"
#include "console_bridge/bridge.hpp"
#include "console_bridge/console_log.hpp"
#include "console_bridge/notices.hpp"
#include "console_bridge/scrollback.hpp"
#include "tests/support/test_support.hpp"

using namespace chl::console_bridge;
using chl::common::UniqueFd;
using chl::test::TempDir;
using chl::test::wait_until;
using namespace std::chrono_literals;

namespace {

// ---- helpers -------------------------------------------------------------------------------

struct PtyPair {
  UniqueFd master;
  UniqueFd slave;
  std::string slave_path;
};

void make_raw(int fd) {
  termios t{};
  REQUIRE(::tcgetattr(fd, &t) == 0);
  ::cfmakeraw(&t);
  REQUIRE(::tcsetattr(fd, TCSANOW, &t) == 0);
}

// A PTY pair with the slave in raw mode (binary clean both ways).
PtyPair open_pty() {
  int m = -1, s = -1;
  REQUIRE(::openpty(&m, &s, nullptr, nullptr, nullptr) == 0);
  PtyPair p{UniqueFd(m), UniqueFd(s), ::ttyname(s)};
  ::fcntl(m, F_SETFD, FD_CLOEXEC);
  ::fcntl(s, F_SETFD, FD_CLOEXEC);
  make_raw(s);
  return p;
}

// Deterministic bytes (every value 0..255 occurs) so order and completeness can be checked.
std::string pattern(std::size_t n, std::size_t seed = 0) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i + seed) * 131 + (i >> 9));
  return s;
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
      continue;
    }
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Read until `want` bytes, end of file or `timeout`. `eof` reports an end of file.
std::string read_some(int fd, std::size_t want, std::chrono::milliseconds timeout, bool* eof = nullptr) {
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[65536];
  if (eof) *eof = false;
  while (out.size() < want) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    ssize_t n = ::read(fd, buf, std::min(sizeof buf, want - out.size()));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      if (eof) *eof = true;
      break;
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

UniqueFd connect_to(const std::filesystem::path& path) {
  auto fd = chl::common::connect_unix(path);
  REQUIRE_MESSAGE(fd, (fd ? "" : fd.error().message()));
  return std::move(*fd);
}

// A bridge on its own event-loop thread. Calls into it are posted to that thread.
class RunningBridge {
 public:
  explicit RunningBridge(BridgeOptions o) : bridge_(io_, std::move(o)), guard_(io_.get_executor()) {
    auto st = bridge_.start();
    REQUIRE_MESSAGE(st.has_value(), (st ? "" : st.error().message()));
    thread_ = std::thread([this] { io_.run(); });
  }
  ~RunningBridge() {
    call([](Bridge& b) {
      b.stop();
      return chl::common::Status{};
    });
    guard_.reset();
    thread_.join();
  }
  chl::common::Status call(std::function<chl::common::Status(Bridge&)> f) {
    std::promise<chl::common::Status> done;
    boost::asio::post(io_, [&] { done.set_value(f(bridge_)); });
    return done.get_future().get();
  }
  [[nodiscard]] BridgeStats stats() const { return bridge_.stats(); }

 private:
  boost::asio::io_context io_;
  Bridge bridge_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::thread thread_;
};

BridgeOptions options_in(const TempDir& dir) {
  BridgeOptions o;
  o.socket_path = dir / "virt-serial0";
  o.reopen_interval = 20ms;
  return o;
}

void attach_fd(RunningBridge& rb, UniqueFd fd) {
  auto shared = std::make_shared<UniqueFd>(std::move(fd));
  auto st = rb.call([shared](Bridge& b) { return b.attach_pty_fd(std::move(*shared)); });
  REQUIRE_MESSAGE(st.has_value(), (st ? "" : st.error().message()));
}

void attach_path(RunningBridge& rb, const std::string& path) {
  auto st = rb.call([path](Bridge& b) { return b.attach_pty_path(path); });
  REQUIRE_MESSAGE(st.has_value(), (st ? "" : st.error().message()));
}

// The pretend guest: echoes what it reads and answers each line with "guest got: <line>".
class EchoGuest {
 public:
  explicit EchoGuest(int fd) : fd_(fd), thread_([this] { loop(); }) {}
  ~EchoGuest() {
    stop_ = true;
    thread_.join();
  }

 private:
  void loop() {
    std::string line;
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char buf[4096];
      ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) continue;
      for (ssize_t i = 0; i < n; ++i) {
        char c = buf[i];
        if (c == '\r' || c == '\n') {
          write_all(fd_, "\r\nguest got: " + line + "\r\n");
          line.clear();
        } else {
          write_all(fd_, std::string_view(&c, 1));
          line += c;
        }
      }
    }
  }
  int fd_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Wake-ups a bridge that waits on a 20 ms timer may count in a window that began at `start` and
// ends now: two per 20 ms of the window as it really lasted, and 10 more (a spinning loop counts
// thousands). A rate, not a deadline: a loaded machine stretches the window and the allowance.
std::uint64_t allowed_wakeups(std::chrono::steady_clock::time_point start) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  return static_cast<std::uint64_t>(ms.count() / 20) * 2 + 10;
}

}  // namespace

// ---- pieces --------------------------------------------------------------------------------

TEST_CASE("scrollback keeps the most recent bytes in order") {
  Scrollback sb(10);
  sb.append(std::string_view("abc"));
  CHECK(sb.contents() == "abc");
  sb.append(std::string_view("defghij"));
  CHECK(sb.contents() == "abcdefghij");
  sb.append(std::string_view("klm"));
  CHECK(sb.contents() == "defghijklm");
  sb.append(std::string_view("0123456789ABC"));
  CHECK(sb.contents() == "3456789ABC");
  sb.append(std::string_view("x"));
  CHECK(sb.contents() == "456789ABCx");
}

TEST_CASE("console log is capped with one rotation and keeps the newest bytes in order") {
  TempDir dir("chlcb");
  auto log = ConsoleLog::open(dir / "virt-serial0-log", 1000);
  REQUIRE(log);
  std::string all = pattern(4321);
  for (std::size_t off = 0; off < all.size(); off += 333) {
    REQUIRE(log->append(std::string_view(all).substr(off, 333)));
  }
  std::string cur = chl::test::read_file(dir / "virt-serial0-log");
  std::string old = chl::test::read_file(dir / "virt-serial0-log.1");
  CHECK(cur.size() == 321);
  CHECK(old.size() == 1000);
  CHECK(old + cur == all.substr(all.size() - 1321));
  CHECK_FALSE(std::filesystem::exists(dir / "virt-serial0-log.2"));
}

// ---- the bridge with a PTY -------------------------------------------------------------------

TEST_CASE("bytes flow both ways, with the bridge on the master fd or on the slave path") {
  for (bool by_path : {false, true}) {
    CAPTURE(by_path);
    TempDir dir("chlcb");
    RunningBridge rb(options_in(dir));
    PtyPair pty = open_pty();
    int guest = -1;
    if (by_path) {  // as with Cloud Hypervisor: the VMM holds the master, the bridge opens the slave
      guest = pty.master.get();
      attach_path(rb, pty.slave_path);
      pty.slave.reset();
    } else {
      guest = pty.slave.get();
      attach_fd(rb, std::move(pty.master));
    }
    UniqueFd client = connect_to(dir / "virt-serial0");
    REQUIRE(wait_until(5s, [&] { return rb.stats().client_connected; }));

    std::string out = pattern(4096, 7);  // every byte value, no line discipline in the way
    REQUIRE(write_all(guest, out));
    CHECK(read_some(client.get(), out.size(), 5s) == out);

    std::string in = pattern(3000, 3);
    REQUIRE(write_all(client.get(), in));
    CHECK(read_some(guest, in.size(), 5s) == in);
    // The counters move in the bridge's completion handlers, which may run just after the
    // other end has already seen the bytes: wait for them rather than race them.
    CHECK(wait_until(5s, [&] { return rb.stats().bytes_to_pty == in.size(); }));
    CHECK(wait_until(5s, [&] { return rb.stats().bytes_from_pty == out.size(); }));
  }
}

// Send `burst` from `from` to `to`; returns what arrived (stops after 20 s without progress).
std::string transfer(int from, int to, const std::string& burst) {
  // The writer must be able to give up: when the transfer stalls (below), a blocking write
  // would hang the test instead of letting it report the stall.
  const int flags = ::fcntl(from, F_GETFL);
  ::fcntl(from, F_SETFL, flags | O_NONBLOCK);
  std::atomic<bool> stop{false};
  std::atomic<bool> wrote{false};
  std::thread writer([&] {
    std::string_view data(burst);
    while (!data.empty() && !stop) {
      ssize_t n = ::write(from, data.data(), data.size());
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
        pollfd p{from, POLLOUT, 0};
        ::poll(&p, 1, 100);
        continue;
      }
      if (n <= 0) return;
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    wrote = data.empty();
  });
  std::string got;
  for (;;) {
    std::string more = read_some(to, burst.size() - got.size(), 20s);
    got += more;
    if (more.empty() || got.size() == burst.size()) break;
  }
  stop = true;
  writer.join();
  ::fcntl(from, F_SETFL, flags);
  if (got.size() == burst.size()) CHECK(wrote);
  return got;
}

// What arrived must be the whole burst, in order and uncorrupted.
void check_burst(const std::string& got, const std::string& burst, const char* direction) {
  INFO(direction << ": " << got.size() << " of " << burst.size() << " bytes arrived");
  REQUIRE(got.size() <= burst.size());
  CHECK(got.size() == burst.size());
  if (got != burst.substr(0, got.size())) {
    std::size_t at = 0;
    while (at < got.size() && got[at] == burst[at]) ++at;
    FAIL_CHECK("first wrong byte at offset " << at);
  }
}

// One direction at a time, both arrangements. This test used to stall or get wrong bytes now
// and then (only under `ctest -j`): the slave-path hangup test's bridge, running at the same
// time, reopened its hung-up /dev/pts/N after the kernel had given that number to this test's
// PTY, and read this test's bytes. Fixed in the bridge (a hung-up slave stays open, pinning
// its number); see "after a hangup on the slave path ..." below and docs/console.md.
TEST_CASE("megabyte bursts arrive complete and in order, guest to client and client to guest") {
  for (bool by_path : {false, true}) {
    CAPTURE(by_path);
    TempDir dir("chlcb");
    BridgeOptions o = options_in(dir);
    // This test is about completeness and order across partial reads and writes; a scheduler
    // hiccup of the test's reader must not trigger the slow-client policy (tested below).
    o.client_buffer_bytes = 64 << 20;
    o.log_max_bytes = 64 << 20;
    RunningBridge rb(o);
    PtyPair pty = open_pty();
    int guest = -1;
    if (by_path) {
      guest = pty.master.get();
      attach_path(rb, pty.slave_path);
      pty.slave.reset();
    } else {
      guest = pty.slave.get();
      attach_fd(rb, std::move(pty.master));
    }
    UniqueFd client = connect_to(dir / "virt-serial0");
    REQUIRE(wait_until(5s, [&] { return rb.stats().client_connected; }));

    const std::string down = pattern(4 << 20, 1);  // guest -> client
    std::string client_got = transfer(guest, client.get(), down);
    INFO("bytes_from_pty " << rb.stats().bytes_from_pty);
    check_burst(client_got, down, "guest to client");
    // The client is served before the log is written: wait for the bridge to finish the batch.
    CHECK(wait_until(5s, [&] { return rb.stats().bytes_from_pty == down.size(); }));
    CHECK(chl::test::read_file(dir / "virt-serial0-log") == down);

    const std::string up = pattern(2 << 20, 2);  // client -> guest: the PTY fills, input waits
    std::string guest_got = transfer(client.get(), guest, up);
    INFO("bytes_to_pty " << rb.stats().bytes_to_pty);
    check_burst(guest_got, up, "client to guest");
    CHECK(rb.stats().clients_dropped == 0);
    CHECK(rb.stats().pty_hangups == 0);
  }
}

TEST_CASE("a client that stops reading is dropped while the guest keeps flowing and logging") {
  TempDir dir("chlcb");
  BridgeOptions o = options_in(dir);
  o.client_buffer_bytes = 64 << 10;
  o.log_max_bytes = 64 << 20;
  RunningBridge rb(o);
  PtyPair pty = open_pty();
  int guest = pty.slave.get();
  attach_fd(rb, std::move(pty.master));
  UniqueFd stuck = connect_to(dir / "virt-serial0");  // never reads
  REQUIRE(wait_until(5s, [&] { return rb.stats().client_connected; }));

  const std::string out = pattern(4 << 20, 5);
  std::atomic<bool> done{false};
  std::thread writer([&] { done = write_all(guest, out); });
  // The guest is never held up by the stuck client: all of its output is read and logged.
  bool flowed = wait_until(30s, [&] { return done && rb.stats().bytes_from_pty == out.size(); });
  writer.join();
  REQUIRE(flowed);
  CHECK(rb.stats().clients_dropped == 1);
  CHECK_FALSE(rb.stats().client_connected);
  CHECK(chl::test::read_file(dir / "virt-serial0-log") == out);

  // The stuck client finds what was in flight, then the end: no more than its bounds allow.
  bool eof = false;
  std::string got = read_some(stuck.get(), out.size(), 10s, &eof);
  CHECK(eof);
  CHECK(got.size() < out.size() / 2);
  CHECK(got == out.substr(0, got.size()));

  // The console is free again; the next client starts with the scrollback.
  UniqueFd next = connect_to(dir / "virt-serial0");
  CHECK(read_some(next.get(), 16 << 10, 5s) == out.substr(out.size() - (16 << 10)));
  CHECK(wait_until(5s, [&] { return rb.stats().clients_accepted == 2; }));
}

TEST_CASE("a second client is refused with a one-line notice, or takes over when asked") {
  for (bool take_over : {false, true}) {
    CAPTURE(take_over);
    TempDir dir("chlcb");
    BridgeOptions o = options_in(dir);
    o.take_over = take_over;
    RunningBridge rb(o);
    PtyPair pty = open_pty();
    int guest = pty.slave.get();
    attach_fd(rb, std::move(pty.master));
    UniqueFd first = connect_to(dir / "virt-serial0");
    REQUIRE(wait_until(5s, [&] { return rb.stats().clients_accepted == 1; }));
    UniqueFd second = connect_to(dir / "virt-serial0");
    bool eof = false;
    if (!take_over) {
      CHECK(read_some(second.get(), 1000, 5s, &eof) == kSessionActiveNotice);
      CHECK(eof);
      CHECK(rb.stats().clients_refused == 1);
      REQUIRE(write_all(guest, "still yours\n"));
      CHECK(read_some(first.get(), 12, 5s) == "still yours\n");
    } else {
      CHECK(read_some(first.get(), 1000, 5s, &eof) == kTakenOverNotice);
      CHECK(eof);
      REQUIRE(wait_until(5s, [&] { return rb.stats().clients_taken_over == 1; }));
      REQUIRE(write_all(guest, "now yours\n"));
      CHECK(read_some(second.get(), 10, 5s) == "now yours\n");
      REQUIRE(write_all(second.get(), "typed"));
      CHECK(read_some(guest, 5, 5s) == "typed");
    }
  }
}

TEST_CASE("a client that disconnected a moment ago does not block the next one") {
  // virtctl console run twice in a row: the second connection may arrive before the bridge
  // has read the first one's EOF. It must be accepted, not refused as a second session.
  TempDir dir("chlcb");
  RunningBridge rb(options_in(dir));
  PtyPair pty = open_pty();
  int guest = pty.slave.get();
  attach_fd(rb, std::move(pty.master));
  std::string written;  // what the guest wrote so far: the scrollback a new client gets first
  for (int round = 0; round < 5; ++round) {
    CAPTURE(round);
    UniqueFd first = connect_to(dir / "virt-serial0");
    REQUIRE(wait_until(5s, [&] { return rb.stats().clients_accepted == static_cast<std::uint64_t>(2 * round + 1); }));
    // Hold the bridge's thread so that the close and the next connect are seen together.
    std::promise<void> release;
    std::promise<void> holding;
    std::thread holder([&] {
      (void)rb.call([&](Bridge&) {
        holding.set_value();
        release.get_future().wait();
        return chl::common::Status{};
      });
    });
    holding.get_future().wait();
    first.reset();
    UniqueFd second = connect_to(dir / "virt-serial0");
    release.set_value();
    holder.join();
    REQUIRE(wait_until(5s, [&] { return rb.stats().clients_accepted == static_cast<std::uint64_t>(2 * round + 2); }));
    CHECK(rb.stats().clients_refused == 0);
    const std::string line = "round " + std::to_string(round) + "\n";
    REQUIRE(write_all(guest, line));
    written += line;
    CHECK(read_some(second.get(), written.size(), 5s) == written);
  }
}

TEST_CASE("a reconnecting client gets the scrollback, then live output") {
  TempDir dir("chlcb");
  RunningBridge rb(options_in(dir));  // default scrollback: 16 KiB
  PtyPair pty = open_pty();
  int guest = pty.slave.get();
  attach_fd(rb, std::move(pty.master));
  const std::string before = pattern(100 << 10, 9);
  REQUIRE(write_all(guest, before));  // nobody connected: logged and kept
  REQUIRE(wait_until(5s, [&] { return rb.stats().bytes_from_pty == before.size(); }));
  {
    UniqueFd c = connect_to(dir / "virt-serial0");
    CHECK(read_some(c.get(), 16 << 10, 5s) == before.substr(before.size() - (16 << 10)));
  }
  REQUIRE(wait_until(5s, [&] { return !rb.stats().client_connected; }));
  REQUIRE(write_all(guest, "between\n"));
  REQUIRE(wait_until(5s, [&] { return rb.stats().bytes_from_pty == before.size() + 8; }));
  UniqueFd again = connect_to(dir / "virt-serial0");
  std::string expect = (before + "between\n").substr(before.size() + 8 - (16 << 10));
  CHECK(read_some(again.get(), expect.size(), 5s) == expect);
  REQUIRE(write_all(guest, "live\n"));
  CHECK(read_some(again.get(), 5, 5s) == "live\n");
}

TEST_CASE("the bridge's console log is capped with one rotation") {
  TempDir dir("chlcb");
  BridgeOptions o = options_in(dir);
  o.log_max_bytes = 64 << 10;
  RunningBridge rb(o);
  PtyPair pty = open_pty();
  int guest = pty.slave.get();
  attach_fd(rb, std::move(pty.master));
  const std::string out = pattern(300000, 4);
  REQUIRE(write_all(guest, out));
  REQUIRE(wait_until(10s, [&] { return rb.stats().bytes_from_pty == out.size(); }));
  std::string cur = chl::test::read_file(dir / "virt-serial0-log");
  std::string old = chl::test::read_file(dir / "virt-serial0-log.1");
  CHECK(cur.size() == out.size() % (64 << 10));
  CHECK(old.size() == (64 << 10));
  CHECK(old + cur == out.substr(out.size() - old.size() - cur.size()));
  CHECK_FALSE(std::filesystem::exists(dir / "virt-serial0-log.2"));
  struct stat st {};
  REQUIRE(::stat((dir / "virt-serial0-log").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
}

TEST_CASE("PTY hangup on the master fd: the bridge waits without spinning and resumes") {
  TempDir dir("chlcb");
  RunningBridge rb(options_in(dir));  // hangup checks every 20 ms
  PtyPair pty = open_pty();
  attach_fd(rb, std::move(pty.master));
  UniqueFd client = connect_to(dir / "virt-serial0");
  REQUIRE(wait_until(5s, [&] { return rb.stats().client_connected; }));
  REQUIRE(write_all(pty.slave.get(), "before\n"));
  CHECK(read_some(client.get(), 7, 5s) == "before\n");

  pty.slave.reset();  // the guest side goes away (reboot): EIO on the master
  // (The kernel reports it only until the old slave is released, ~0.1 s later: see bridge.hpp.)
  REQUIRE(wait_until(5s, [&] { return rb.stats().pty_hangups == 1; }));
  REQUIRE(write_all(client.get(), "typed while down"));  // held, not lost
  auto wakeups = rb.stats().pty_wakeups;
  auto window_start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(500ms);  // an observation window, not a synchronisation
  auto during = rb.stats().pty_wakeups - wakeups;
  // One timer check per 20 ms of the window as it really lasted (a loaded machine stretches it):
  // twice that and some is generous; a spinning loop would count thousands.
  CHECK(during <= allowed_wakeups(window_start));
  CHECK(rb.stats().client_connected);

  UniqueFd back(::open(pty.slave_path.c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC));
  REQUIRE(back.valid());
  make_raw(back.get());
  REQUIRE(wait_until(5s, [&] { return rb.stats().pty_up && rb.stats().pty_returns == 2; }));
  // The guest speaks first (on a master fd that is how the bridge knows a slave is open again),
  // then it gets what was typed while it was away.
  REQUIRE(write_all(back.get(), "after\n"));
  CHECK(read_some(client.get(), 6, 5s) == "after\n");
  CHECK(read_some(back.get(), 16, 5s) == "typed while down");
  REQUIRE(write_all(client.get(), "more"));
  CHECK(read_some(back.get(), 4, 5s) == "more");
}

TEST_CASE("PTY hangup on the slave path: the bridge waits and takes a newly attached PTY") {
  TempDir dir("chlcb");
  RunningBridge rb(options_in(dir));
  PtyPair pty = open_pty();
  attach_path(rb, pty.slave_path);
  pty.slave.reset();
  UniqueFd client = connect_to(dir / "virt-serial0");
  REQUIRE(wait_until(5s, [&] { return rb.stats().client_connected; }));
  pty.master.reset();  // the VMM went away: end of file on the slave, the path disappears
  REQUIRE(wait_until(5s, [&] { return rb.stats().pty_hangups == 1 && !rb.stats().pty_up; }));
  auto wakeups = rb.stats().pty_wakeups;
  const auto window_start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(300ms);  // observation window: reopen attempts only
  CHECK(rb.stats().pty_wakeups - wakeups <= allowed_wakeups(window_start));
  CHECK_FALSE(rb.stats().pty_up);

  PtyPair next = open_pty();  // the VMM's new PTY (as vm.info would report it)
  attach_path(rb, next.slave_path);
  next.slave.reset();
  CHECK(rb.stats().pty_up);
  REQUIRE(write_all(next.master.get(), "new pty\n"));
  CHECK(read_some(client.get(), 8, 5s) == "new pty\n");
}

TEST_CASE("after a hangup on the slave path the bridge leaves alone the next terminals opened") {
  // The VMM's PTY goes away. The kernel hands out the lowest free /dev/pts number to the next
  // terminal opened on the machine (here: by this test; in a pod: another PTY, someone's shell).
  // The bridge must never attach to it: it would read that terminal's input.
  TempDir dir("chlcb");
  RunningBridge rb(options_in(dir));  // hangup checks every 20 ms
  PtyPair vm = open_pty();
  attach_path(rb, vm.slave_path);
  vm.slave.reset();
  UniqueFd client = connect_to(dir / "virt-serial0");
  REQUIRE(wait_until(5s, [&] { return rb.stats().client_connected; }));
  vm.master.reset();
  REQUIRE(wait_until(5s, [&] { return rb.stats().pty_hangups == 1 && !rb.stats().pty_up; }));

  std::vector<PtyPair> others;
  for (int i = 0; i < 4; ++i) others.push_back(open_pty());
  std::this_thread::sleep_for(300ms);  // observation window: ~15 hangup checks
  CHECK_FALSE(rb.stats().pty_up);
  CHECK(rb.stats().pty_returns == 1);  // the first attach only
  for (auto& o : others) {
    CAPTURE(o.slave_path);
    REQUIRE(write_all(o.master.get(), "private input\n"));
    CHECK(read_some(o.slave.get(), 14, 5s) == "private input\n");
    REQUIRE(write_all(o.slave.get(), "private output\n"));
    CHECK(read_some(o.master.get(), 15, 5s) == "private output\n");
  }
  CHECK(read_some(client.get(), 1, 200ms).empty());
  CHECK(rb.stats().bytes_from_pty == 0);

  // The VMM's next PTY comes through attach_pty_path() and works.
  PtyPair next = open_pty();
  attach_path(rb, next.slave_path);
  next.slave.reset();
  REQUIRE(write_all(next.master.get(), "next\n"));
  CHECK(read_some(client.get(), 5, 5s) == "next\n");
}

TEST_CASE("a slave path hung up while its master stays open is reopened and relays again") {
  TempDir dir("chlcb");
  RunningBridge rb(options_in(dir));
  PtyPair vm = open_pty();
  attach_path(rb, vm.slave_path);
  UniqueFd client = connect_to(dir / "virt-serial0");
  REQUIRE(wait_until(5s, [&] { return rb.stats().client_connected; }));
  // vhangup of the slave (every open slave fd, the bridge's too, reads end of file); the master
  // stays, so /dev/pts/N is still the same PTY.
  if (::ioctl(vm.slave.get(), TIOCVHANGUP) != 0) {
    chl::test::skip(std::string("TIOCVHANGUP needs CAP_SYS_ADMIN: ") + std::strerror(errno));
    return;
  }
  vm.slave.reset();
  REQUIRE(wait_until(5s, [&] { return rb.stats().pty_hangups == 1; }));
  REQUIRE(wait_until(5s, [&] { return rb.stats().pty_up && rb.stats().pty_returns == 2; }));
  REQUIRE(write_all(vm.master.get(), "back\n"));
  CHECK(read_some(client.get(), 5, 5s) == "back\n");
  REQUIRE(write_all(client.get(), "typed"));
  CHECK(read_some(vm.master.get(), 5, 5s) == "typed");
}

TEST_CASE("stopping the bridge closes the client and removes the socket") {
  TempDir dir("chlcb");
  auto rb = std::make_unique<RunningBridge>(options_in(dir));
  PtyPair pty = open_pty();
  attach_fd(*rb, std::move(pty.master));
  UniqueFd client = connect_to(dir / "virt-serial0");
  REQUIRE(wait_until(5s, [&] { return rb->stats().client_connected; }));
  rb.reset();
  bool eof = false;
  CHECK(read_some(client.get(), 100, 5s, &eof).empty());
  CHECK(eof);
  CHECK_FALSE(std::filesystem::exists(dir / "virt-serial0"));
}

TEST_CASE("the socket gets mode 0600, or 0660 with a group, and stale or wrong paths are handled") {
  TempDir dir("chlcb");
  {
    RunningBridge rb(options_in(dir));
    struct stat st {};
    REQUIRE(::stat((dir / "virt-serial0").c_str(), &st) == 0);
    CHECK(S_ISSOCK(st.st_mode));
    CHECK((st.st_mode & 0777) == 0600);
  }
  {
    // A stale socket from a previous run (nobody listening) is replaced.
    chl::test::leave_stale_socket(dir / "virt-serial0");
    BridgeOptions o = options_in(dir);
    o.socket_group = ::getgid();
    RunningBridge rb(o);
    struct stat st {};
    REQUIRE(::stat((dir / "virt-serial0").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0660);
    CHECK(st.st_gid == ::getgid());

    // While it is live, a second bridge on the same path is refused.
    boost::asio::io_context io;
    Bridge other(io, options_in(dir));
    auto st2 = other.start();
    REQUIRE_FALSE(st2);
    CHECK(st2.error().message().find("another process is listening") != std::string::npos);
  }
  {
    chl::test::write_file(dir / "not-a-socket", "data");
    boost::asio::io_context io;
    BridgeOptions o;
    o.socket_path = dir / "not-a-socket";
    Bridge b(io, o);
    auto st = b.start();
    REQUIRE_FALSE(st);
    CHECK(st.error().message().find("is not a socket") != std::string::npos);
    CHECK(chl::test::read_file(dir / "not-a-socket") == "data");
  }
  {
    boost::asio::io_context io;
    BridgeOptions o;
    o.socket_path = dir / std::string(120, 'x');
    Bridge b(io, o);
    auto st = b.start();
    REQUIRE_FALSE(st);
    CHECK(st.error().message().find("the limit is 107") != std::string::npos);
  }
  {
    boost::asio::io_context io;
    Bridge b(io, options_in(dir));
    auto st = b.attach_pty_path("/dev/pts/none");
    REQUIRE_FALSE(st);
    CHECK(st.error().message().find("start()") != std::string::npos);
  }
}

// ---- the client ------------------------------------------------------------------------------

TEST_CASE("ch-launcher console in pipe mode relays stdin and prints the guest's answer") {
  TempDir dir("chlcb");
  RunningBridge rb(options_in(dir));
  PtyPair pty = open_pty();
  EchoGuest guest(pty.slave.get());
  attach_fd(rb, std::move(pty.master));
  auto r = chl::test::run_command(
      {chl::test::launcher_binary(), "console", "--socket", (dir / "virt-serial0").string()}, "hello\r");
  CHECK(r.exit_code == 0);
  CHECK_MESSAGE(r.output.find("guest got: hello") != std::string::npos, r.output);

  // --state-dir finds virt-serial0 in the directory.
  r = chl::test::run_command({chl::test::launcher_binary(), "console", "--state-dir", dir.path().string()},
                             "again\n");
  CHECK(r.exit_code == 0);
  CHECK_MESSAGE(r.output.find("guest got: again") != std::string::npos, r.output);

  // While a session is active another one is refused and exits non-zero.
  UniqueFd holder = connect_to(dir / "virt-serial0");
  REQUIRE(wait_until(5s, [&] { return rb.stats().client_connected; }));
  r = chl::test::run_command({chl::test::launcher_binary(), "console", "--state-dir", dir.path().string()});
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(r.output.find("console session already active") != std::string::npos, r.output);
}

TEST_CASE("ch-launcher console rejects bad arguments and missing sockets clearly") {
  auto r = chl::test::run_command({chl::test::launcher_binary(), "console"});
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.output.find("exactly one of --state-dir") != std::string::npos, r.output);
  r = chl::test::run_command({chl::test::launcher_binary(), "console", "--socket", "/nonexistent/virt-serial0"});
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(r.output.find("connecting to /nonexistent/virt-serial0: No such file or directory") !=
                    std::string::npos,
                r.output);
  TempDir dir("chlcb");
  r = chl::test::run_command({chl::test::launcher_binary(), "console", "--vmi", (dir / "missing.yaml").string()});
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(r.output.find("missing.yaml") != std::string::npos, r.output);
  // --vmi: the console socket in the VMI's default state directory.
  chl::test::write_file(dir / "vmi.yaml",
                        "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\n"
                        "metadata:\n  name: cbtest-absent\n  namespace: cbns\nspec: {}\n");
  r = chl::test::run_command({chl::test::launcher_binary(), "console", "--vmi", (dir / "vmi.yaml").string()});
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(r.output.find("/cbns/cbtest-absent/virt-serial0") != std::string::npos, r.output);
  r = chl::test::run_command({chl::test::launcher_binary(), "console", "--socket", "a", "--state-dir", "b"});
  CHECK(r.exit_code == 2);
}

namespace {

// tmux driving a pane: the interactive client as a person meets it.
class Tmux {
 public:
  Tmux(std::string bin, std::filesystem::path sock) : bin_(std::move(bin)), sock_(std::move(sock)) {}
  ~Tmux() { (void)run({"kill-server"}); }
  chl::test::CommandResult run(std::vector<std::string> args) const {
    args.insert(args.begin(), {bin_, "-S", sock_.string(), "-f", "/dev/null"});
    return chl::test::run_command(args);
  }
  [[nodiscard]] std::string screen() const { return run({"capture-pane", "-p", "-t", "chl"}).output; }
  [[nodiscard]] std::string format(const std::string& f) const {
    std::string s = run({"display-message", "-p", "-t", "chl", f}).output;
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
  }
  bool screen_has(const std::string& text, std::chrono::milliseconds t = 10s) const {
    return wait_until(t, [&] { return screen().find(text) != std::string::npos; }, 50ms);
  }

 private:
  std::string bin_;
  std::filesystem::path sock_;
};

// `stty -a` of the pane's terminal, read from outside.
std::string stty_of(const std::string& tty) { return chl::test::run_command({"stty", "-a", "-F", tty}).output; }
// Whether `stty -a` lists `flag` as set (a whitespace-separated word, not "-flag").
bool stty_has(const std::string& stty, const std::string& flag) {
  std::istringstream words(stty);
  std::string w;
  while (words >> w) {
    if (w == flag) return true;
  }
  return false;
}
bool is_cooked(const std::string& stty) {
  return stty_has(stty, "icanon") && stty_has(stty, "echo") && stty_has(stty, "isig") &&
         stty_has(stty, "opost");
}
bool is_raw(const std::string& stty) {
  return stty_has(stty, "-icanon") && stty_has(stty, "-echo") && stty_has(stty, "-isig");
}

}  // namespace

TEST_CASE("under tmux: type a line, see the guest echo, the escape key leaves and the terminal is restored") {
  auto tmux_bin = chl::test::tool("tmux");
  if (!tmux_bin) {
    chl::test::skip("tmux is not installed");
    return;
  }
  TempDir dir("chlcb");
  RunningBridge rb(options_in(dir));
  PtyPair pty = open_pty();
  EchoGuest guest(pty.slave.get());
  attach_fd(rb, std::move(pty.master));
  Tmux tmux(*tmux_bin, dir / "tmux.sock");
  auto created = tmux.run({"new-session", "-d", "-s", "chl", "-x", "150", "-y", "40", "/bin/sh"});
  REQUIRE_MESSAGE(created.exit_code == 0, created.output);
  const std::string tty = tmux.format("#{pane_tty}");
  REQUIRE_MESSAGE(tty.rfind("/dev/", 0) == 0, tty);
  REQUIRE(wait_until(5s, [&] { return is_cooked(stty_of(tty)); }));
  const std::string cmd = chl::test::launcher_binary() + " console --socket " + (dir / "virt-serial0").string();

  tmux.run({"send-keys", "-t", "chl", cmd, "Enter"});
  REQUIRE_MESSAGE(tmux.screen_has("Escape sequence is ^]"), tmux.screen());
  CHECK_MESSAGE(is_raw(stty_of(tty)), stty_of(tty));

  tmux.run({"send-keys", "-t", "chl", "hello there", "Enter"});
  CHECK_MESSAGE(tmux.screen_has("guest got: hello there"), tmux.screen());

  tmux.run({"send-keys", "-t", "chl", "C-]"});
  CHECK_MESSAGE(wait_until(10s, [&] { return !rb.stats().client_connected; }), tmux.screen());
  CHECK_MESSAGE(wait_until(10s, [&] { return tmux.format("#{pane_current_command}") == "sh"; }),
                tmux.format("#{pane_current_command}"));
  CHECK_MESSAGE(is_cooked(stty_of(tty)), stty_of(tty));
  // The shell is usable again and sees a sane terminal itself.
  // (grep fails on a cooked terminal: "cooked-2"; the typed line itself never shows that text)
  tmux.run({"send-keys", "-t", "chl", "stty -a | grep -qw -- -icanon; echo cooked-$((1+$?))", "Enter"});
  CHECK_MESSAGE(tmux.screen_has("cooked-2"), tmux.screen());

  // SIGTERM while attached: the terminal is restored too.
  tmux.run({"send-keys", "-t", "chl", "clear; " + cmd, "Enter"});
  REQUIRE_MESSAGE(tmux.screen_has("Escape sequence is ^]"), tmux.screen());
  REQUIRE(wait_until(5s, [&] { return rb.stats().client_connected; }));
  CHECK(is_raw(stty_of(tty)));
  const std::string shell_pid = tmux.format("#{pane_pid}");
  std::string children = chl::test::read_file("/proc/" + shell_pid + "/task/" + shell_pid + "/children");
  pid_t client_pid = static_cast<pid_t>(std::atol(children.c_str()));
  REQUIRE_MESSAGE(client_pid > 0, children);
  REQUIRE(::kill(client_pid, SIGTERM) == 0);
  CHECK(wait_until(10s, [&] { return tmux.format("#{pane_current_command}") == "sh"; }));
  CHECK_MESSAGE(is_cooked(stty_of(tty)), stty_of(tty));
  CHECK(wait_until(5s, [&] { return !rb.stats().client_connected; }));
}

#include "tests/vmm_double/hybrid_vsock.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <optional>
#include <thread>

#include "common/unique_fd.hpp"

namespace chl::vmm_double {
namespace {

using Clock = std::chrono::steady_clock;
using common::UniqueFd;

std::string os_error(int e) {
  return std::string(std::strerror(e)) + " (os error " + std::to_string(e) + ")";
}

bool fill_address(const std::string& path, sockaddr_un& a) {
  a = {};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path) return false;
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return true;
}

// muxer.rs parse_port_from_read_command: "connect " (any case), digits, "\n".
enum class Parse { More, Bad, Port };
Parse parse_connect(const std::string& buf, std::uint32_t& port) {
  static const std::string prefix = "connect ";
  const auto nl = buf.find('\n');
  if (buf.size() < prefix.size()) return nl == std::string::npos ? Parse::More : Parse::Bad;
  for (std::size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(buf[i])) != prefix[i]) return Parse::Bad;
  if (nl == std::string::npos) return buf.size() >= 32 ? Parse::Bad : Parse::More;
  std::string digits = buf.substr(prefix.size(), nl - prefix.size());
  while (!digits.empty() && std::isspace(static_cast<unsigned char>(digits.back())))
    digits.pop_back();
  while (!digits.empty() && std::isspace(static_cast<unsigned char>(digits.front())))
    digits.erase(0, 1);
  if (digits.empty() || digits.size() > 10 || !std::all_of(digits.begin(), digits.end(), ::isdigit))
    return Parse::Bad;
  const unsigned long long v = std::stoull(digits);
  if (v > 0xFFFFFFFFull) return Parse::Bad;
  port = static_cast<std::uint32_t>(v);
  return Parse::Port;
}

struct Conn {
  enum class State { Command, Requesting, Established } state = State::Command;
  UniqueFd host;
  UniqueFd guest;
  std::string command;
  Clock::time_point deadline{};
  std::string to_guest, to_host;  // one buffer per direction: read only while it is empty
  bool dead = false;
};

}  // namespace

struct HybridVsock::Impl {
  std::string path;
  std::map<std::uint32_t, std::string> listeners;
  UniqueFd listener;
  UniqueFd wake;  // eventfd: stop, pause changes
  std::atomic<bool> stop{false};
  std::atomic<bool> paused{false};
  std::list<Conn> conns;
  std::uint32_t local_port_last = (1u << 30) - 1;
  std::thread thread;

  std::uint32_t allocate_local_port() {
    local_port_last = ((local_port_last + 1) & ~(1u << 31)) | (1u << 30);
    return local_port_last;
  }

  // The guest side of a request for `port`: connected, or RST (closed), or silent.
  void request(Conn& c, std::uint32_t port) {
    auto it = listeners.find(port);
    if (it == listeners.end()) {  // nothing listens: the guest's RST, CH closes the stream
      c.dead = true;
      return;
    }
    c.state = Conn::State::Requesting;
    c.deadline = Clock::now() + std::chrono::milliseconds(2000);  // CONN_REQUEST_TIMEOUT_MS
    if (it->second == "silent") return;
    sockaddr_un a{};
    UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!s || !fill_address(it->second, a) ||
        ::connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      c.dead = true;  // the guest's listener is gone: RST
      return;
    }
    c.guest = std::move(s);
    c.state = Conn::State::Established;
    const std::string ok = "OK " + std::to_string(allocate_local_port()) + "\n";
    if (::send(c.host.get(), ok.data(), ok.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
        static_cast<ssize_t>(ok.size()))
      c.dead = true;  // CH kills a connection it cannot ack (muxer.rs:763-775)
  }

  void read_command(Conn& c) {
    // CH reads the first 10 bytes ("connect 0\n"), then one at a time.
    const std::size_t want = c.command.size() < 10 ? 10 - c.command.size() : 1;
    char b[16];
    const ssize_t n = ::recv(c.host.get(), b, want, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
      c.dead = true;
      return;
    }
    c.command.append(b, static_cast<std::size_t>(n));
    std::uint32_t port = 0;
    switch (parse_connect(c.command, port)) {
      case Parse::More:
        return;
      case Parse::Bad:
        c.dead = true;
        return;
      case Parse::Port:
        request(c, port);
        return;
    }
  }

  // Move bytes from `from` into `buf` (when empty) and from `buf` to `to`.
  static bool pump(int from, int to, std::string& buf, short revents_from, short revents_to) {
    if (buf.empty() && (revents_from & (POLLIN | POLLHUP | POLLERR))) {
      char b[65536];
      const ssize_t n = ::recv(from, b, sizeof b, MSG_DONTWAIT);
      if (n == 0) return false;
      if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
      if (n > 0) buf.assign(b, static_cast<std::size_t>(n));
    }
    if (!buf.empty() && (revents_to & POLLOUT || revents_from)) {
      const ssize_t n = ::send(to, buf.data(), buf.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
      if (n > 0) buf.erase(0, static_cast<std::size_t>(n));
    }
    return true;
  }

  void run() {
    while (!stop) {
      std::vector<pollfd> fds;
      fds.push_back({wake.get(), POLLIN, 0});
      const bool active = !paused;
      if (active) fds.push_back({listener.get(), POLLIN, 0});
      std::vector<std::pair<Conn*, int>> slots;  // conn, 0 host / 1 guest
      int timeout = -1;
      if (active) {
        for (auto& c : conns) {
          if (c.state == Conn::State::Command) {
            fds.push_back({c.host.get(), POLLIN, 0});
            slots.emplace_back(&c, 0);
          } else if (c.state == Conn::State::Requesting) {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - Clock::now())
                    .count();
            timeout = timeout < 0
                          ? static_cast<int>(std::max<long long>(left, 0))
                          : std::min<int>(timeout, static_cast<int>(std::max<long long>(left, 0)));
            fds.push_back({c.host.get(), 0, 0});  // only its hangup
            slots.emplace_back(&c, 0);
          } else {
            fds.push_back({c.host.get(),
                           static_cast<short>((c.to_guest.empty() ? POLLIN : 0) |
                                              (c.to_host.empty() ? 0 : POLLOUT)),
                           0});
            slots.emplace_back(&c, 0);
            fds.push_back({c.guest.get(),
                           static_cast<short>((c.to_host.empty() ? POLLIN : 0) |
                                              (c.to_guest.empty() ? 0 : POLLOUT)),
                           0});
            slots.emplace_back(&c, 1);
          }
        }
      }
      if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) return;
      if (fds[0].revents) {
        std::uint64_t v;
        (void)!::read(wake.get(), &v, sizeof v);
        continue;
      }
      if (!active) continue;
      if (fds[1].revents & POLLIN) {
        UniqueFd h(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (h && conns.size() < 1023) {  // defs::MAX_CONNECTIONS
          conns.emplace_back();
          conns.back().host = std::move(h);
        }
      }
      // Events per connection: host then guest revents.
      std::map<Conn*, std::pair<short, short>> ev;
      for (std::size_t i = 0; i < slots.size(); ++i) {
        auto& e = ev[slots[i].first];
        (slots[i].second == 0 ? e.first : e.second) = fds[i + 2].revents;
      }
      for (auto& [c, e] : ev) {
        if (c->state == Conn::State::Command) {
          if (e.first) read_command(*c);
        } else if (c->state == Conn::State::Requesting) {
          if (e.first & (POLLHUP | POLLERR) || Clock::now() >= c->deadline)
            c->dead = true;  // RST on timeout
        } else if (!pump(c->host.get(), c->guest.get(), c->to_guest, e.first, e.second) ||
                   !pump(c->guest.get(), c->host.get(), c->to_host, e.second, e.first)) {
          c->dead = true;
        }
      }
      for (auto& c : conns)
        if (c.state == Conn::State::Requesting && Clock::now() >= c.deadline) c.dead = true;
      conns.remove_if([](const Conn& c) { return c.dead; });
    }
  }

  void poke() {
    const std::uint64_t one = 1;
    (void)!::write(wake.get(), &one, sizeof one);
  }
};

std::map<std::uint32_t, std::string> HybridVsock::listeners_from_env() {
  std::map<std::uint32_t, std::string> out;
  const char* env = std::getenv("VMM_DOUBLE_VSOCK_LISTEN");
  if (!env) return out;
  std::string s = env;
  std::size_t pos = 0;
  while (pos < s.size()) {
    auto comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    const std::string item = s.substr(pos, comma - pos);
    if (auto eq = item.find('='); eq != std::string::npos)
      out[static_cast<std::uint32_t>(std::strtoul(item.substr(0, eq).c_str(), nullptr, 10))] =
          item.substr(eq + 1);
    pos = comma + 1;
  }
  return out;
}

std::unique_ptr<HybridVsock> HybridVsock::open(const std::string& socket, std::uint64_t /*cid*/,
                                               std::map<std::uint32_t, std::string> listeners,
                                               std::vector<std::string>& error_chain) {
  auto impl = std::make_unique<Impl>();
  impl->path = socket;
  impl->listeners = std::move(listeners);
  sockaddr_un a{};
  UniqueFd l(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  int e = 0;
  if (!l)
    e = errno;
  else if (!fill_address(socket, a))
    e = ENAMETOOLONG;
  else if (::bind(l.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
           ::listen(l.get(), 128) != 0)
    e = errno;
  if (e != 0) {
    error_chain = {"Cannot create virtio-vsock backend",
                   "Error binding to the host-side Unix socket", os_error(e)};
    return nullptr;
  }
  impl->listener = std::move(l);
  impl->wake.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<HybridVsock>(new HybridVsock(std::move(impl)));
}

HybridVsock::HybridVsock(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HybridVsock::~HybridVsock() {
  impl_->stop = true;
  impl_->poke();
  impl_->thread.join();
  ::unlink(impl_->path.c_str());  // Vsock::shutdown (device.rs:533)
}

void HybridVsock::set_paused(bool paused) {
  impl_->paused = paused;
  impl_->poke();
}

}  // namespace chl::vmm_double

#include "tests/kubevirt/migration_proxy.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <list>
#include <string>
#include <vector>

#include "common/unix_socket.hpp"

namespace chl::test {

namespace {

// One direction of a relay: bytes read from `from` wait in `buf` until `to` takes them.
struct Flow {
  int from = -1;
  int to = -1;
  std::string buf;
  bool eof = false;
  bool counted = false;  // source->target: counts for forwarded() and obeys the stall
};

// Two connected sockets relayed both ways (as migration-proxy.go's two io.Copy goroutines).
struct Relay {
  common::UniqueFd a;
  common::UniqueFd b;
  Flow ab;
  Flow ba;
  bool dead = false;
};

void nonblock(int fd) { (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

common::Result<std::unique_ptr<MigrationProxy>> MigrationProxy::start(
    std::filesystem::path source_socket, std::filesystem::path target_socket) {
  std::unique_ptr<MigrationProxy> p(new MigrationProxy());
  p->source_socket_ = std::move(source_socket);
  p->target_socket_ = std::move(target_socket);
  std::error_code ec;
  // StartSourceListener: os.MkdirAll of the directory, then the socket (stale one removed).
  std::filesystem::create_directories(p->source_socket_.parent_path(), ec);
  std::filesystem::remove(p->source_socket_, ec);
  auto ul = common::listen_unix(p->source_socket_);
  if (!ul) return tl::unexpected(ul.error().wrap("migration proxy: source socket"));
  p->unix_listener_ = std::move(*ul);
  p->tcp_listener_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (!p->tcp_listener_ ||
      ::bind(p->tcp_listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(p->tcp_listener_.get(), 16) != 0 ||
      ::getsockname(p->tcp_listener_.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return common::fail_errno("migration proxy: TCP listener");
  p->port_ = ntohs(addr.sin_port);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return common::fail_errno("migration proxy: pipe");
  p->wake_read_.reset(fds[0]);
  p->wake_write_.reset(fds[1]);
  nonblock(p->unix_listener_.get());
  nonblock(p->tcp_listener_.get());
  p->thread_ = std::thread([raw = p.get()] { raw->run(); });
  return p;
}

MigrationProxy::~MigrationProxy() {
  stop_ = true;
  wake();
  if (thread_.joinable()) thread_.join();
  std::error_code ec;
  std::filesystem::remove(source_socket_, ec);
}

void MigrationProxy::wake() const { (void)!::write(wake_write_.get(), "x", 1); }

void MigrationProxy::stall_after(std::uint64_t bytes) {
  stall_at_ = bytes;
  wake();
}

void MigrationProxy::release() {
  stall_at_ = UINT64_MAX;
  wake();
}

void MigrationProxy::run() {
  std::list<Relay> relays;
  auto add = [&](common::UniqueFd a, common::UniqueFd b, bool counted) {
    nonblock(a.get());
    nonblock(b.get());
    Relay& r = relays.emplace_back();
    r.a = std::move(a);
    r.b = std::move(b);
    r.ab = {r.a.get(), r.b.get(), {}, false, counted};
    r.ba = {r.b.get(), r.a.get(), {}, false, false};
  };
  while (!stop_) {
    std::vector<pollfd> fds = {{wake_read_.get(), POLLIN, 0},
                               {unix_listener_.get(), POLLIN, 0},
                               {tcp_listener_.get(), POLLIN, 0}};
    struct Slot {
      Relay* relay;
      Flow* flow;
      bool write;
    };
    std::vector<Slot> slots;
    for (auto& r : relays) {
      for (Flow* f : {&r.ab, &r.ba}) {
        const bool stalled = f->counted && forwarded_.load() >= stall_at_.load();
        if (f->buf.empty() && !f->eof && !stalled) {
          fds.push_back({f->from, POLLIN, 0});
          slots.push_back({&r, f, false});
        } else if (!f->buf.empty()) {
          fds.push_back({f->to, POLLOUT, 0});
          slots.push_back({&r, f, true});
        }
      }
    }
    if (::poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) return;
    if (fds[0].revents) {
      char drain[64];
      while (::read(wake_read_.get(), drain, sizeof drain) > 0) {
      }
    }
    if (fds[1].revents) {
      // Source pod: every connection becomes a TCP connection to the target node.
      common::UniqueFd in(::accept4(unix_listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (in) {
        common::UniqueFd out(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        addr.sin_port = htons(port_);
        if (out && ::connect(out.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0)
          add(std::move(in), std::move(out), true);
      }
    }
    if (fds[2].revents) {
      // Target node: dial the target pod's socket for this connection (closed if it cannot).
      common::UniqueFd in(::accept4(tcp_listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (in) {
        auto out = common::connect_unix(target_socket_);
        if (out) add(std::move(in), std::move(*out), false);
      }
    }
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const auto& pf = fds[3 + i];
      if (!pf.revents) continue;
      Slot& s = slots[i];
      Flow& f = *s.flow;
      if (s.write) {
        const ssize_t n = ::send(f.to, f.buf.data(), f.buf.size(), MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN) {
          s.relay->dead = true;
        } else if (n > 0) {
          if (f.counted) forwarded_ += static_cast<std::uint64_t>(n);
          f.buf.erase(0, static_cast<std::size_t>(n));
          if (f.buf.empty() && f.eof) ::shutdown(f.to, SHUT_WR);
        }
        continue;
      }
      std::size_t want = 1 << 16;
      if (f.counted && stall_at_.load() != UINT64_MAX)
        want = std::min<std::uint64_t>(want, stall_at_.load() - forwarded_.load());
      char buf[1 << 16];
      const ssize_t n = ::recv(f.from, buf, want, 0);
      if (n > 0) {
        f.buf.assign(buf, static_cast<std::size_t>(n));
      } else if (n == 0) {
        f.eof = true;
        ::shutdown(f.to, SHUT_WR);
      } else if (errno != EAGAIN) {
        s.relay->dead = true;  // a reset: migration-proxy.go closes both ends
      }
    }
    relays.remove_if([](const Relay& r) { return r.dead || (r.ab.eof && r.ba.eof); });
  }
}

}  // namespace chl::test

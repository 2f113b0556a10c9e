#include "tests/vmm_double/vhost_user.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace chl::vmm_double {
namespace {

// vhost crate 0.16, vhost_user/message.rs.
enum Request : std::uint32_t {
  kGetFeatures = 1,
  kSetOwner = 3,
  kGetProtocolFeatures = 15,
  kSetProtocolFeatures = 16,
  kGetQueueNum = 17,
};
constexpr std::uint32_t kVersion = 0x1, kVersionMask = 0x3, kReply = 0x4, kNeedReply = 0x8;
constexpr std::uint32_t kReservedBits = ~0xfu;
constexpr std::uint32_t kMaxMsgSize = 0x1000;
constexpr std::uint64_t kMaxVrings = 0x8000;  // VHOST_USER_MAX_VRINGS
// VhostUserVirtioFeatures and VhostUserProtocolFeatures bits.
constexpr std::uint64_t kProtocolFeatures = 1ull << 30, kLogAll = 1ull << 26;
constexpr std::uint64_t kMq = 0x1, kLogShmfd = 0x2, kReplyAck = 0x8, kInflightShmfd = 0x1000,
                        kConfigureMemSlots = 0x8000, kDeviceState = 0x80000;
// virtio-devices/src/vhost_user/mod.rs DEFAULT_VIRTIO_FEATURES: INDIRECT_DESC (28), EVENT_IDX
// (29), VERSION_1 (32), IN_ORDER (35), ORDER_PLATFORM (36), NOTIFICATION_DATA (38), and the two
// vhost-user bits.
constexpr std::uint64_t kDefaultVirtioFeatures = (1ull << 28) | (1ull << 29) | (1ull << 32) |
                                                 (1ull << 35) | (1ull << 36) | (1ull << 38) |
                                                 kProtocolFeatures | kLogAll;
// fs.rs: what CH offers.
constexpr std::uint64_t kAvailProtocolFeatures =
    kMq | kConfigureMemSlots | kReplyAck | kInflightShmfd | kLogShmfd | kDeviceState;
constexpr std::uint64_t kNumQueueOffset = 1, kDefaultQueueNumber = 2;  // fs.rs, mod.rs

struct Header {
  std::uint32_t request;
  std::uint32_t flags;
  std::uint32_t size;
};
static_assert(sizeof(Header) == 12);

std::string os_error(int err) {
  return std::string(std::strerror(err)) + " (os error " + std::to_string(err) + ")";
}

// The vhost crate's From<errno::Error> for vhost_user::Error, then vhost::Error's Display.
std::string socket_error(int err) {
  if (err == ECONNRESET || err == EPIPE) return "vhost-user: socket is broken: " + os_error(err);
  if (err == EACCES) return "vhost-user: can't connect to peer: " + os_error(err);
  return "vhost-user: socket error: " + os_error(err);
}

class Frontend {
 public:
  explicit Frontend(int fd) : fd_(fd) {}
  std::uint32_t hdr_flags = 0;

  // Endpoint::send_header / send_message (sendmsg, every byte or "partial message").
  std::string send(std::uint32_t request, const std::uint64_t* body) {
    unsigned char buf[sizeof(Header) + sizeof(std::uint64_t)];
    const Header h{request, hdr_flags | kVersion, body ? 8u : 0u};
    std::memcpy(buf, &h, sizeof h);
    if (body) std::memcpy(buf + sizeof h, body, 8);
    const std::size_t total = sizeof h + (body ? 8 : 0);
    std::size_t sent = 0;
    while (sent < total) {
      iovec iov{buf + sent, total - sent};
      msghdr m{};
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      const ssize_t n = ::sendmsg(fd_, &m, MSG_NOSIGNAL);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n < 0) return socket_error(errno);
      if (n == 0) break;
      sent += static_cast<std::size_t>(n);
    }
    return sent == total ? std::string() : "vhost-user: partial message";
  }

  // Frontend::recv_reply::<VhostUserU64>: header + u64, a reply to `request`.
  std::string recv_u64(std::uint32_t request, std::uint64_t& value) {
    unsigned char buf[sizeof(Header) + sizeof(std::uint64_t)];
    std::size_t got = 0;
    while (got < sizeof buf) {
      iovec iov{buf + got, sizeof buf - got};
      msghdr m{};
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      const ssize_t n = ::recvmsg(fd_, &m, MSG_CMSG_CLOEXEC);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n < 0) return socket_error(errno);
      if (n == 0) break;  // the peer hung up: what was read is all
      got += static_cast<std::size_t>(n);
    }
    if (got != sizeof buf) return "vhost-user: partial message";
    Header h{};
    std::memcpy(&h, buf, sizeof h);
    std::memcpy(&value, buf + sizeof h, 8);
    const bool valid = (h.flags & kVersionMask) == kVersion && (h.flags & kReservedBits) == 0 &&
                       h.size <= kMaxMsgSize;
    if (!valid) return "vhost-user: invalid message";
    if (!(h.flags & kReply) || h.request != request) return "vhost-user: invalid message";
    return {};
  }

 private:
  int fd_;
};

std::vector<std::string> chain(std::string what, std::string why) {
  return {"Cannot create virtio-fs device", std::move(what), std::move(why)};
}

}  // namespace

std::vector<std::string> vhost_user_fs_connect(const std::string& socket, std::uint64_t num_queues,
                                               VhostUserSession& out,
                                               std::chrono::milliseconds connect_timeout) {
  out = VhostUserSession{};
  // connect_vhost_user (client mode): try, then every 100 ms, for CONNECT_TIMEOUT (60 s). The
  // vhost crate's Frontend::connect also retries a refused connection 5 times, 100 ms apart,
  // inside each try; the effect is the same.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket.size() >= sizeof addr.sun_path)
    return chain("Connection to socket failed",
                 "vhost-user: can't connect to peer: path must be shorter than SUN_LEN");
  std::memcpy(addr.sun_path, socket.c_str(), socket.size() + 1);
  const auto start = std::chrono::steady_clock::now();
  common::UniqueFd fd;
  for (;;) {
    common::UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s)
      return chain("Connection to socket failed",
                   "vhost-user: can't connect to peer: " + os_error(errno));
    if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
      fd = std::move(s);
      break;
    }
    const int e = errno;
    if (std::chrono::steady_clock::now() - start >= connect_timeout)
      return chain("Connection to socket failed",
                   "vhost-user: can't connect to peer: " + os_error(e));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  Frontend f(fd.get());
  // negotiate_features_vhost_user.
  if (auto e = f.send(kSetOwner, nullptr); !e.empty()) return chain("Set owner failed", e);
  std::uint64_t backend_features = 0;
  if (auto e = f.send(kGetFeatures, nullptr); !e.empty()) return chain("Get features failed", e);
  if (auto e = f.recv_u64(kGetFeatures, backend_features); !e.empty())
    return chain("Get features failed", e);
  out.acked_features = kDefaultVirtioFeatures & backend_features;
  if (out.acked_features & kProtocolFeatures) {
    std::uint64_t backend_pf = 0;
    if (auto e = f.send(kGetProtocolFeatures, nullptr); !e.empty())
      return chain("Get protocol features failed", e);
    if (auto e = f.recv_u64(kGetProtocolFeatures, backend_pf); !e.empty())
      return chain("Get protocol features failed", e);
    out.acked_protocol_features = kAvailProtocolFeatures & backend_pf;
    if (auto e = f.send(kSetProtocolFeatures, &out.acked_protocol_features); !e.empty())
      return chain("Set protocol features failed", e);
  }
  if (out.acked_protocol_features & kReplyAck)
    f.hdr_flags = kNeedReply;  // set_hdr_flags(NEED_REPLY)

  // Fs::new: the queues the device needs against what the backend has.
  const std::uint64_t wanted = kNumQueueOffset + num_queues;
  out.backend_queues = kDefaultQueueNumber;
  if (out.acked_protocol_features & kMq) {
    std::uint64_t n = 0;
    if (auto e = f.send(kGetQueueNum, nullptr); !e.empty())
      return chain("Get queue max number failed", e);
    if (auto e = f.recv_u64(kGetQueueNum, n); !e.empty())
      return chain("Get queue max number failed", e);
    if (n > kMaxVrings) return chain("Get queue max number failed", "vhost-user: invalid message");
    out.backend_queues = n;
  }
  if (wanted > out.backend_queues)
    return {"Cannot create virtio-fs device", "Queue number  is not correct"};
  out.fd = std::move(fd);
  return {};
}

}  // namespace chl::vmm_double

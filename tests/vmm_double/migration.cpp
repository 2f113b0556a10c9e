#include "tests/vmm_double/migration.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/syscall.hpp"

namespace chl::vmm_double {

namespace {

using Clock = std::chrono::steady_clock;

// vm-migration/src/protocol.rs (v52): Command and Status, as u16.
enum Command : std::uint16_t {
  kInvalid = 0,
  kStart = 1,
  kConfig = 2,
  kState = 3,
  kMemory = 4,
  kComplete = 5,
  kAbandon = 6,
  kMemoryFd = 7,
  kCompletePaused = 8,
};
enum Status : std::uint16_t { kStatusOk = 1, kStatusError = 2 };
constexpr std::size_t kHeader = 16;  // Request / Response: u16, [u8; 6], u64
constexpr std::size_t kRange = 16;   // MemoryRange: u64 gpa, u64 length

const char* const kSend = "Failed to send migratable component snapshot";        // MigrateSend
const char* const kReceive = "Failed to receive migratable component snapshot";  // MigrateReceive
const char* const kSocket = "Socket error";                                      // MigrateSocket
// Rust's read_exact at end of file (io::ErrorKind::UnexpectedEof).
const char* const kEof = "failed to fill whole buffer";

std::string os_error(int err) {
  return std::string(std::strerror(err)) + " (os error " + std::to_string(err) + ")";
}

void put_u16(std::string& s, std::uint16_t v) {
  s.push_back(static_cast<char>(v & 0xff));
  s.push_back(static_cast<char>(v >> 8));
}
void put_u64(std::string& s, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint64_t get_u64(const std::string& s, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}
std::uint16_t get_u16(const std::string& s, std::size_t at) {
  return static_cast<std::uint16_t>(static_cast<unsigned char>(s[at]) |
                                    (static_cast<unsigned char>(s[at + 1]) << 8));
}
std::string header(std::uint16_t code, std::uint64_t length) {
  std::string h;
  put_u16(h, code);
  h.append(6, '\0');
  put_u64(h, length);
  return h;
}

bool set_nonblocking(int fd) {
  const int fl = ::fcntl(fd, F_GETFL);
  return fl >= 0 && ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

// "tcp:<host>:<port>" -> a connected (blocking connect, as TcpStream::connect) socket.
common::UniqueFd tcp_socket(const std::string& address, bool listen, int& err) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    err = EINVAL;
    return {};
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 1 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), address.substr(colon + 1).c_str(), &hints, &res) != 0 || !res) {
    err = EINVAL;
    return {};
  }
  common::UniqueFd s(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int rc = -1;
  if (s) {
    if (listen) {
      const int one = 1;
      ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      rc = ::bind(s.get(), res->ai_addr, res->ai_addrlen);
      if (rc == 0) rc = ::listen(s.get(), 128);
    } else {
      rc = common::retry_eintr([&] { return ::connect(s.get(), res->ai_addr, res->ai_addrlen); });
    }
  }
  err = errno;
  ::freeaddrinfo(res);
  if (rc != 0) return {};
  return s;
}

common::UniqueFd unix_socket(const std::string& path, bool listen, int& err) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    err = ENAMETOOLONG;
    return {};
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  common::UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) {
    err = errno;
    return {};
  }
  auto* sa = reinterpret_cast<sockaddr*>(&addr);
  // UnixListener::bind: bind(2) then listen(2) with backlog 128; it fails on an existing path.
  const int rc = listen ? (::bind(s.get(), sa, sizeof addr) == 0 ? ::listen(s.get(), 128) : -1)
                        : common::retry_eintr([&] { return ::connect(s.get(), sa, sizeof addr); });
  if (rc != 0) {
    err = errno;
    return {};
  }
  return s;
}

}  // namespace

Migration::Migration(MigrationVm& vm, Role role)
    : vm_(vm), role_(role), step_(role == Role::Send ? Step::Start : Step::Accepting) {}

Migration::~Migration() = default;

std::unique_ptr<Migration> Migration::send(MigrationVm& vm, const SendParams& params,
                                           std::vector<std::string>& chain) {
  // migration_transport.rs send_migration_socket: tcp:<addr>, else unix:<path>.
  const std::string& url = params.destination_url;
  common::UniqueFd s;
  int err = 0;
  if (url.rfind("tcp:", 0) == 0) {
    s = tcp_socket(url.substr(4), false, err);
    if (!s) {
      chain = {kSend, "Error connecting to TCP socket: " + os_error(err)};
      return nullptr;
    }
  } else if (url.rfind("unix:", 0) == 0) {
    s = unix_socket(url.substr(5), false, err);
    if (!s) {
      chain = {kSend, "Error connecting to UNIX socket: " + os_error(err)};
      return nullptr;
    }
  } else {
    chain = {kSend, "Could not extract path from URL: " + url};
    return nullptr;
  }
  if (params.local) {
    // Local migration passes the guest memory's fds (SCM_RIGHTS); the double has no guest memory.
    chain = {kSend, "vmm-double: local migration (guest memory fds) is not modelled"};
    return nullptr;
  }
  set_nonblocking(s.get());
  std::unique_ptr<Migration> m(new Migration(vm, Role::Send));
  m->params_ = params;
  m->sock_ = std::move(s);
  m->begin_ = Clock::now();
  m->step_ = Step::Start;
  m->queue(header(kStart, 0));
  return m;
}

std::unique_ptr<Migration> Migration::receive(MigrationVm& vm, const std::string& url,
                                              std::vector<std::string>& chain) {
  // receive_migration_listener: TcpListener::bind / UnixListener::bind.
  common::UniqueFd l;
  int err = 0;
  std::string path;
  if (url.rfind("tcp:", 0) == 0) {
    l = tcp_socket(url.substr(4), true, err);
    if (!l) {
      chain = {kReceive, "Error binding to TCP socket", os_error(err)};
      return nullptr;
    }
  } else if (url.rfind("unix:", 0) == 0) {
    path = url.substr(5);
    l = unix_socket(path, true, err);
    if (!l) {
      chain = {kReceive, "Error binding to UNIX socket", os_error(err)};
      return nullptr;
    }
  } else {
    chain = {kReceive, "Could not extract path from URL: " + url};
    return nullptr;
  }
  set_nonblocking(l.get());
  std::unique_ptr<Migration> m(new Migration(vm, Role::Receive));
  m->listener_ = std::move(l);
  m->listen_path_ = path;  // UnixListener's drop leaves the file: so does the double
  return m;
}

pollfd Migration::poll_entry() const {
  if (finished_) return {-1, 0, 0};
  if (step_ == Step::Accepting) return {listener_.get(), POLLIN, 0};
  short ev = POLLIN;
  if (!out_.empty()) ev |= POLLOUT;
  return {sock_.get(), ev, 0};
}

bool Migration::flush() {
  static const std::string kZeros(1 << 20, '\0');
  while (!out_.empty()) {
    auto& seg = out_.front();
    const char* data = nullptr;
    std::size_t len = 0;
    if (seg.zeros > 0) {
      data = kZeros.data();
      len = static_cast<std::size_t>(std::min<std::uint64_t>(seg.zeros, kZeros.size()));
    } else {
      data = seg.bytes.data();
      len = seg.bytes.size();
    }
    if (len == 0) {
      out_.pop_front();
      continue;
    }
    const ssize_t n = ::send(sock_.get(), data, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return true;
      const int e = errno;
      if (seg.memory) {
        // send_memory_ranges: write_volatile_to's error, anyhow!("… {e}").
        sender_fail({kSend, "Error transferring memory to socket: " + os_error(e)});
      } else if (role_ == Role::Send) {
        sender_fail({kSocket, os_error(e)});
      } else {
        receiver_end({kSocket, os_error(e)});
      }
      return false;
    }
    transfer_bytes_ += static_cast<std::uint64_t>(n);
    if (seg.zeros > 0) {
      seg.zeros -= static_cast<std::uint64_t>(n);
      if (seg.zeros == 0) out_.pop_front();
    } else {
      seg.bytes.erase(0, static_cast<std::size_t>(n));
      if (seg.bytes.empty()) out_.pop_front();
    }
  }
  return true;
}

std::vector<std::string> Migration::fill() {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::recv(sock_.get(), buf, sizeof buf, 0);
    if (n > 0) {
      in_.append(buf, static_cast<std::size_t>(n));
      if (in_.size() > (1 << 20)) return {};  // let the caller consume
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return {};
    return {kSocket, n == 0 ? std::string(kEof) : os_error(errno)};
  }
}

void Migration::ready(short revents) {
  if (finished_) return;
  if (step_ == Step::Accepting) {
    receiver_accept();
    return;
  }
  if ((revents & POLLOUT) && !flush()) return;
  if (revents & (POLLIN | POLLHUP | POLLERR)) {
    // What arrived before a hang-up is handled first (the answer to Complete, then EOF).
    const auto err = fill();
    if (role_ == Role::Send) {
      while (!finished_ && in_.size() >= kHeader) sender_answer();
      if (!err.empty()) sender_fail(err);
    } else {
      receiver_input();
      if (!err.empty()) receiver_end(err);
    }
  }
  if (!finished_ && !out_.empty()) (void)flush();
}

// ---------------------------------------------------------------------------------------------
// Sender (vmm/src/lib.rs send_migration, do_memory_migration, is_precopy_converged)

void Migration::send_request(std::uint16_t command, const std::string& payload) {
  queue(header(command, payload.size()) + payload);
}

void Migration::send_memory(std::uint64_t bytes) {
  // One range table for the whole payload (one connection: send_memory_ranges on the main
  // socket, no chunking). The double's guest RAM is one range at gpa 0.
  std::string table;
  put_u64(table, 0);
  put_u64(table, bytes);
  queue(header(kMemory, table.size()) + table);
  queue_zeros(bytes);
  transfer_begin_ = Clock::now();
  transfer_bytes_ = 0;
}

void Migration::sender_answer() {
  const std::uint16_t status = get_u16(in_, 0);
  in_.erase(0, kHeader);
  if (step_ == Step::Abandoning) {
    sender_fail({kSend, abandon_error_});
    return;
  }
  if (status != kStatusOk) {
    // Response::ok_or_abandon: Abandon, read its answer, then the step's error.
    static const std::map<Step, const char*> kErrors = {
        {Step::Start, "Error starting migration"},
        {Step::Config, "Error during config migration"},
        {Step::Memory, "Error during dirty memory migration"},
        {Step::FinalMemory, "Error during dirty memory migration"},
        {Step::State, "Error during state migration"},
        {Step::Complete, "Error completing migration"}};
    const auto it = kErrors.find(step_);
    abandon_error_ = it != kErrors.end() ? it->second : "Error starting migration";
    step_ = Step::Abandoning;
    queue(header(kAbandon, 0));
    return;
  }
  sender_next();
}

void Migration::sender_next() {
  switch (step_) {
    case Step::Start:
      step_ = Step::Config;
      send_request(kConfig, vm_.migration_config().dump());
      return;
    case Step::Config:
      // vm.start_migration(), start_dirty_log(), then the iterations.
      iteration_ = 0;
      sender_memory_iteration();
      return;
    case Step::Memory: {
      const auto ms = std::chrono::duration<double, std::milli>(Clock::now() - transfer_begin_);
      if (ms.count() > 0) bytes_per_ms_ = static_cast<double>(transfer_bytes_) / ms.count();
      vm_.migration_event("migration-memory-iteration", {{"id", std::to_string(iteration_)}});
      ++iteration_;
      sender_memory_iteration();
      return;
    }
    case Step::FinalMemory:
      // release_disk_locks, snapshot (events snapshotting/snapshotted), send_state.
      step_ = Step::State;
      send_request(kState, vm_.guest_snapshot().dump());
      return;
    case Step::State:
      step_ = Step::Complete;
      queue(header(params_.running ? kComplete : kCompletePaused, 0));
      return;
    case Step::Complete:
      finished_ = true;
      sock_.reset();
      vm_.send_finished({});
      return;
    default:
      return;
  }
}

void Migration::sender_memory_iteration() {
  const std::uint64_t table = iteration_ == 0 ? vm_.guest_ram() : vm_.dirty_bytes();
  // is_precopy_converged: nothing to send; the estimated downtime (this table at the last
  // iteration's rate) within downtime_ms; or the timeout (Cancel fails, Ignore goes on).
  bool converged = table == 0;
  if (!converged && iteration_ > 0 && bytes_per_ms_ > 0 &&
      static_cast<double>(table) / bytes_per_ms_ <= static_cast<double>(params_.downtime_ms))
    converged = true;
  if (!converged && Clock::now() - begin_ >= std::chrono::seconds(params_.timeout_s)) {
    if (!params_.timeout_ignore) {
      sender_fail({kSend, "Precopy: Timeout reached: " + std::to_string(params_.timeout_s) +
                              "s: migration didn't converge in time"});
      return;
    }
    converged = true;
  }
  if (!converged) {
    step_ = Step::Memory;
    send_memory(table);
    return;
  }
  // Pause (unless paused), the final dirty log plus what precopy stopped at.
  vm_.pause_for_migration();
  const std::uint64_t final_bytes = vm_.dirty_bytes() + table;
  step_ = Step::FinalMemory;
  if (final_bytes == 0) {
    sender_next();  // send_memory_ranges skips an empty table
    return;
  }
  send_memory(final_bytes);
}

void Migration::sender_fail(std::vector<std::string> chain) {
  if (finished_) return;
  finished_ = true;
  out_.clear();
  sock_.reset();
  vm_.send_finished(chain);
}

// ---------------------------------------------------------------------------------------------
// Receiver (vmm/src/lib.rs vm_receive_migration, vm_receive_migration_step)

void Migration::receiver_accept() {
  common::UniqueFd s(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (!s) {
    if (errno == EAGAIN || errno == EINTR) return;
    receiver_end({kReceive, "Failed to accept Unix migration connection", os_error(errno)});
    return;
  }
  sock_ = std::move(s);
  step_ = Step::Header;
  vm_.migration_event("migration-receive-started");
}

void Migration::receiver_input() {
  for (;;) {
    if (finished_) return;
    if (step_ == Step::Header) {
      if (in_.size() < kHeader) return;
      command_ = get_u16(in_, 0);
      length_ = get_u64(in_, 8);
      in_.erase(0, kHeader);
      const bool payload = command_ == kConfig || command_ == kState ||
                           (command_ == kMemory && recv_state_ == RecvState::Configured);
      if (!payload) {
        receiver_step(command_, {});
        continue;
      }
      step_ = Step::Payload;
    }
    if (step_ == Step::Payload) {
      if (in_.size() < length_) return;
      std::string payload = in_.substr(0, static_cast<std::size_t>(length_));
      in_.erase(0, static_cast<std::size_t>(length_));
      if (command_ == kMemory) {
        // The range table, then that many bytes of guest memory (zeros: dropped).
        memory_left_ = 0;
        for (std::size_t at = 0; at + kRange <= payload.size(); at += kRange)
          memory_left_ += get_u64(payload, at + 8);
        step_ = Step::MemoryData;
      } else {
        step_ = Step::Header;
        receiver_step(command_, payload);
        continue;
      }
    }
    if (step_ == Step::MemoryData) {
      const auto take = std::min<std::uint64_t>(memory_left_, in_.size());
      in_.erase(0, static_cast<std::size_t>(take));
      memory_left_ -= take;
      if (memory_left_ > 0) return;
      step_ = Step::Header;
      receiver_respond(true);
      continue;
    }
    return;
  }
}

void Migration::receiver_step(std::uint16_t command, const std::string& payload) {
  using S = RecvState;
  std::vector<std::string> err;
  const std::vector<std::string> invalid = {kReceive, "Can't handle command in current state"};
  if (command == kAbandon) {
    recv_state_ = S::Aborted;
    receiver_respond(true);
    return;
  }
  switch (recv_state_) {
    case S::Established:
      if (command == kStart) {
        recv_state_ = S::Started;
      } else {
        err = invalid;
      }
      break;
    case S::Started:
      if (command == kConfig) {
        const auto j = Json::parse(payload, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
          err = {kReceive, "Error deserialising config: expected an object"};
        } else {
          err = vm_.receive_config(j);
        }
        if (err.empty()) recv_state_ = S::Configured;
      } else if (command == kMemoryFd) {
        err = {kReceive, "vmm-double: local migration (guest memory fds) is not modelled"};
      } else {
        err = invalid;
      }
      break;
    case S::Configured:
      if (command == kState) {
        const auto j = Json::parse(payload, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
          err = {kReceive, "Error deserialising snapshot: expected an object"};
        } else {
          err = vm_.receive_state(j);
        }
        if (err.empty()) recv_state_ = S::StateReceived;
      } else {
        err = invalid;
      }
      break;
    case S::StateReceived:
      if (command == kComplete || command == kCompletePaused) {
        err = vm_.receive_complete(command == kComplete);
        if (err.empty()) recv_state_ = S::Completed;
      } else {
        err = invalid;
      }
      break;
    default:
      err = invalid;
      break;
  }
  if (!err.empty()) recv_state_ = S::Aborted;  // "Migration aborted as migration command … failed"
  receiver_respond(err.empty());
}

void Migration::receiver_respond(bool ok) {
  queue(header(ok ? kStatusOk : kStatusError, 0));
  if (!flush()) return;
  if (recv_state_ == RecvState::Completed) {
    vm_.migration_event("migration-receive-finished");
    receiver_end({});
  } else if (recv_state_ == RecvState::Aborted) {
    vm_.migration_event("migration-receive-failed");
    finished_ = true;
    sock_.reset();
    listener_.reset();
    vm_.receive_finished(true, {});
  }
}

void Migration::receiver_end(std::vector<std::string> chain) {
  if (finished_) return;
  finished_ = true;
  out_.clear();
  sock_.reset();
  listener_.reset();
  vm_.receive_finished(false, chain);
}

}  // namespace chl::vmm_double

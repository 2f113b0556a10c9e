#pragma once
// The agent client on a loop thread, its connections made from socketpairs whose other ends the
// test plays the agent on (blocking reads with a deadline), or a real qemu-ga started on the host.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "common/unique_fd.hpp"
#include "guest_agent/agent_client.hpp"

namespace chl::test {

using Json = nlohmann::json;
using namespace std::chrono_literals;

// Runs an io_context on its own thread; `on_loop` runs a function there and waits for it.
class LoopThread {
 public:
  LoopThread() : guard_(io.get_executor()), thread_([this] { io.run(); }) {}
  ~LoopThread() {
    guard_.reset();
    io.stop();
    thread_.join();
  }
  template <typename F>
  auto on_loop(F&& f) {
    std::packaged_task<decltype(f())()> task(std::forward<F>(f));
    auto fut = task.get_future();
    boost::asio::post(io, [&task] { task(); });
    return fut.get();
  }
  boost::asio::io_context io;

 private:
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::thread thread_;
};

// Each connection attempt makes a socketpair: the client gets one end, the test the other.
class PairConnector final : public guest_agent::Connector {
 public:
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<common::UniqueFd> peers;
    bool refuse = false;  // attempts fail (nothing to connect to)
    int attempts = 0;
  };
  explicit PairConnector(std::shared_ptr<Shared> s) : s_(std::move(s)) {}
  void async_connect(boost::asio::io_context& io, Done done) override {
    int sv[2];
    bool refuse;
    {
      std::lock_guard l(s_->mu);
      ++s_->attempts;
      refuse = s_->refuse;
    }
    if (refuse || ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      boost::asio::post(io,
                        [done] { done(common::fail(std::errc::connection_refused, "refused")); });
      return;
    }
    guest_agent::Socket sock(io, boost::asio::local::stream_protocol(), sv[0]);
    {
      std::lock_guard l(s_->mu);
      s_->peers.emplace_back(sv[1]);
      s_->cv.notify_all();
    }
    boost::asio::post(
        io, [done, sock = std::make_shared<guest_agent::Socket>(std::move(sock))]() mutable {
          done(guest_agent::Connection{std::move(*sock), {}});
        });
  }
  void cancel() override {}
  std::string describe() const override { return "socketpair"; }

 private:
  std::shared_ptr<Shared> s_;
};

// The test's end of one connection: the agent's side.
class FakeAgent {
 public:
  explicit FakeAgent(common::UniqueFd fd) : fd_(std::move(fd)) {}
  // The next request line (without "\n"); a leading 0xFF is kept. nullopt on timeout or EOF.
  std::optional<std::string> request(std::chrono::milliseconds timeout = 5000ms) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char b[4096];
      const ssize_t n = ::read(fd_.get(), b, sizeof b);
      if (n <= 0) return std::nullopt;
      buf_.append(b, static_cast<std::size_t>(n));
    }
  }
  // A request parsed (the 0xFF before a sync stripped).
  std::optional<Json> command(std::chrono::milliseconds timeout = 5000ms) {
    auto line = request(timeout);
    if (!line) return std::nullopt;
    if (!line->empty() && static_cast<unsigned char>((*line)[0]) == 0xFF) line->erase(0, 1);
    Json j = Json::parse(*line, nullptr, false);
    if (j.is_discarded()) return Json{{"unparsed", *line}};
    return j;
  }
  // Answer the next guest-sync-delimited as qemu-ga does (0xFF, then the id). False if the next
  // request is something else.
  bool answer_sync(const std::string& before = {}) {
    auto c = command();
    if (!c || c->value("execute", "") != "guest-sync-delimited") return false;
    return send(before + "\xff{\"return\": " + (*c)["arguments"]["id"].dump() + "}\n");
  }
  bool send(const std::string& bytes) {
    std::size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::write(fd_.get(), bytes.data() + off, bytes.size() - off);
      if (n <= 0) return false;
      off += static_cast<std::size_t>(n);
    }
    return true;
  }
  int fd() const { return fd_.get(); }
  void close() { fd_.reset(); }

 private:
  common::UniqueFd fd_;
  std::string buf_;
};

}  // namespace chl::test

#pragma once
// A tiny scripted HTTP server on a Unix socket, for the client's error paths that must not
// depend on the VMM double's fault injection: hang, garbage, odd framing, fd passing.
// One thread; handles connections one after another; `handler` sees the raw request and the
// fds that came with it and returns what to write back (nullopt: never answer, keep the
// connection open until the server stops).
#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.hpp"

namespace chl::test {

struct FakeRequest {
  std::string raw;  // request line + headers + body, as received
  std::string body;
  std::vector<common::UniqueFd> fds;  // received with SCM_RIGHTS
};

class FakeServer {
 public:
  using Handler = std::function<std::optional<std::string>(FakeRequest&)>;
  FakeServer(const std::string& path, Handler handler);
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;
  ~FakeServer();

  // How many requests were handled.
  int requests() const { return requests_.load(); }
  // True if another connection was already waiting while a request was being handled
  // (i.e. the client had two requests in flight on this socket).
  bool saw_concurrent_connection() const { return concurrent_.load(); }

 private:
  void run();
  void serve(int conn);

  common::UniqueFd listen_fd_;
  common::UniqueFd stop_r_, stop_w_;
  Handler handler_;
  std::atomic<int> requests_{0};
  std::atomic<bool> concurrent_{false};
  std::thread thread_;
};

// A full HTTP/1.1 response with a Content-Length.
std::string http_response(int status, const std::string& reason, const std::string& body);

}  // namespace chl::test

// kubevirt_bench's "lite" child: the launcher's transport as shipped (CmdServer and NotifyClient
// over HTTP/2 + protobuf-lite, chl_kubevirt_rpc), in a binary that links no gRPC library.
//   kubevirt_serve SHARE_DIR   (serves until its stdin closes)
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "bench/kubevirt/bench_handler.hpp"
#include "common/log.hpp"
#include "kubevirt/cmd_server.hpp"
#include "kubevirt/notify_client.hpp"

namespace chl::bench {
void wait_for_stdin_eof() {
  char buf[64];
  while (::read(STDIN_FILENO, buf, sizeof buf) > 0) {
  }
}
}  // namespace chl::bench

int main(int argc, char** argv) {
  using namespace chl::kubevirt;
  if (argc != 2) {
    std::fprintf(stderr, "usage: kubevirt_serve SHARE_DIR\n");
    return 2;
  }
  chl::common::log::logger()->set_level(spdlog::level::warn);
  const std::filesystem::path share = argv[1];
  NotifyClientOptions o;
  o.socket_path = (share / "domain-notify-pipe.sock").string();
  NotifyClient notify(o);
  chl::bench::BenchHandler handler([&](std::string json) {
    notify.send_domain_event(std::move(json), DomainEventType::Modified);
  });
  auto server = CmdServer::start({.share_dir = share}, handler);
  if (!server) {
    std::fprintf(stderr, "kubevirt_serve: %s\n", server.error().message().c_str());
    return 1;
  }
  chl::bench::wait_for_stdin_eof();
  notify.flush(std::chrono::steady_clock::now() + std::chrono::seconds(1));
  return 0;
}

// chl-webhook: the mutating admission webhook that lets a VMI labelled
// `ch-launcher/hypervisor: cloud-hypervisor` run on Cloud Hypervisor through ch-launcher's bundle,
// in an unchanged KubeVirt (docs/deploy.md, "Mixed clusters: Cloud Hypervisor per VMI"). This file
// only parses flags and runs the server; exceptions are caught here and nowhere else.
#include <boost/asio/signal_set.hpp>
#include <csignal>
#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include "common/log.hpp"
#include "webhook/server.hpp"

namespace {

const char* const kUsage =
    "usage: chl-webhook --cert FILE --key FILE --bundle-image IMAGE [options]\n"
    "  --listen HOST:PORT        where to serve HTTPS (default 0.0.0.0:8443)\n"
    "  --cert FILE, --key FILE   PEM serving certificate (chain) and key; re-read when they "
    "change\n"
    "  --bundle-image IMAGE      the ch-launcher image the init container copies the bundle from\n"
    "  --max-connections N       open connections at most (default 256)\n"
    "  --handshake-timeout S     seconds for a TLS handshake (default 10)\n"
    "  --request-timeout S       seconds from a request's first byte to its answer (default 10)\n"
    "  --idle-timeout S          seconds a keep-alive connection may wait (default 60)\n"
    "  --log-level L             trace|debug|info|warning|error (default info)\n";

int usage_error(const std::string& why) {
  std::fprintf(stderr, "chl-webhook: %s\n%s", why.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) try {
  std::map<std::string, std::string> flags = {{"--listen", "0.0.0.0:8443"},
                                              {"--max-connections", "256"},
                                              {"--handshake-timeout", "10"},
                                              {"--request-timeout", "10"},
                                              {"--idle-timeout", "60"},
                                              {"--log-level", "info"},
                                              {"--cert", ""},
                                              {"--key", ""},
                                              {"--bundle-image", ""}};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::string value;
    const auto eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg.resize(eq);
    }
    if (flags.count(arg) == 0) return usage_error("unknown option " + arg);
    if (eq == std::string::npos) {
      if (i + 1 >= argc) return usage_error(arg + " needs a value");
      value = argv[++i];
    }
    flags[arg] = value;
  }
  for (const char* required : {"--cert", "--key", "--bundle-image"})
    if (flags[required].empty()) return usage_error(std::string(required) + " is required");
  spdlog::level::level_enum level{};
  if (!chl::common::log::parse_level(flags["--log-level"], level))
    return usage_error("unknown --log-level " + flags["--log-level"]);
  chl::common::log::init("chl-webhook", level);

  auto seconds = [&](const char* name) -> long {
    const std::string& v = flags[name];
    std::size_t used = 0;
    const long n = std::stol(v, &used);
    if (used != v.size() || n <= 0)
      throw std::invalid_argument(std::string(name) + " must be a positive number");
    return n;
  };
  chl::webhook::ServerOptions options;
  options.patch.bundle_image = flags["--bundle-image"];
  options.max_connections = static_cast<std::size_t>(seconds("--max-connections"));
  options.handshake_timeout = std::chrono::seconds(seconds("--handshake-timeout"));
  options.request_timeout = std::chrono::seconds(seconds("--request-timeout"));
  options.idle_timeout = std::chrono::seconds(seconds("--idle-timeout"));
  auto at = chl::webhook::parse_listen_address(flags["--listen"]);
  if (!at) return usage_error("--listen: " + at.error().message());

  chl::webhook::TlsFiles tls(flags["--cert"], flags["--key"]);
  if (auto loaded = tls.load(); !loaded) {
    CHL_LOG_ERROR("loading the serving certificate: {}", loaded.error().message());
    return 1;
  }
  boost::asio::io_context io;
  chl::webhook::Server server(io, tls, options);
  if (auto l = server.listen(*at); !l) {
    CHL_LOG_ERROR("listening on {}: {}", flags["--listen"], l.error().message());
    return 1;
  }
  server.start();
  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](boost::system::error_code ec, int sig) {
    if (ec) return;
    CHL_LOG_INFO("signal {}: stopping", sig);
    server.stop();
    io.stop();
  });
  std::signal(SIGPIPE, SIG_IGN);
  CHL_LOG_INFO("serving admission reviews on {} (port {}), bundle image {}", flags["--listen"],
               server.port(), options.patch.bundle_image);
  io.run();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "chl-webhook: %s\n", e.what());
  return 2;
}

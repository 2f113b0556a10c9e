#include "webhook/tls_files.hpp"

#include <openssl/ssl.h>

#include <fstream>
#include <sstream>

#include "common/log.hpp"

namespace chl::webhook {
namespace ssl = boost::asio::ssl;
using common::Result;

namespace {

Result<std::string> read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return common::fail_errno("reading " + path);
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) return common::fail_errno("reading " + path);
  return s.str();
}

}  // namespace

TlsFiles::TlsFiles(std::string cert_path, std::string key_path)
    : cert_path_(std::move(cert_path)), key_path_(std::move(key_path)) {}

Result<TlsFiles::Pair> TlsFiles::identify() const {
  Pair p;
  for (auto [path, id] : {std::pair{&cert_path_, &p.cert}, std::pair{&key_path_, &p.key}}) {
    struct stat st {};
    if (::stat(path->c_str(), &st) != 0) return common::fail_errno("stat " + *path);
    *id = Identity{st.st_dev, st.st_ino, st.st_size,
                   static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec};
  }
  return p;
}

Result<std::shared_ptr<ssl::context>> TlsFiles::build() const {
  CHL_TRY(const std::string cert, read_whole(cert_path_));
  CHL_TRY(const std::string key, read_whole(key_path_));
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX* native = ctx->native_handle();
  // TLS 1.2 and 1.3 only (the API server's webhook client speaks both).
  if (SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1)
    return common::fail(std::errc::protocol_error, "setting the minimum TLS version");
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_compression |
                   ssl::context::single_dh_use);
  boost::system::error_code ec;
  ctx->use_certificate_chain(boost::asio::buffer(cert), ec);
  if (ec)
    return common::fail(std::errc::invalid_argument,
                        "certificate " + cert_path_ + ": " + ec.message());
  ctx->use_private_key(boost::asio::buffer(key), ssl::context::pem, ec);
  if (ec)
    return common::fail(std::errc::invalid_argument,
                        "private key " + key_path_ + ": " + ec.message());
  if (SSL_CTX_check_private_key(native) != 1)
    return common::fail(std::errc::invalid_argument,
                        "private key " + key_path_ + " does not match certificate " + cert_path_);
  return ctx;
}

common::Status TlsFiles::load() {
  CHL_TRY(const Pair id, identify());
  CHL_TRY(auto ctx, build());
  context_ = std::move(ctx);
  loaded_ = id;
  ++generation_;
  return {};
}

std::shared_ptr<ssl::context> TlsFiles::current() {
  auto id = identify();
  if (!id) {
    // Mid-swap, or the Secret is gone: serve with what we have.
    CHL_LOG_DEBUG("TLS files: {}; keeping the loaded certificate", id.error().message());
    return context_;
  }
  if (*id == loaded_ || *id == last_failed_) return context_;
  auto ctx = build();
  if (!ctx) {
    last_failed_ = *id;
    CHL_LOG_WARN("TLS files changed but cannot be loaded: {}; keeping the previous certificate",
                 ctx.error().message());
    return context_;
  }
  context_ = std::move(*ctx);
  loaded_ = *id;
  ++generation_;
  CHL_LOG_INFO("TLS files changed: certificate {} reloaded (generation {})", cert_path_,
               generation_);
  return context_;
}

}  // namespace chl::webhook

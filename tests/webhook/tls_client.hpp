#pragma once
// A TLS client for the webhook's tests and bench, on OpenSSL directly (blocking, with socket
// timeouts so a test never hangs): it verifies the server's certificate against a CA file and a
// host name, as the API server does with the caBundle and the Service's DNS name, and speaks
// HTTP/1.1 with keep-alive over one connection.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>

namespace chl::test::webhook {

// A TCP connection to 127.0.0.1:port with 10 s send/receive timeouts; -1 on failure.
inline int connect_loopback(unsigned short port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

struct HttpReply {
  int status = 0;
  std::string head;
  std::string body;
};

class TlsClient {
 public:
  TlsClient(std::string ca_file, std::string host)
      : ca_file_(std::move(ca_file)), host_(std::move(host)) {}
  TlsClient(const TlsClient&) = delete;
  TlsClient& operator=(const TlsClient&) = delete;
  ~TlsClient() { disconnect(); }

  // Connect and handshake, verifying the certificate; false with error() set when it fails.
  bool connect(unsigned short port) {
    disconnect();
    ctx_ = SSL_CTX_new(TLS_client_method());
    if (ctx_ == nullptr) return failed("SSL_CTX_new");
    if (SSL_CTX_load_verify_locations(ctx_, ca_file_.c_str(), nullptr) != 1)
      return failed("loading " + ca_file_);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    fd_ = connect_loopback(port);
    if (fd_ < 0) return failed("connect");
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    SSL_set_tlsext_host_name(ssl_, host_.c_str());
    SSL_set1_host(ssl_, host_.c_str());
    if (SSL_connect(ssl_) != 1) {
      const long v = SSL_get_verify_result(ssl_);
      return failed(std::string("handshake: ") +
                    (v != X509_V_OK ? X509_verify_cert_error_string(v) : "failed"));
    }
    return true;
  }

  // The subject CN of the certificate the server presented.
  std::string peer_common_name() const {
    X509* cert = ssl_ != nullptr ? SSL_get1_peer_certificate(ssl_) : nullptr;
    if (cert == nullptr) return {};
    char cn[256] = {};
    X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
    X509_free(cert);
    return cn;
  }

  bool send_raw(const std::string& bytes) {
    return ssl_ != nullptr && SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size())) ==
                                  static_cast<int>(bytes.size());
  }

  // One request (a full HTTP/1.1 message) and its reply; nullopt when the connection ends first.
  std::optional<HttpReply> request(const std::string& method, const std::string& path,
                                   const std::string& body, bool keep_alive = true) {
    std::string req =
        method + " " + path + " HTTP/1.1\r\nHost: " + host_ +
        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n" + (keep_alive ? "" : "Connection: close\r\n") + "\r\n" + body;
    if (!send_raw(req)) return std::nullopt;
    return read_reply();
  }

  std::optional<HttpReply> read_reply() {
    std::size_t head_end;
    while ((head_end = in_.find("\r\n\r\n")) == std::string::npos)
      if (!fill()) return std::nullopt;
    HttpReply r;
    r.head = in_.substr(0, head_end);
    r.status = std::atoi(r.head.substr(9, 3).c_str());
    std::size_t length = 0;
    if (auto p = r.head.find("Content-Length: "); p != std::string::npos)
      length = std::stoul(r.head.substr(p + 16));
    while (in_.size() < head_end + 4 + length)
      if (!fill()) return std::nullopt;
    r.body = in_.substr(head_end + 4, length);
    in_.erase(0, head_end + 4 + length);
    return r;
  }

  // True when the server has closed the connection (a read gets end of file or an error).
  bool closed_by_peer() {
    char b[512];
    const int n = SSL_read(ssl_, b, sizeof b);
    return n <= 0;
  }

  void disconnect() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (fd_ >= 0) ::close(fd_);
    if (ctx_ != nullptr) SSL_CTX_free(ctx_);
    ssl_ = nullptr;
    ctx_ = nullptr;
    fd_ = -1;
    in_.clear();
  }

  [[nodiscard]] const std::string& error() const { return error_; }

 private:
  bool fill() {
    char b[16384];
    const int n = SSL_read(ssl_, b, sizeof b);
    if (n <= 0) return false;
    in_.append(b, static_cast<std::size_t>(n));
    return true;
  }
  bool failed(std::string why) {
    error_ = std::move(why);
    return false;
  }

  std::string ca_file_, host_;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  std::string in_;
  std::string error_;
};

}  // namespace chl::test::webhook

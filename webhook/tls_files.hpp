#pragma once
// The serving certificate and key, read from files and read again when they change: Kubernetes
// updates a mounted Secret by writing a new timestamped directory and swapping the `..data`
// symlink, so the paths stay and what they resolve to changes. Every new connection asks
// current(), which stats both paths (following the links) and, when either file is another
// one (device, inode, size or mtime), builds a new context from them; a connection keeps the
// context it started with. A reload that fails (a half-written pair, a key that does not match)
// keeps the last good context and is tried again at the next connection once the files change.
#include <sys/stat.h>

#include <boost/asio/ssl/context.hpp>
#include <memory>
#include <string>

#include "common/error.hpp"

namespace chl::webhook {

class TlsFiles {
 public:
  TlsFiles(std::string cert_path, std::string key_path);
  // The first load (start-up): an error names the file and what OpenSSL said.
  common::Status load();
  // The context for a new connection (reloaded first when the files changed); never null after
  // a successful load().
  std::shared_ptr<boost::asio::ssl::context> current();
  // How many contexts have been built (1 after load(); +1 per reload).
  [[nodiscard]] unsigned generation() const { return generation_; }

 private:
  struct Identity {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    long long mtime_ns = 0;
    bool operator==(const Identity&) const = default;
  };
  struct Pair {
    Identity cert, key;
    bool operator==(const Pair&) const = default;
  };
  common::Result<Pair> identify() const;
  common::Result<std::shared_ptr<boost::asio::ssl::context>> build() const;

  std::string cert_path_, key_path_;
  std::shared_ptr<boost::asio::ssl::context> context_;
  Pair loaded_{};
  Pair last_failed_{};
  unsigned generation_ = 0;
};

}  // namespace chl::webhook

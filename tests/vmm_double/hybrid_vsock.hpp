#pragma once
// The double's virtio-vsock device as Cloud Hypervisor v52 runs it: the hybrid vsock of
// virtio-devices/src/vsock/unix/muxer.rs, host side. At device creation (vm.boot, vm.add-vsock
// on a running VM) it binds the Unix socket (VsockUnixBackend::new, muxer.rs:379: an existing
// file is EADDRINUSE); it removes it when the device shuts down (device.rs:533).
// A host connection writes "CONNECT <port>\n" (case-insensitive; read as CH reads it: the first
// 10 bytes, then one byte at a time so no data past "\n" is taken, at most 32 bytes:
// muxer.rs:476-560); a malformed request closes the stream. The connection goes to the pretend
// guest's listener on that port; when the guest listens, CH writes "OK <local port>\n"
// (muxer.rs:761; local ports from 2^30 up, :687) and the stream is then raw both ways. When
// nothing listens the guest answers RST and CH closes the stream; a guest that never answers is
// given up after 2 s (csm/mod.rs CONN_REQUEST_TIMEOUT_MS). Paused, the device processes nothing.
//
// The pretend guest's listeners (the double runs no guest code): VMM_DOUBLE_VSOCK_LISTEN=
// "<port>=<unix socket>[,...]" — a connection to <port> is bridged to that socket (a test runs a
// real qemu-ga there: the guest's agent); "<port>=silent" — the guest never answers. Any other
// port: RST.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace chl::vmm_double {

class HybridVsock {
 public:
  // The listeners from VMM_DOUBLE_VSOCK_LISTEN ("" when unset).
  static std::map<std::uint32_t, std::string> listeners_from_env();
  // Binds `socket` and starts the device thread; on failure, CH's error chain (for api_error).
  static std::unique_ptr<HybridVsock> open(const std::string& socket, std::uint64_t cid,
                                           std::map<std::uint32_t, std::string> listeners,
                                           std::vector<std::string>& error_chain);
  ~HybridVsock();  // device shutdown: connections closed, the socket file removed
  HybridVsock(const HybridVsock&) = delete;
  HybridVsock& operator=(const HybridVsock&) = delete;

  void set_paused(bool paused);

  struct Impl;

 private:
  explicit HybridVsock(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chl::vmm_double

#pragma once
// The launcher's command socket as KubeVirt's virt-handler expects it: a gRPC server of
// kubevirt.cmd.v1.Cmd and kubevirt.cmd.info.CmdInfo on <share>/sockets/launcher-init-sock,
// renamed to launcher-sock once it serves (virt-handler's readiness signal).
// Info answers versions [1]; every implemented RPC goes to a CmdHandler; every other RPC
// answers success:false with the configured "not supported" message at once.
#include <filesystem>
#include <memory>
#include <string>

#include "common/error.hpp"
#include "kubevirt/cmd_handler.hpp"

namespace chl::kubevirt {

struct CmdServerOptions {
  std::filesystem::path share_dir = "/var/run/kubevirt";  // --kubevirt-share-dir
  // The answer of every RPC the launcher does not implement ("... by <hypervisor>").
  std::string not_supported = "not supported by cloud-hypervisor";
};

// <share>/sockets/launcher-init-sock and <share>/sockets/launcher-sock.
std::filesystem::path init_socket_path(const std::filesystem::path& share_dir);
std::filesystem::path ready_socket_path(const std::filesystem::path& share_dir);

class CmdServer {
 public:
  // Listen on launcher-init-sock (creating <share>/sockets if needed), serve, then rename the
  // socket to launcher-sock. `handler` must outlive the server.
  static common::Result<std::unique_ptr<CmdServer>> start(CmdServerOptions options,
                                                          CmdHandler& handler);
  // Stops serving (calls in flight get at most one second) and removes launcher-sock.
  ~CmdServer();
  CmdServer(const CmdServer&) = delete;
  CmdServer& operator=(const CmdServer&) = delete;

  const std::filesystem::path& socket_path() const { return socket_path_; }

  struct Impl;

 private:
  explicit CmdServer(std::unique_ptr<Impl> impl, std::filesystem::path socket_path);
  std::unique_ptr<Impl> impl_;
  std::filesystem::path socket_path_;
};

}  // namespace chl::kubevirt

#pragma once
// The command socket (`launcher.sock`, mode 0600): HTTP/JSON routes over LauncherService.
// Thin on purpose — a gRPC front for KubeVirt's cmd protocol can sit beside it later.
//
//   GET  /v1/ping                   {"ok":true}
//   GET  /v1/domain                 state, reason, VMI, VMM pid/version, PTY, live vm.info, counters
//   GET  /v1/events                 JSON lines: the current state first, then each domain event
//   PUT  /v1/pause | /v1/resume | /v1/reboot | /v1/kill
//   PUT  /v1/shutdown               {"grace_period_seconds": N}   (optional body)
//   PUT  /v1/snapshot               {"destination": "/abs/dir"}
//   PUT  /v1/restore                {"source": "/abs/dir"}
//   PUT  /v1/add-disk               a Cloud Hypervisor DiskConfig ({"path":…, "id":…, "readonly":…})
//   PUT  /v1/remove-device          {"id": "…"}
// Errors: {"error": "..."} with 409 (wrong state), 400 (bad request), 404, 405, 501 (not
// supported by this hypervisor), 500 (the hypervisor refused or failed; its message included).
#include <memory>
#include <vector>

#include "control/http_server.hpp"
#include "launcher/launcher_service.hpp"
#include "common/unique_fd.hpp"

namespace chl::control {

class CommandApi {
 public:
  CommandApi(launcher::LauncherService& service, common::UniqueFd listener);
  // Closes what is still open while the service (and its event bus) still exists.
  ~CommandApi();
  void start();
  // Stop accepting; event streams end once their last event is written.
  void stop();

 private:
  void handle(std::shared_ptr<HttpConnection> conn, HttpRequest req);
  void stream_events(const std::shared_ptr<HttpConnection>& conn);

  launcher::LauncherService& service_;
  HttpServer server_;
  std::vector<std::weak_ptr<HttpConnection>> streams_;
};

}  // namespace chl::control

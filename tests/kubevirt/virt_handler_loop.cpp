#include "tests/kubevirt/virt_handler_loop.hpp"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <sstream>
#include <thread>

#include "kubevirt/proto/cmd.grpc.pb.h"

namespace chl::test {
namespace fs = std::filesystem;
namespace v1 = ::kubevirt::cmd::v1;
using Json = nlohmann::json;
using std::chrono::milliseconds;

namespace {
// cmdclient.IsDisconnected: the launcher's socket gone or closed under the call.
bool disconnected(const grpc::Status& s) { return s.error_code() == grpc::StatusCode::UNAVAILABLE; }
}  // namespace

// cmd-client over launcher-sock: one call, its error as cmd-client returns it ("" when none).
struct VirtHandlerLoop::Rpc {
  std::unique_ptr<v1::Cmd::Stub> stub;
  explicit Rpc(const fs::path& sock)
      : stub(v1::Cmd::NewStub(
            grpc::CreateChannel("unix:" + sock.string(), grpc::InsecureChannelCredentials()))) {}
  template <typename F>
  static std::pair<grpc::Status, v1::Response> call(F&& f) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));  // cmd-client's short timeout
    v1::Response r;
    grpc::Status st = f(ctx, r);
    return {st, r};
  }
};

VirtHandlerLoop::VirtHandlerLoop(VirtHandlerLoopOptions options, TestNotifyServer& informer,
                                 std::string phase)
    : opts_(std::move(options)),
      informer_(informer),
      rpc_(std::make_unique<Rpc>(opts_.launcher_socket)),
      t0_(std::chrono::steady_clock::now()) {
  vmi_.phase = std::move(phase);
  const Json v = Json::parse(opts_.vmi_json, nullptr, false);
  if (v.is_object() && v.contains("spec") && v["spec"].contains("terminationGracePeriodSeconds") &&
      v["spec"]["terminationGracePeriodSeconds"].is_number_integer())
    vmi_.tgps = v["spec"]["terminationGracePeriodSeconds"].get<std::int64_t>();
}

VirtHandlerLoop::~VirtHandlerLoop() = default;

void VirtHandlerLoop::record(const std::string& what, bool ok, const std::string& detail) {
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  const std::int64_t wall = std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  actions_.push_back({t, wall, what, ok, detail});
}

std::vector<VirtHandlerLoop::Action> VirtHandlerLoop::actions(const std::string& what) const {
  std::vector<Action> out;
  for (const auto& a : actions_)
    if (a.what == what) out.push_back(a);
  return out;
}

std::string VirtHandlerLoop::log() const {
  std::ostringstream o;
  for (const auto& a : actions_)
    o << a.at_s << " s " << a.what << (a.ok ? "" : " FAILED")
      << (a.detail.empty() ? "" : ": " + a.detail) << "\n";
  return o.str();
}

const Json* VirtHandlerLoop::cached() {
  // The informer holds the newest domain the notify server decoded; processVmCleanup removed it
  // until a newer one comes.
  const auto got = informer_.received();
  std::size_t n = 0;
  Json latest;
  for (const auto& r : got) {
    if (r.k8s) continue;
    ++n;
    latest = r.json;
  }
  if (n == 0) return nullptr;
  if (removed_ && n <= seen_) return nullptr;
  removed_ = false;
  seen_ = n;
  cache_ = std::move(latest);
  return &cache_;
}

vh::Launcher VirtHandlerLoop::launcher_state() {
  // IsSocketUnresponsive (cmd-client/client.go:159-178): the socket file missing.
  const bool present = fs::exists(opts_.launcher_socket);
  if (present) launcher_seen_ = true;
  if (!launcher_seen_) return vh::Launcher::NotInitialized;
  return present ? vh::Launcher::Responsive : vh::Launcher::Unresponsive;
}

std::optional<milliseconds> VirtHandlerLoop::shutdown(const Json* domain) {
  // GetVerifiedLauncherClient: Ping first.
  v1::EmptyRequest empty;
  auto [pst, pr] = Rpc::call([&](auto& c, auto& r) { return rpc_->stub->Ping(&c, empty, &r); });
  record("Ping", pst.ok() && pr.success(), pst.ok() ? pr.message() : pst.error_message());
  if (!pst.ok() || !pr.success()) return opts_.error_requeue;
  v1::VMIRequest req;
  req.mutable_vmi()->set_vmijson(opts_.vmi_json);
  bool kill = !vh::domain_has_grace_period(domain);
  if (!kill) {
    const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
    auto [expired, left] = vh::grace_period_expired(vmi_, domain, now);
    if (!expired) {
      // handleVMIShutdown: ShuttingDown → nothing re-sent, no requeue.
      if (vh::status_of(*domain) == "ShuttingDown") return std::nullopt;
      auto [st, r] = Rpc::call(
          [&](auto& c, auto& resp) { return rpc_->stub->ShutdownVirtualMachine(&c, req, &resp); });
      const bool ok = disconnected(st) || (st.ok() && r.success());
      record("Shutdown", ok, st.ok() ? r.message() : st.error_message());
      if (!ok) return opts_.error_requeue;  // SyncFailed, rate-limited requeue
      if (left == vh::kFirstGracefulShutdownAttempt)
        left = std::min<std::int64_t>(5, vmi_.tgps.value_or(5));
      return milliseconds(std::min<std::int64_t>(left, 5) * 1000);
    }
    kill = true;
  }
  auto [st, r] = Rpc::call(
      [&](auto& c, auto& resp) { return rpc_->stub->KillVirtualMachine(&c, req, &resp); });
  const bool ok = disconnected(st) || (st.ok() && r.success());
  record("Kill", ok, st.ok() ? r.message() : st.error_message());
  if (!ok) return opts_.error_requeue;
  return std::nullopt;
}

bool VirtHandlerLoop::delete_domain() {
  v1::EmptyRequest empty;
  auto [pst, pr] = Rpc::call([&](auto& c, auto& r) { return rpc_->stub->Ping(&c, empty, &r); });
  record("Ping", pst.ok() && pr.success(), pst.ok() ? pr.message() : pst.error_message());
  if (pst.ok() &&
      pr.success()) {  // a launcher that does not answer: DeleteDomain skipped, silently
    v1::VMIRequest req;
    req.mutable_vmi()->set_vmijson(opts_.vmi_json);
    auto [st, r] = Rpc::call(
        [&](auto& c, auto& resp) { return rpc_->stub->DeleteVirtualMachine(&c, req, &resp); });
    const bool ok = disconnected(st) || (st.ok() && r.success());
    record("DeleteDomain", ok, st.ok() ? r.message() : st.error_message());
    if (!ok) {
      informer_.close_pipe();  // the deferred CloseLauncherClient runs on an error too
      return false;
    }
  }
  // The deferred CloseLauncherClient (vm.go:1708): the notify pipe's listener closed.
  informer_.close_pipe();
  // processVmCleanup: the domain leaves the cache.
  removed_ = true;
  cleaned_up_ = true;
  return true;
}

bool VirtHandlerLoop::sync_vmi() {
  Json v = Json::parse(opts_.vmi_json);
  v["status"]["phase"] = vmi_.phase;
  v1::VMIRequest req;
  req.mutable_vmi()->set_vmijson(v.dump());
  auto [st, r] = Rpc::call(
      [&](auto& c, auto& resp) { return rpc_->stub->SyncVirtualMachine(&c, req, &resp); });
  const bool ok = st.ok() && r.success();
  record("Sync", ok, st.ok() ? r.message() : st.error_message());
  return ok;
}

std::optional<milliseconds> VirtHandlerLoop::reconcile() {
  const Json* domain = vh::existing_domain(cached());
  const std::string status = domain ? vh::status_of(*domain) : "";
  if (domain && status == "Unknown") return std::nullopt;  // vm.go:1340
  const bool alive = domain && status != "Shutoff" && status != "Crashed" && !status.empty();
  const bool final = vh::is_final(vmi_.phase);
  bool should_shutdown = false, should_delete = false, should_update = false;
  std::optional<milliseconds> requeue;
  const auto want = [&](milliseconds d) { requeue = requeue ? std::min(*requeue, d) : d; };

  if (vh::graceful_shutdown_trigger(domain) && vmi_.phase == "Running")
    (alive ? should_shutdown : should_delete) = true;
  if (vmi_.deleting) (alive ? should_shutdown : should_delete) = true;
  if (final) should_delete = true;
  if (!alive && domain && !final) {
    const std::string reason = vh::reason_of(*domain);
    if (status == "Shutoff" && vmi_.phase == "Scheduled" && (reason == "Unknown" || reason.empty()))
      want(milliseconds(5000));  // may still be starting (vm.go:1406-1418)
    else
      should_delete = true;
  }
  if (!final) {
    bool requeue_1s = false;
    if (vh::phase_for(domain, vmi_, launcher_state(), &requeue_1s) == vmi_.phase)
      should_update = true;
    if (requeue_1s) want(milliseconds(1000));
  }

  if (should_shutdown) {
    if (auto r = shutdown(domain)) want(*r);
  } else if (should_delete) {
    if (!delete_domain()) want(opts_.error_requeue);
  } else if (should_update) {
    if (!sync_vmi()) want(opts_.error_requeue);
  }
  // updateVMIStatus, from the same domain object (vm.go:1484).
  if (!final) {
    const std::string p = vh::phase_for(domain, vmi_, launcher_state());
    if (p != vmi_.phase) {
      record("Phase", true, p);
      vmi_.phase = p;
    }
  }
  return requeue;
}

bool VirtHandlerLoop::run(milliseconds timeout) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout;
  bool pending = true;  // the key is queued (one pending pass at a time, as a workqueue)
  clock::time_point next = clock::now();
  std::size_t events = 0;
  while (clock::now() < deadline) {
    if (cleaned_up_ && vh::is_final(vmi_.phase)) return true;
    // The informer's update handler enqueues the key; a busy worker takes it up later when the
    // domain shows the VM stopped or gone.
    std::size_t n = 0;
    Json latest;
    for (const auto& r : informer_.received())
      if (!r.k8s) {
        ++n;
        latest = r.json;
      }
    if (n > events) {
      events = n;
      const Json* d = vh::existing_domain(&latest);
      const std::string st = d ? vh::status_of(*d) : "";
      if (!d || st == "Shutoff" || st == "Crashed") {
        next = clock::now() + opts_.busy_delay;  // busy: nothing of this VMI runs before then
      } else if (!pending || clock::now() < next) {
        next = clock::now();
      }
      pending = true;
    }
    if (pending && clock::now() >= next) {
      pending = false;
      if (auto r = reconcile()) {
        pending = true;
        next = clock::now() + *r;
      }
      continue;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return cleaned_up_ && vh::is_final(vmi_.phase);
}

}  // namespace chl::test

// Live migration on the QEMU/libvirt path, as KubeVirt's virt-launcher does it
// (pkg/virt-launcher/virtwrap/live-migration-source.go and live-migration-target.go, KubeVirt
// d923fdb): the source's libvirtd migrates the domain peer to peer to the target pod's own
// libvirtd through the proxy socket virt-handler creates in the source pod for it
// (<share>/migrationproxy/<vmiUID>-source.sock), and QEMU's stream goes straight through the
// direct-migration proxy socket (<vmiUID>-49152-source.sock); the target's libvirtd creates the
// incoming domain, which the target launcher adopts.
#include <libvirt/libvirt.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <thread>

#include "common/log.hpp"
#include "common/unix_socket.hpp"
#include "drivers/libvirt/libvirt_driver.hpp"

namespace chl::libvirt {
using common::fail;
using common::Result;
using common::Status;

namespace {

// live-migration-source.go: monitorSleepPeriodMS.
constexpr std::chrono::milliseconds kMonitorPeriod{400};

// KubeVirt's generateMigrationFlags: LIVE | PEER2PEER | PERSIST_DEST, and per MigrationOptions
// UNSAFE, AUTO_CONVERGE, POSTCOPY; PAUSED for a paused domain; PARALLEL with
// ParallelMigrationThreads (never with post-copy: shouldConfigureParallelMigration). Not
// TUNNELLED: QEMU's stream goes over its own (direct-migration) proxy socket.
unsigned long migration_flags(const launcher::MigrationSend& m, bool paused) {
  unsigned long f = VIR_MIGRATE_LIVE | VIR_MIGRATE_PEER2PEER | VIR_MIGRATE_PERSIST_DEST;
  if (m.unsafe) f |= VIR_MIGRATE_UNSAFE;
  if (m.allow_auto_converge) f |= VIR_MIGRATE_AUTO_CONVERGE;
  if (m.allow_post_copy) f |= VIR_MIGRATE_POSTCOPY;
  if (paused) f |= VIR_MIGRATE_PAUSED;
  if (m.parallel_threads && !m.allow_post_copy) f |= VIR_MIGRATE_PARALLEL;
  return f;
}

// virTypedParams built up and freed with it.
struct TypedParams {
  virTypedParameterPtr p = nullptr;
  int n = 0;
  int max = 0;
  ~TypedParams() { virTypedParamsFree(p, n); }
  bool add(const char* key, const std::string& v) {
    return virTypedParamsAddString(&p, &n, &max, key, v.c_str()) == 0;
  }
  bool add_ull(const char* key, unsigned long long v) {
    return virTypedParamsAddULLong(&p, &n, &max, key, v) == 0;
  }
  bool add_int(const char* key, int v) { return virTypedParamsAddInt(&p, &n, &max, key, v) == 0; }
};

// The URI the source's libvirtd dials the target's with (migrateHelper): the proxy socket.
std::string destination_uri(const std::string& our_uri, const std::string& socket) {
  const bool session = our_uri.find("/session") != std::string::npos;
  return std::string(session ? "qemu+unix:///session" : "qemu+unix:///system") +
         "?socket=" + socket;
}

// What the completed migration job took, as libvirt measured it (KubeVirt logs the same,
// logMigrationInfo). Asked on the target: the source's transient domain is gone by then, and the
// target's libvirt has the source's figures from the migration cookie.
void log_completed_job(virDomainPtr dom) {
  unsigned long long elapsed = 0, downtime = 0, data = 0;
  // The figures come with the migration's last step, a moment after the domain runs.
  for (int i = 0; i < 20 && elapsed == 0; ++i) {
    if (i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    int type = 0;
    virTypedParameterPtr stats = nullptr;
    int n = 0;
    if (virDomainGetJobStats(dom, &type, &stats, &n, VIR_DOMAIN_JOB_STATS_COMPLETED) != 0) continue;
    (void)virTypedParamsGetULLong(stats, n, VIR_DOMAIN_JOB_TIME_ELAPSED, &elapsed);
    (void)virTypedParamsGetULLong(stats, n, VIR_DOMAIN_JOB_DOWNTIME, &downtime);
    (void)virTypedParamsGetULLong(stats, n, VIR_DOMAIN_JOB_DATA_PROCESSED, &data);
    virTypedParamsFree(stats, n);
  }
  if (elapsed == 0) {
    CHL_LOG_DEBUG("live migration: no completed job statistics");
    return;
  }
  CHL_LOG_INFO("live migration: completed in {} ms, downtime {} ms, {} bytes", elapsed, downtime,
               data);
}

}  // namespace

// KubeVirt's migrationMonitor (startMonitor / processInflightMigration), on its own thread
// while virDomainMigrateToURI3 blocks the worker: the job's remaining data every 400 ms;
// ProgressTimeout without it shrinking, or CompletionTimeoutPerGiB x GiB in all, aborts the
// job, unless AllowWorkloadDisruption lets it finish by post-copy (AllowPostCopy) or by pausing
// the guest (the limit then doubles). Returns why it aborted, "" when it did not.
namespace {
class MigrationMonitor {
 public:
  MigrationMonitor(virDomainPtr dom, const launcher::MigrationSend& m) : dom_(dom), m_(m) {
    thread_ = std::thread([this] { run(); });
  }
  ~MigrationMonitor() { stop(); }
  void stop() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  [[nodiscard]] std::string aborted() const {
    std::lock_guard lk(mu_);
    return aborted_;
  }

 private:
  void run() {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    auto last_progress = start;
    // live-migration-source.go (KubeVirt d923fdb), startMonitor / processInflightMigration: the
    // remaining data is kept from the last sample that had it (DataRemainingSet), and every
    // in-flight sample counts as progress when the watermark is 0 (none yet, or nothing left)
    // or the remaining data is below it; the watermark then becomes the remaining data.
    unsigned long long watermark = 0;
    unsigned long long remaining_data = 0;
    std::int64_t completion = m_.completion_timeout_s;
    std::string mode = "PreCopy";
    for (;;) {
      {
        std::unique_lock lk(mu_);
        if (cv_.wait_for(lk, kMonitorPeriod, [this] { return stop_; })) return;
      }
      int type = VIR_DOMAIN_JOB_NONE;
      virTypedParameterPtr params = nullptr;
      int n = 0;
      if (virDomainGetJobStats(dom_, &type, &params, &n, 0) != 0) {  // KubeVirt retries
        CHL_LOG_DEBUG("migration monitor: job stats: {}", libvirt_last_error());
        continue;
      }
      unsigned long long remaining = 0;
      const bool has_remaining =
          virTypedParamsGetULLong(params, n, VIR_DOMAIN_JOB_DATA_REMAINING, &remaining) == 1;
      virTypedParamsFree(params, n);
      CHL_LOG_DEBUG("migration monitor: job type {}, remaining {}", type,
                    has_remaining ? std::to_string(remaining) : std::string("?"));
      if (has_remaining) remaining_data = remaining;
      if (type != VIR_DOMAIN_JOB_UNBOUNDED) continue;
      const auto now = clock::now();
      if (watermark == 0 || remaining_data < watermark) last_progress = now;
      watermark = remaining_data;
      const auto elapsed = std::chrono::duration_cast<std::chrono::seconds>(now - start).count();
      const auto stuck =
          std::chrono::duration_cast<std::chrono::seconds>(now - last_progress).count();
      const bool over_time = completion > 0 && elapsed > completion;
      if (mode == "PostCopy") continue;  // the target runs the VM: never abort now
      if (over_time && m_.allow_workload_disruption && mode != "Paused") {
        if (m_.allow_post_copy) {
          if (virDomainMigrateStartPostCopy(dom_, 0) != 0) {
            CHL_LOG_ERROR("migration: starting post-copy: {}", libvirt_last_error());
            continue;
          }
          mode = "PostCopy";
        } else {
          if (virDomainSuspend(dom_) != 0) {
            CHL_LOG_ERROR("migration: pausing the guest to finish: {}", libvirt_last_error());
            continue;
          }
          completion *= 2;  // no premature cancel now that it can converge
          mode = "Paused";
        }
        CHL_LOG_INFO("migration: {} s over the {} s limit: mode {}", elapsed, completion, mode);
        if (m_.on_mode) m_.on_mode(mode);
        continue;
      }
      std::string why;
      if (m_.progress_timeout_s > 0 && stuck > m_.progress_timeout_s)
        why = "Live migration stuck for " + std::to_string(stuck) + " seconds and has been aborted";
      else if (over_time)
        why = "Live migration is not completed after " + std::to_string(completion) +
              " seconds and has been aborted";
      if (why.empty()) continue;
      // Logged before the call: libvirt answers only once QEMU took the cancel.
      CHL_LOG_INFO("migration monitor: aborting the job: {}", why);
      if (virDomainAbortJob(dom_) != 0) {
        CHL_LOG_ERROR("migration: aborting: {}", libvirt_last_error());
        continue;
      }
      CHL_LOG_WARN("migration: {}", why);
      std::lock_guard lk(mu_);
      aborted_ = why;
      return;
    }
  }

  virDomainPtr dom_;
  const launcher::MigrationSend& m_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string aborted_;
  std::thread thread_;
};
}  // namespace

Status LibvirtDriver::send_migration(const launcher::MigrationSend& m) {
  CHL_TRY_VOID(need_domain());
  if (m.destination.rfind("unix:", 0) != 0 || m.migrate_uri.empty())
    return fail(std::errc::invalid_argument,
                "live migration: the libvirt path needs the target libvirt's proxy socket "
                "(unix:<path>) and a migrate URI, got '" +
                    m.destination + "' and '" + m.migrate_uri + "'");
  int st = 0, reason = 0;
  if (virDomainGetState(dom_.get(), &st, &reason, 0) != 0)
    return libvirt_fail("live migration: reading the domain state");
  const unsigned long flags = migration_flags(m, st == VIR_DOMAIN_PAUSED);
  // generateMigrationParams: the migratable XML as the destination's live and persistent
  // definition, the domain's own name, QEMU's URI, the bandwidth and the multifd channels.
  VirString xml(virDomainGetXMLDesc(dom_.get(), VIR_DOMAIN_XML_MIGRATABLE));
  if (!xml) return libvirt_fail("live migration: reading the migratable domain XML");
  TypedParams params;
  bool ok = params.add(VIR_MIGRATE_PARAM_URI, m.migrate_uri) &&
            params.add(VIR_MIGRATE_PARAM_DEST_XML, xml.get()) &&
            params.add(VIR_MIGRATE_PARAM_PERSIST_XML, xml.get()) &&
            params.add(VIR_MIGRATE_PARAM_DEST_NAME, opts_.domain_name);
  if (ok && m.bandwidth_mib > 0) ok = params.add_ull(VIR_MIGRATE_PARAM_BANDWIDTH, m.bandwidth_mib);
  if (ok && (flags & VIR_MIGRATE_PARALLEL))
    ok = params.add_int(VIR_MIGRATE_PARAM_PARALLEL_CONNECTIONS,
                        static_cast<int>(*m.parallel_threads));
  if (!ok) return libvirt_fail("live migration: building the parameters");
  const std::string dest = destination_uri(opts_.uri, m.destination.substr(5));
  CHL_LOG_INFO("live migration: {} to {} (QEMU's stream to {}, flags {:#x}{})", opts_.domain_name,
               dest, m.migrate_uri, flags, st == VIR_DOMAIN_PAUSED ? ", paused" : "");
  migrating_out_ = true;
  int rc = 0;
  std::string error;
  std::string aborted;
  // The monitor and the aborts use a connection of their own. On the migrate call's connection
  // an AbortJob was seen to wait in the launcher's libvirt client for ever, never reaching
  // libvirtd (whose workers showed only the Perform phase waiting), while the call thread polled
  // the socket with no timeout: the abort of a stalled migration then never happens.
  {
    VirConnect side(virConnectOpen(opts_.uri.c_str()));
    VirDomain side_dom(side ? virDomainLookupByName(side.get(), opts_.domain_name.c_str())
                            : nullptr);
    if (!side_dom)
      CHL_LOG_WARN("live migration: no connection of its own for the monitor ({}): it shares "
                   "the migration's",
                   libvirt_last_error());
    std::lock_guard lk(side_mu_);
    side_conn_ = std::move(side);
    side_dom_ = std::move(side_dom);
  }
  virDomainPtr monitored = side_dom_ ? side_dom_.get() : dom_.get();
  {
    MigrationMonitor monitor(monitored, m);
    rc = virDomainMigrateToURI3(dom_.get(), dest.c_str(), params.p, params.n, flags);
    if (rc != 0) error = libvirt_last_error();
    monitor.stop();
    aborted = monitor.aborted();
  }
  {
    std::lock_guard lk(side_mu_);
    side_dom_.reset();
    side_conn_.reset();
  }
  if (rc == 0) migrated_out_ = true;  // before migrating_out_ drops (qemu_process.cpp reads both)
  migrating_out_ = false;
  if (rc == 0) return {};
  if (!aborted.empty()) return fail(std::errc::timed_out, aborted);
  return fail(std::errc::io_error,
              error.empty() ? std::string("virDomainMigrateToURI3 failed") : error);
}

Status LibvirtDriver::abort_migration() {
  if (!migrating_out_.load() || !dom_)
    return fail(std::errc::no_such_process, "aborting a migration: none is under way");
  // KubeVirt's asyncMigrationAbort: virDomainAbortJob on the migration job, sent on the
  // migration's side connection (send_migration says why).
  std::lock_guard lk(side_mu_);
  virDomainPtr d = side_dom_ ? side_dom_.get() : dom_.get();
  if (virDomainAbortJob(d) != 0) return libvirt_fail("aborting the migration");
  return {};
}

Status LibvirtDriver::receive_migration(const std::string& receiver) {
  // `receiver` is "libvirt:<path>": where virt-handler's target proxy dials this pod's libvirt
  // (/var/run/libvirt/virtqemud-sock in KubeVirt's pod: migration-target.go). Our daemon is a
  // libvirtd answering on its own socket: the path is made a link to it.
  auto fail_receive = [this](common::Error e) -> Status {
    if (dom_ && virDomainIsActive(dom_.get()) == 1 && virDomainDestroy(dom_.get()) != 0)
      CHL_LOG_WARN("libvirt: destroying the half-received domain: {}", libvirt_last_error());
    start_failed_ = true;
    return tl::unexpected(std::move(e));
  };
  if (receiver.rfind("libvirt:", 0) != 0)
    return fail_receive(common::Error{std::make_error_code(std::errc::invalid_argument),
                                      "the libvirt path receives through its libvirt daemon "
                                      "(libvirt:<socket>), not '" +
                                          receiver + "'"});
  const std::filesystem::path link = receiver.substr(8);
  if (auto st = connect(); !st) return fail_receive(st.error());
  std::error_code ec;
  if (link != opts_.daemon_socket && !common::unix_socket_answers(link)) {
    std::filesystem::create_directories(link.parent_path(), ec);
    std::filesystem::remove(link, ec);
    // Relative when beside it: the link then reads the same from outside the pod's mounts.
    const auto target = std::filesystem::weakly_canonical(opts_.daemon_socket.parent_path(), ec) ==
                                std::filesystem::weakly_canonical(link.parent_path(), ec)
                            ? opts_.daemon_socket.filename()
                            : opts_.daemon_socket;
    std::filesystem::create_symlink(target, link, ec);
    if (ec)
      return fail_receive(common::Error{ec, "linking " + link.string() +
                                                " to the libvirt daemon's socket " +
                                                opts_.daemon_socket.string()});
  }
  CHL_LOG_INFO("live migration: waiting for the incoming domain {} (the proxy dials {})",
               opts_.domain_name, link.string());
  // The incoming domain appears when the source's libvirtd prepares it (QEMU -incoming, Paused/
  // Migration), and runs once the migration finished (or stays paused, Paused/User).
  bool found = false;
  for (;;) {
    if (stop_receiving_.load())
      return fail_receive(common::Error{std::make_error_code(std::errc::operation_canceled),
                                        "the launcher stopped before the VM arrived"});
    if (!found) {
      dom_.reset(virDomainLookupByName(conn_.get(), opts_.domain_name.c_str()));
      if (dom_) {
        found = true;
        agent_->set_domain(dom_.get());  // the guest agent follows the VM (agent_transport.hpp)
        pid_t pid = read_qemu_pid();
        qemu_pid_ = pid;
        take_qemu_pidfd(pid);
        if (pid > 0 && opts_.on_vmm_started) opts_.on_vmm_started(pid);
        CHL_LOG_INFO("live migration: the incoming domain exists (QEMU pid {})", pid);
      }
    }
    if (found) {
      int st = 0, reason = 0;
      if (virDomainGetState(dom_.get(), &st, &reason, 0) != 0 || st == VIR_DOMAIN_SHUTOFF ||
          st == VIR_DOMAIN_CRASHED)
        return fail_receive(common::Error{std::make_error_code(std::errc::io_error),
                                          "the incoming migration failed: the domain is gone"});
      // live-migration-target.go waits until no incoming job remains.
      int job = VIR_DOMAIN_JOB_NONE;
      virTypedParameterPtr params = nullptr;
      int n = 0;
      if (virDomainGetJobStats(dom_.get(), &job, &params, &n, 0) == 0)
        virTypedParamsFree(params, n);
      // Running, or paused as it was on the source (Paused/User: VIR_MIGRATE_PAUSED); while it
      // receives it is Paused/StartingUp, then Paused/Migration.
      const bool arrived =
          st == VIR_DOMAIN_RUNNING || (st == VIR_DOMAIN_PAUSED && reason == VIR_DOMAIN_PAUSED_USER);
      if (arrived && job == VIR_DOMAIN_JOB_NONE) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  auto pty = hold_console();
  if (!pty) return fail_receive(pty.error());
  CHL_LOG_INFO("live migration: received {}", opts_.domain_name);
  log_completed_job(dom_.get());
  return {};
}

}  // namespace chl::libvirt

#pragma once
// The virt-handler stand-in's phase derivation: the VMI phase a domain gives, exactly as KubeVirt's
// virt-handler computes it (pkg/virt-handler/vm.go, calculateVmPhaseForStatusReason :2225-2292,
// isACPIEnabled, domainHasGracePeriod, hasGracePeriodExpired :1576-1619, hasGracefulShutdownTrigger
// :1309; ../shared/reference/kubevirt-domain-contract.md §2.2). It reads the raw domain JSON the
// launcher sent (a Go nil pointer is a JSON null or a missing key). Header-only, for tests.
#include <chrono>
#include <cstdint>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace chl::test::vh {

using Json = nlohmann::json;

// What of the VMI virt-handler's phase logic reads.
struct VmiView {
  std::string phase = "Scheduled";   // status.phase
  std::optional<std::int64_t> tgps;  // spec.terminationGracePeriodSeconds (nil: not set)
  bool deleting = false;             // metadata.deletionTimestamp set
};

inline bool is_final(const std::string& phase) { return phase == "Succeeded" || phase == "Failed"; }

// j[k] when j is an object holding a non-null k; else nullptr (Go: a nil pointer/map entry).
inline const Json* field(const Json* j, const char* k) {
  if (!j || !j->is_object()) return nullptr;
  auto it = j->find(k);
  if (it == j->end() || it->is_null()) return nullptr;
  return &*it;
}

// The domain in the informer cache, as sync() sees it: nil when none, and nil once it carries
// ObjectMeta.deletionTimestamp (the domain watcher's "deleted", vm.go:1320ff: domainExists).
inline const Json* existing_domain(const Json* cached) {
  if (!cached || cached->is_null()) return nullptr;
  if (field(field(cached, "ObjectMeta"), "deletionTimestamp")) return nullptr;
  return cached;
}

inline std::string status_of(const Json& d) {
  const Json* s = field(field(&d, "Status"), "Status");
  return s && s->is_string() ? s->get<std::string>() : "";
}
inline std::string reason_of(const Json& d) {
  const Json* s = field(field(&d, "Status"), "Reason");
  return s && s->is_string() ? s->get<std::string>() : "";
}

// Spec.Metadata.KubeVirt.GracePeriod (nil: nullptr).
inline const Json* grace_period(const Json* d) {
  return field(field(field(field(d, "Spec"), "Metadata"), "KubeVirt"), "GracePeriod");
}
inline std::int64_t grace_seconds(const Json* d) {
  const Json* s = field(grace_period(d), "DeletionGracePeriodSeconds");
  return s && s->is_number_integer() ? s->get<std::int64_t>() : 0;
}

// domainHasGracePeriod (vm.go): GracePeriod set and its seconds not 0.
inline bool domain_has_grace_period(const Json* d) {
  return d && grace_period(d) && grace_seconds(d) != 0;
}

// hasGracefulShutdownTrigger (vm.go:1309): GracePeriod.MarkedForGracefulShutdown == true.
inline bool graceful_shutdown_trigger(const Json* d) {
  const Json* m = field(grace_period(d), "MarkedForGracefulShutdown");
  return m && m->is_boolean() && m->get<bool>();
}

// vmiHasTerminationGracePeriod, isACPIEnabled (vm.go).
inline bool vmi_has_termination_grace_period(const VmiView& v) { return !v.tgps || *v.tgps != 0; }
inline bool is_acpi_enabled(const VmiView& v, const Json* d) {
  return (vmi_has_termination_grace_period(v) || (!v.tgps && domain_has_grace_period(d))) && d &&
         field(field(d, "Spec"), "Features") && field(field(field(d, "Spec"), "Features"), "ACPI");
}

// A metav1.Time ("2026-11-24T18:58:51Z") as Unix seconds; nullopt when it does not parse (Go's
// decoder would have refused the document).
inline std::optional<std::int64_t> unix_seconds(const std::string& rfc3339) {
  std::tm tm{};
  const char* end = ::strptime(rfc3339.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  if (!end || *end) return std::nullopt;
  return static_cast<std::int64_t>(::timegm(&tm));
}

constexpr std::int64_t kFirstGracefulShutdownAttempt = -1;

// hasGracePeriodExpired (vm.go:1576-1619): {expired, time left in s (-1: first attempt)}.
inline std::pair<bool, std::int64_t> grace_period_expired(const VmiView& v, const Json* d,
                                                          std::int64_t now_unix) {
  std::int64_t grace = 0;
  if (v.tgps)
    grace = *v.tgps;
  else if (grace_period(d))
    grace = grace_seconds(d);
  if (grace == 0) return {true, 0};
  std::int64_t start = 0;
  if (const Json* ts = field(grace_period(d), "DeletionTimestamp"); ts && ts->is_string())
    start = unix_seconds(ts->get<std::string>()).value_or(0);
  if (start == 0) return {false, kFirstGracefulShutdownAttempt};
  const std::int64_t diff = now_unix - start;
  if (diff >= grace) return {true, 0};
  return {false, std::max<std::int64_t>(grace - diff, 1)};
}

// How virt-handler finds the launcher when there is no domain (launcher-clients.go:162-208).
enum class Launcher { NotInitialized, Unresponsive, Responsive };

// calculateVmPhaseForStatusReason (vm.go:2225-2292). `domain` is what sync() got (nil when none
// or deleted). `requeue_1s` is set when virt-handler would requeue the VMI after 1 s.
inline std::string phase_for(const Json* domain, const VmiView& v, Launcher launcher,
                             bool* requeue_1s = nullptr) {
  if (!domain) {
    if (v.phase == "Scheduled" || v.phase == "Running") {
      if (launcher == Launcher::NotInitialized) {
        if (requeue_1s) *requeue_1s = true;
        return v.phase;
      }
      if (launcher == Launcher::Unresponsive) return "Failed";  // not a migration target here
      return v.phase;
    }
    if (!is_final(v.phase)) return "Scheduled";
    return v.phase;
  }
  const std::string st = status_of(*domain), reason = reason_of(*domain);
  if (st == "Shutoff" || st == "Crashed") {
    if (reason == "Crashed" || reason == "Panicked") return "Failed";
    if (reason == "Destroyed")
      return is_acpi_enabled(v, domain) ? "Failed" : "Succeeded";  // no post-copy here
    if (reason == "Shutdown" || reason == "Saved" || reason == "FromSnapshot") return "Succeeded";
    return v.phase;  // Migrated, Unknown, "", Failed, …
  }
  if (st == "Paused") return reason == "PausedPostcopyFailed" ? "Failed" : "Running";
  if (st == "Running" || st == "Blocked" || st == "PMSuspended") return "Running";
  return v.phase;  // ShuttingDown, NoState, …
}

}  // namespace chl::test::vh

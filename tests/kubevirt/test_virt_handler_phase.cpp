// The virt-handler stand-in's phase derivation (virt_handler_phase.hpp) against KubeVirt's table
// (vm.go calculateVmPhaseForStatusReason; ../shared/reference/kubevirt-domain-contract.md §2.2),
// on the documents a real virt-launcher sent (golden/) and on ours.
#include <doctest/doctest.h>

#include <fstream>

#include "kubevirt/domain_json.hpp"
#include "tests/kubevirt/virt_handler_phase.hpp"
#include "tests/support/test_support.hpp"

namespace {
using nlohmann::json;
namespace vh = chl::test::vh;

json golden(const std::string& name) {
  std::ifstream in(chl::test::source_dir() / "tests/kubevirt/golden" / name);
  REQUIRE_MESSAGE(in.good(), "missing golden file " << name);
  return json::parse(in);
}

json with_status(json d, const std::string& status, const std::string& reason) {
  d["Status"]["Status"] = status;
  d["Status"]["Reason"] = reason;
  return d;
}

vh::VmiView running(std::optional<std::int64_t> tgps = 30) { return {"Running", tgps, false}; }

}  // namespace

TEST_CASE("virt-handler phase: the real launcher's end states") {
  const json shutdown = golden("masquerade-11-MODIFIED-Shutoff.json");  // Shutoff/Shutdown
  const json destroyed = golden("plain-09-MODIFIED-Shutoff.json");      // Shutoff/Destroyed
  const json gone = golden("masquerade-12-MODIFIED-NoState.json");  // NoState + deletionTimestamp
  const auto R = vh::Launcher::Responsive;
  CHECK(vh::phase_for(&shutdown, running(), R) == "Succeeded");
  CHECK(vh::phase_for(&destroyed, running(), R) == "Failed");  // ACPI + a grace period: killed
  // No grace period at all (TGPS 0): a destroyed domain is fine.
  CHECK(vh::phase_for(&destroyed, running(0), R) == "Succeeded");
  // TGPS nil: the domain's seconds decide.
  CHECK(vh::phase_for(&destroyed, running(std::nullopt), R) == "Failed");
  // No Features.ACPI: destroyed is fine.
  json no_acpi = destroyed;
  no_acpi["Spec"]["Features"] = nullptr;
  CHECK(vh::phase_for(&no_acpi, running(), R) == "Succeeded");
  // The gone domain is "no domain": the launcher decides.
  CHECK(vh::existing_domain(&gone) == nullptr);
  CHECK(vh::phase_for(vh::existing_domain(&gone), running(), R) == "Running");
  CHECK(vh::phase_for(vh::existing_domain(&gone), running(), vh::Launcher::Unresponsive) ==
        "Failed");
  bool requeue = false;
  CHECK(vh::phase_for(nullptr, running(), vh::Launcher::NotInitialized, &requeue) == "Running");
  CHECK(requeue);
  CHECK(vh::phase_for(nullptr, {"Pending", 30, false}, R) == "Scheduled");
  CHECK(vh::phase_for(nullptr, {"Succeeded", 30, false}, vh::Launcher::Unresponsive) ==
        "Succeeded");
}

TEST_CASE("virt-handler phase: every Status/Reason row of the table") {
  const json base = golden("masquerade-09-MODIFIED-Running.json");
  const auto R = vh::Launcher::Responsive;
  struct Row {
    const char* status;
    const char* reason;
    const char* phase;  // from a Running VMI
  };
  const Row rows[] = {
      {"Running", "Unknown", "Running"},
      {"Blocked", "Unknown", "Running"},
      {"PMSuspended", "Unknown", "Running"},
      {"Paused", "User", "Running"},
      {"Paused", "PausedPostcopyFailed", "Failed"},
      {"ShuttingDown", "Unknown", "Running"},  // unchanged
      {"Shutoff", "Crashed", "Failed"},
      {"Crashed", "Panicked", "Failed"},
      {"Shutoff", "Shutdown", "Succeeded"},
      {"Shutoff", "Saved", "Succeeded"},
      {"Shutoff", "FromSnapshot", "Succeeded"},
      {"Shutoff", "Destroyed", "Failed"},
      {"Shutoff", "Migrated", "Running"},
      {"Shutoff", "Unknown", "Running"},
      {"Shutoff", "Failed", "Running"},
      {"NoState", "Unknown", "Running"},
  };
  for (const auto& r : rows) {
    const json d = with_status(base, r.status, r.reason);
    CHECK_MESSAGE(vh::phase_for(&d, running(), R) == r.phase, r.status << "/" << r.reason);
  }
}

TEST_CASE(
    "virt-handler phase: grace period, expiry and the graceful shutdown trigger, read as vm.go "
    "reads them") {
  json d = golden("masquerade-09-MODIFIED-Running.json");  // GracePeriod 3 s from 18:58:51
  const auto start = *vh::unix_seconds("2026-11-24T18:58:51Z");
  CHECK(vh::domain_has_grace_period(&d));
  CHECK_FALSE(vh::graceful_shutdown_trigger(&d));
  // The VMI's TGPS wins over the domain's seconds.
  CHECK(vh::grace_period_expired(running(10), &d, start + 9) ==
        std::pair<bool, std::int64_t>{false, 1});
  CHECK(vh::grace_period_expired(running(10), &d, start + 10).first);
  CHECK(vh::grace_period_expired(running(std::nullopt), &d, start + 3).first);
  CHECK(vh::grace_period_expired(running(std::nullopt), &d, start + 1) ==
        std::pair<bool, std::int64_t>{false, 2});
  // No DeletionTimestamp yet: the first attempt.
  d["Spec"]["Metadata"]["KubeVirt"]["GracePeriod"]["DeletionTimestamp"] = nullptr;
  CHECK(vh::grace_period_expired(running(10), &d, start).second ==
        vh::kFirstGracefulShutdownAttempt);
  // TGPS 0: expired at once.
  CHECK(vh::grace_period_expired(running(0), &d, start).first);
  // No GracePeriod or 0 seconds: no grace period (virt-handler kills at once).
  json none = d;
  none["Spec"]["Metadata"]["KubeVirt"]["GracePeriod"] = nullptr;
  CHECK_FALSE(vh::domain_has_grace_period(&none));
  none["Spec"]["Metadata"]["KubeVirt"]["GracePeriod"] = {{"DeletionGracePeriodSeconds", 0}};
  CHECK_FALSE(vh::domain_has_grace_period(&none));
  d["Spec"]["Metadata"]["KubeVirt"]["GracePeriod"]["MarkedForGracefulShutdown"] = true;
  CHECK(vh::graceful_shutdown_trigger(&d));
}

TEST_CASE(
    "virt-handler phase: our domain documents read the same way (grace period, ACPI, the SIGTERM "
    "mark, gone)") {
  chl::kubevirt::DomainDocument doc;
  doc.vmi_name = "testvm";
  doc.vmi_namespace = "default";
  doc.vmi_uid = "u1";
  doc.grace_period_seconds = 10;
  doc.state = chl::events::DomainState::Shutoff;
  doc.reason = chl::events::StateReason::Destroyed;
  json j = chl::kubevirt::to_domain_json(doc);
  CHECK(vh::domain_has_grace_period(&j));
  CHECK(vh::is_acpi_enabled(running(), &j));
  CHECK(vh::phase_for(&j, running(), vh::Launcher::Responsive) == "Failed");
  CHECK_FALSE(vh::graceful_shutdown_trigger(&j));
  doc.marked_for_graceful_shutdown = true;
  doc.grace_period_start = std::chrono::system_clock::now();
  j = chl::kubevirt::to_domain_json(doc);
  CHECK(vh::graceful_shutdown_trigger(&j));
  CHECK(vh::unix_seconds(
      j["Spec"]["Metadata"]["KubeVirt"]["GracePeriod"]["DeletionTimestamp"].get<std::string>()));
  doc.state = chl::events::DomainState::NoState;
  doc.reason = chl::events::StateReason::NonExistent;
  doc.deletion_timestamp = std::chrono::system_clock::now();
  j = chl::kubevirt::to_domain_json(doc);
  CHECK(vh::existing_domain(&j) == nullptr);
}

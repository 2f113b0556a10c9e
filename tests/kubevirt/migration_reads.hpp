#pragma once
// What both migration suites read from the launchers (the CH path's
// test_virt_launcher_migration.cpp, the libvirt path's migration_qemu_pods.hpp and its test and
// bench): the domain as GetDomain and the notify stream give it, its migration metadata, the
// guest's heartbeat on a console, and the source's report as virt-handler reads it.
#include <regex>
#include <string>
#include <vector>

#include "tests/kubevirt/virt_launcher_harness.hpp"

namespace chl::test::migration {

inline nlohmann::json domain(v1::Cmd::Stub& cmd) {
  v1::EmptyRequest empty;
  v1::DomainResponse dom;
  if (!call([&](auto& c) { return cmd.GetDomain(&c, empty, &dom); }, 10s).ok() || dom.domain().empty())
    return {};
  return nlohmann::json::parse(dom.domain(), nullptr, false);
}

// Spec.Metadata.KubeVirt.Migration, null when there is none.
inline nlohmann::json migration_of(const nlohmann::json& d) {
  if (!d.is_object()) return {};
  return d["Spec"]["Metadata"]["KubeVirt"].value("Migration", nlohmann::json());
}

// The domains notified, in order (the k8s events left out).
inline std::vector<nlohmann::json> domains(const chl::test::TestNotifyServer& n) {
  std::vector<nlohmann::json> out;
  for (const auto& r : n.received())
    if (!r.k8s) out.push_back(r.json);
  return out;
}

// Read the console at `path` until a whole "heartbeat N" line came (not its first bytes: a read
// can end inside the line, "heartbeat" without its number, or "heartbeat 1" of "heartbeat 12").
inline std::string read_heartbeat(const std::filesystem::path& path, std::chrono::milliseconds timeout) {
  static const std::regex whole("heartbeat \\d+\\r?\\n");
  return chl::test::read_socket_until(
      path, [](const std::string& got) { return std::regex_search(got, whole); }, timeout);
}

// The last "heartbeat N" the PVH guest printed in `text`.
inline unsigned last_heartbeat(const std::string& text) {
  unsigned last = 0;
  std::regex re("heartbeat (\\d+)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    last = static_cast<unsigned>(std::stoul((*it)[1]));
  return last;
}

// A succeeded migration as the source reported it: every record names `uid` in PreCopy mode,
// StartTimestamp came, and an EndTimestamp with Failed false.
inline void check_source_succeeded(const chl::test::TestNotifyServer& src, const std::string& uid) {
  bool started = false, ended = false;
  for (const auto& d : domains(src)) {
    const auto m = migration_of(d);
    if (m.is_null()) continue;
    CHECK(m["UID"] == uid);
    CHECK(m["Mode"] == "PreCopy");
    started = started || !m["StartTimestamp"].is_null();
    if (!m["EndTimestamp"].is_null()) {
      ended = true;
      CHECK(m["Failed"] == false);
    }
  }
  CHECK(started);
  CHECK(ended);
}

// An aborted migration as the source reports it once AbortStatus is Succeeded
// (live-migration-source.go: setMigrationResult(failed) with "Live migration has been aborted"):
// Failed, that reason, an EndTimestamp, and the VM running on here.
inline void check_source_aborted(v1::Cmd::Stub& src) {
  const auto d = domain(src);
  const auto m = migration_of(d);
  CHECK(m["Failed"] == true);
  CHECK(m["FailureReason"] == "Live migration has been aborted");
  CHECK_FALSE(m["EndTimestamp"].is_null());
  CHECK(d["Status"]["Status"] == "Running");
}

// virt-handler's SignalTargetPodCleanup to the target pod's launcher (the migration's
// targetPod): a success, and that launcher ends within 30 s.
inline void cleanup_target(v1::Cmd::Stub& dst, chl::common::ChildProcess& dst_child, const v1::VMIRequest& vmi) {
  v1::Response cr;
  REQUIRE(call([&](auto& c) { return dst.SignalTargetPodCleanup(&c, vmi, &cr); }).ok());
  CHECK_MESSAGE(cr.success(), cr.message());
  auto st = dst_child.wait_for(30s);
  REQUIRE(st);
  CHECK(st->has_value());
}

}  // namespace chl::test::migration

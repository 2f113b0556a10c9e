// The (source, event) → domain event/state table: every row, and every event CH emits.
#include <doctest/doctest.h>

#include <filesystem>
#include <set>

#include "events/domain_state_tracker.hpp"
#include "events/event_mapping.hpp"
#include "tests/support/test_support.hpp"

using namespace chl::events;

TEST_CASE("every event Cloud Hypervisor emits has a row") {
  // From CH's sources: main.rs, vmm/src/lib.rs, vmm/src/vm.rs, device_manager.rs, pvpanic.rs.
  const std::pair<const char*, const char*> ch_events[] = {
      {"vmm", "starting"}, {"vmm", "shutdown"},
      {"vm", "booting"}, {"vm", "booted"}, {"vm", "pausing"}, {"vm", "paused"},
      {"vm", "resuming"}, {"vm", "resumed"}, {"vm", "rebooting"}, {"vm", "rebooted"},
      {"vm", "shutdown"}, {"vm", "deleted"}, {"vm", "snapshotting"}, {"vm", "snapshotted"},
      {"vm", "restoring"}, {"vm", "restored"}, {"vm", "resizing"}, {"vm", "resized"},
      {"vm", "device-removed"},
      {"vm", "migration-started"}, {"vm", "migration-memory-iteration"},
      {"vm", "migration-finished"}, {"vm", "migration-failed"},
      {"vm", "migration-receive-started"}, {"vm", "migration-receive-finished"},
      {"vm", "migration-receive-failed"},
      {"guest", "panic"},
  };
  for (const auto& [source, event] : ch_events) {
    CAPTURE(source);
    CAPTURE(event);
    CHECK(find_mapping(source, event) != nullptr);
  }
  CHECK(find_mapping("vm", "no-such-event") == nullptr);
  CHECK(find_mapping("nope", "booted") == nullptr);
}

TEST_CASE("every row is well formed") {
  std::set<std::tuple<std::string_view, std::string_view, std::string_view>> keys;
  for (const auto& row : mapping_table()) {
    CAPTURE(row.source);
    CAPTURE(row.event);
    CAPTURE(row.qualifier);
    CHECK(keys.insert({row.source, row.event, row.qualifier}).second);  // no duplicate key
    CHECK_FALSE(row.comment.empty());
    CHECK(find_mapping(row.source, row.event, row.qualifier) == &row);
    if (row.emits) {
      CHECK(to_string(*row.emits) != "Invalid");
      CHECK(to_string(row.detail) != "Invalid");
    }
    if (row.state) CHECK(to_string(*row.state) != "Invalid");
    // "…ing" rows: remembered as pending, never a state change nor a domain event.
    const bool ing = row.event.size() > 3 && row.event.substr(row.event.size() - 3) == "ing" &&
                     row.source == "vm";
    if (ing) {
      CHECK(row.effect == TrackerEffect::Pending);
      CHECK_FALSE(row.state.has_value());
      CHECK_FALSE(row.emits.has_value());
    }
    if (row.effect == TrackerEffect::Pending) CHECK(ing);
  }
}

TEST_CASE("each CH row applied to a running domain reports exactly what the row says") {
  for (const auto& row : mapping_table()) {
    if (row.source == synthetic::kSource) continue;
    CAPTURE(row.source);
    CAPTURE(row.event);
    CAPTURE(row.qualifier);
    DomainStateTracker t;
    VmmEvent boot{0, 1, "vm", "booted", nullptr};
    REQUIRE(t.on_vmm_event(boot).size() == 1);
    REQUIRE(t.state() == DomainState::Running);
    VmmEvent e{7, 8, std::string(row.source), std::string(row.event), nullptr};
    if (!row.qualifier.empty()) e.properties = {{"event", std::string(row.qualifier)}};
    else if (row.source == "guest") e.properties = {{"event", "unknown_event"}};
    auto out = t.on_vmm_event(e);
    if (row.emits) {
      REQUIRE(out.size() == 1);
      CHECK(out[0].type == *row.emits);
      CHECK(out[0].detail == row.detail);
      CHECK(out[0].cause == e.key());
      CHECK(out[0].secs == 7);
      CHECK(out[0].nanos == 8);
      CHECK(out[0].properties == e.properties);
    } else {
      CHECK(out.empty());
    }
    if (row.state) {
      CHECK(t.state() == *row.state);
      CHECK(t.reason() == row.reason);
    } else {
      CHECK(t.state() == DomainState::Running);
      CHECK(t.reason() == StateReason::Booted);
    }
    if (!out.empty()) {
      CHECK(out[0].state == t.state());
      CHECK(out[0].reason == t.reason());
    }
    CHECK(t.pending().has_value() == (row.effect == TrackerEffect::Pending));
  }
}

TEST_CASE("the launcher's synthesized rows are reached by the tracker") {
  // vm-shutdown-forced
  {
    DomainStateTracker t;
    t.on_vmm_event({0, 0, "vm", "booted", nullptr});
    t.on_stop_requested(StopRequest::Forced);
    auto out = t.on_vmm_event({1, 0, "vm", "shutdown", nullptr});
    REQUIRE(out.size() == 1);
    CHECK(out[0].cause == "vm/shutdown");
    CHECK(out[0].detail == EventDetail::Destroyed);
    CHECK(t.state() == DomainState::Shutoff);
    CHECK(t.reason() == StateReason::Destroyed);
  }
  // vmm-exited-clean (never booted)
  {
    DomainStateTracker t;
    t.on_vmm_event({0, 0, "vmm", "starting", nullptr});
    t.on_vmm_event({0, 1, "vmm", "shutdown", nullptr});
    auto out = t.on_vmm_exited({false, 0});
    REQUIRE(out.size() == 1);
    CHECK(out[0].cause == "launcher/vmm-exited-clean");
    CHECK(t.state() == DomainState::Shutoff);
    CHECK(t.reason() == StateReason::Shutdown);
    CHECK(out[0].properties["exit_code"] == 0);
  }
  // vmm-exited-clean-forced
  {
    DomainStateTracker t;
    t.on_stop_requested(StopRequest::Forced);
    t.on_vmm_event({0, 1, "vmm", "shutdown", nullptr});
    auto out = t.on_vmm_exited({false, 0});
    REQUIRE(out.size() == 1);
    CHECK(out[0].cause == "launcher/vmm-exited-clean-forced");
    CHECK(t.reason() == StateReason::Destroyed);
  }
}

TEST_CASE("state - reason - type and detail names are KubeVirt's spelling - unique and reversible") {
  const DomainState states[] = {DomainState::NoState, DomainState::Running, DomainState::Blocked,
                                DomainState::Paused, DomainState::ShuttingDown, DomainState::Shutoff,
                                DomainState::Crashed, DomainState::PMSuspended};
  const char* names[] = {"NoState", "Running", "Blocked", "Paused", "ShuttingDown", "Shutoff", "Crashed", "PMSuspended"};
  for (std::size_t i = 0; i < std::size(states); ++i) {
    CHECK(to_string(states[i]) == names[i]);
    CHECK(domain_state_from_string(names[i]) == states[i]);
  }
  std::set<std::string_view> seen;
  for (int r = 0; r <= static_cast<int>(StateReason::NonExistent); ++r) {
    auto n = to_string(static_cast<StateReason>(r));
    CHECK(n != "Invalid");
    CHECK(seen.insert(n).second);
    CHECK(state_reason_from_string(n) == static_cast<StateReason>(r));
  }
  for (const char* kv : {"Unknown", "Booted", "User", "Migration", "Snapshot", "Shutdown", "Destroyed",
                         "Crashed", "Panicked", "Saved", "FromSnapshot", "Restored", "Migrated"})
    CHECK(state_reason_from_string(kv).has_value());
  seen.clear();
  for (int d = 0; d <= static_cast<int>(EventDetail::IncomingFailed); ++d) {
    auto n = to_string(static_cast<EventDetail>(d));
    CHECK(n != "Invalid");
    CHECK(seen.insert(n).second);
  }
  seen.clear();
  for (int t = 0; t <= static_cast<int>(DomainEventType::Migration); ++t) {
    auto n = to_string(static_cast<DomainEventType>(t));
    CHECK(n != "Invalid");
    CHECK(seen.insert(n).second);
  }
}

TEST_CASE("DomainEvent JSON form") {
  DomainEvent e{DomainEventType::Suspended, EventDetail::Paused, DomainState::Paused, StateReason::User,
                "vm/paused", 3, 4, nullptr};
  auto j = to_json(e);
  CHECK(j["type"] == "Suspended");
  CHECK(j["detail"] == "Paused");
  CHECK(j["state"] == "Paused");
  CHECK(j["reason"] == "User");
  CHECK(j["cause"] == "vm/paused");
  CHECK(j["timestamp"]["secs"] == 3);
  CHECK(j["timestamp"]["nanos"] == 4);
  CHECK(j["properties"].is_null());
}

TEST_CASE("docs/events.md lists every row of the table") {
  const auto doc_path = chl::test::source_dir() / "docs" / "events.md";
  REQUIRE(std::filesystem::exists(doc_path));
  const std::string doc = chl::test::read_file(doc_path);
  for (const auto& row : mapping_table()) {
    const std::string key = "| `" + std::string(row.source) + "/" + std::string(row.event) + "` | " +
                            (row.qualifier.empty() ? std::string() : "`" + std::string(row.qualifier) + "`") + " |";
    CAPTURE(key);
    CHECK(doc.find(key) != std::string::npos);
    CHECK(doc.find(std::string(row.comment)) != std::string::npos);
  }
}

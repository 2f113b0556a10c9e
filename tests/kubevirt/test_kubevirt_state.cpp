// The (libvirt state, reason) → KubeVirt (Status, Reason) table: KubeVirt's ConvState/ConvReason.
#include <doctest/doctest.h>

#include "kubevirt/kubevirt_state.hpp"

using chl::kubevirt::KubevirtState;
using chl::kubevirt::to_kubevirt_state;
using S = chl::events::DomainState;
using R = chl::events::StateReason;

TEST_CASE("kubevirt state: Running (and Blocked, PMSuspended) always carries reason Unknown") {
  for (R r : {R::Unknown, R::Booted, R::Unpaused, R::Restored, R::Migrated, R::Wakeup})
    CHECK(to_kubevirt_state(S::Running, r) == KubevirtState{"Running", "Unknown"});
  CHECK(to_kubevirt_state(S::Blocked, R::Unknown) == KubevirtState{"Blocked", "Unknown"});
  CHECK(to_kubevirt_state(S::PMSuspended, R::User) == KubevirtState{"PMSuspended", "Unknown"});
}

TEST_CASE("kubevirt state: Paused, ShuttingDown, Shutoff and Crashed carry their reasons") {
  CHECK(to_kubevirt_state(S::Paused, R::StartingUp) == KubevirtState{"Paused", "StartingUp"});
  CHECK(to_kubevirt_state(S::Paused, R::User) == KubevirtState{"Paused", "User"});
  CHECK(to_kubevirt_state(S::Paused, R::IOError) == KubevirtState{"Paused", "IOError"});
  CHECK(to_kubevirt_state(S::ShuttingDown, R::Unknown) == KubevirtState{"ShuttingDown", "Unknown"});
  CHECK(to_kubevirt_state(S::ShuttingDown, R::User) == KubevirtState{"ShuttingDown", "User"});
  CHECK(to_kubevirt_state(S::Shutoff, R::Shutdown) == KubevirtState{"Shutoff", "Shutdown"});
  CHECK(to_kubevirt_state(S::Shutoff, R::Destroyed) == KubevirtState{"Shutoff", "Destroyed"});
  CHECK(to_kubevirt_state(S::Shutoff, R::Crashed) == KubevirtState{"Shutoff", "Crashed"});
  CHECK(to_kubevirt_state(S::Shutoff, R::Failed) == KubevirtState{"Shutoff", "Failed"});
  CHECK(to_kubevirt_state(S::Crashed, R::Panicked) == KubevirtState{"Crashed", "Panicked"});
  CHECK(to_kubevirt_state(S::NoState, R::NonExistent) == KubevirtState{"NoState", "NonExistent"});
}

TEST_CASE("kubevirt state: a reason libvirt never gives for that state is Unknown") {
  CHECK(to_kubevirt_state(S::Shutoff, R::Booted) == KubevirtState{"Shutoff", "Unknown"});
  CHECK(to_kubevirt_state(S::Paused, R::Destroyed) == KubevirtState{"Paused", "Unknown"});
  CHECK(to_kubevirt_state(S::Crashed, R::User) == KubevirtState{"Crashed", "Unknown"});
  CHECK(to_kubevirt_state(S::NoState, R::Unknown) == KubevirtState{"NoState", "Unknown"});
}

TEST_CASE("kubevirt state: every table row is spelled as the launcher's own reason name") {
  // KubeVirt's StateChangeReason strings and events::to_string agree for every translated pair,
  // so logs and notifications use one vocabulary.
  for (const auto& row : chl::kubevirt::reason_table()) {
    INFO(chl::events::to_string(row.state) << "/" << chl::events::to_string(row.reason));
    CHECK(row.kubevirt_reason == chl::events::to_string(row.reason));
    CHECK(to_kubevirt_state(row.state, row.reason).reason == row.kubevirt_reason);
  }
}

#pragma once
// The launcher's domain states and reasons (libvirt's vocabulary, events/domain_state.hpp) as
// KubeVirt's virt-launcher reports them to virt-handler: the `LifeCycle` and
// `StateChangeReason` strings of api.Domain's Status, translated the way KubeVirt's
// ConvState/ConvReason do (docs/kubevirt/domain.md, "States").
#include <span>
#include <string_view>

#include "events/domain_state.hpp"

namespace chl::kubevirt {

struct KubevirtState {
  std::string_view status;  // "Running", "Paused", "ShuttingDown", "Shutoff", ...
  std::string_view reason;  // "Unknown", "User", "StartingUp", "Destroyed", "NonExistent", ...
  bool operator==(const KubevirtState&) const = default;
};

// Every (state, reason) pair; a reason that KubeVirt does not translate for that state (every
// reason of Running, Blocked and PMSuspended, for example) is reported as "Unknown".
KubevirtState to_kubevirt_state(events::DomainState state, events::StateReason reason);

// One row of the reason table: the reasons KubeVirt carries through for a state.
struct ReasonRow {
  events::DomainState state;
  events::StateReason reason;
  std::string_view kubevirt_reason;
};
// The table itself (for tests and docs).
std::span<const ReasonRow> reason_table();

}  // namespace chl::kubevirt

#pragma once
// The Cloud Hypervisor driver's half of translation: a LaunchPlan (plan.hpp) becomes the typed
// VmConfig body of `vm.create` (vmm_api/types.hpp). Pure: no file is touched.
#include "launcher/plan.hpp"
#include "vmm_api/types.hpp"

namespace chl::cloud_hypervisor {

vmm_api::VmConfig to_ch_vm_config(const launcher::LaunchPlan& plan);

// The whole plan for Cloud Hypervisor as JSON: {"hypervisor", "state_dir", "preparations",
// "vm_create"} (what `render --plan` prints and the golden tests compare).
nlohmann::json ch_plan_json(const launcher::LaunchPlan& plan);

}  // namespace chl::cloud_hypervisor

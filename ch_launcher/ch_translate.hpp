#pragma once
// The Cloud Hypervisor driver's half of translation: a LaunchPlan (plan.hpp) becomes the typed
// VmConfig body of `vm.create` (vmm_api/types.hpp). Pure: no file is touched.
#include "ch_launcher/plan.hpp"
#include "vmm_api/types.hpp"

namespace chl::core {

vmm_api::VmConfig to_ch_vm_config(const LaunchPlan& plan);

}  // namespace chl::core

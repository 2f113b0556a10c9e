#pragma once
// Carry out a LaunchPlan's preparations (plan.hpp) with disks/ and firmware/: create empty
// disks, convert container disks, write cloud-init media, find firmware. Updates the plan in
// place where a preparation decided the final file (a raw container disk used in place, the
// firmware found in the search path). Everything written goes under the VM's state directory
// (hostDisk DiskOrCreate excepted: its path is the user's). Nothing existing is overwritten,
// except cloud-init media and config-volume
// ISO images the launcher itself generated for this VMI.
#include <chrono>
#include <filesystem>
#include <vector>

#include "launcher/plan.hpp"
#include "common/error.hpp"

namespace chl::launcher {

struct PrepareOptions {
  std::vector<std::filesystem::path> firmware_dirs;  // empty: firmware/'s defaults
  // How long to wait for each virtiofs container's socket (Cloud Hypervisor's own bound).
  std::chrono::milliseconds virtiofs_wait{60000};
};

common::Status run_preparations(LaunchPlan& plan, const PrepareOptions& opts);

// At teardown (the VMI is gone for good): remove what only this run of the VMI needs — the
// ephemeral volumes' qcow2 overlays (the guest's writes to them are thrown away, as in KubeVirt)
// and the config-volume ISO images. Missing files are fine; the first other error is returned
// after trying every file.
common::Status remove_ephemeral_files(const LaunchPlan& plan);

}  // namespace chl::launcher

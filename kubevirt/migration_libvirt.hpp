#pragma once
// The QEMU/libvirt path's side of live migration in virt-launcher mode (docs/kubevirt/migration.md,
// "Live migration"): what KubeVirt's launcher hands libvirt (live-migration-source.go, d923fdb) and
// what keeps a VMI from migrating there. No libvirt here: the driver (drivers/libvirt/
// migration.cpp) does the libvirt calls behind launcher::Driver.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "launcher/driver.hpp"

namespace chl::kubevirt {

// What keeps this VMI from migrating on the libvirt path, each with why; empty when it can. A
// writable disk that is not shared storage would need libvirt's block migration, which KubeVirt
// does only when virt-handler asked for it (status.migrationMethod BlockMigration, from
// checkVolumesForMigration); ch-launcher does not implement it yet, so both are refused.
std::vector<std::string> not_migratable_on_libvirt(const nlohmann::json& vmi);

// The send as KubeVirt's migrateHelper / generateMigrationParams make it: the target libvirt
// through <proxy_dir>/<vmiUID>-source.sock, QEMU's stream to unix://<proxy_dir>/<vmiUID>-49152-
// source.sock, Bandwidth in MiB/s, the monitor's ProgressTimeout and CompletionTimeoutPerGiB x
// the guest memory in GiB (rounded up), and the flags' options. Fails on an option it cannot read.
common::Result<launcher::MigrationSend> libvirt_migration_send(const nlohmann::json& vmi,
                                                               const nlohmann::json& options,
                                                               const std::string& proxy_dir,
                                                               std::uint64_t memory_kib);

}  // namespace chl::kubevirt

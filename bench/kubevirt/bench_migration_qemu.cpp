// Live migration on the QEMU/libvirt path (docs/kubevirt/migration.md, "Live migration"): the PVH
// test guest (64 MiB and 1 GiB; KVM or TCG as the qemu tests choose) moved between two pods' own
// libvirt daemons through the migration-proxy stand-in, as
// tests/kubevirt/test_virt_launcher_migration_qemu.cpp does it, N rounds, medians of:
//   - total as virt-handler sees it: MigrateVirtualMachine sent -> the target's domain with
//     Migration.EndTimestamp received at the notify server;
//   - libvirt's own figures for the completed job (the target launcher logs them: time_elapsed
//     and downtime, QEMU's stop-and-copy to the target's resume).
// The peers: the Cloud Hypervisor path against the VMM double (bench/vmm_api/migration_bench,
// protocol cost only) and the real virt-launcher (kubevirt-observed-launcher/ has no migration).
// Timings only, nothing asserted on them. Run as root: bench_migration_qemu [-- N] (default 3).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>

#include "tests/kubevirt/migration_qemu_pods.hpp"

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// "completed in X ms, downtime Y ms" from the target launcher's log.
std::pair<double, double> libvirt_figures(const std::string& log) {
  std::smatch m;
  if (!std::regex_search(log, m, std::regex("completed in (\\d+) ms, downtime (\\d+) ms")))
    return {-1, -1};
  return {std::stod(m[1]), std::stod(m[2])};
}

// The VMI with `mib` MiB of guest memory (spec and status, as virt-handler sends it).
std::string vmi_with_memory(int mib) {
  auto j = nlohmann::json::parse(vmi_json());
  const std::string q = std::to_string(mib) + "Mi";
  j["spec"]["domain"]["memory"]["guest"] = q;
  j["status"]["memory"] = {{"guestAtBoot", q}, {"guestCurrent", q}, {"guestRequested", q}};
  return j.dump();
}

// N rounds of one migration of the PVH guest with `mib` MiB; RESULT rows keyed by `id`
// (migration_qemu_total_<id>, migration_qemu_downtime_<id>).
void bench_size(int mib, const std::string& id, const std::string& size) {
  int n = 3;
  if (const char* e = std::getenv("CHL_BENCH_N")) n = std::max(1, std::atoi(e));
  std::vector<double> total, elapsed, downtime;
  for (int i = 0; i < n; ++i) {
    TwoPods p;
    p.base = vmi_with_memory(mib);
    p.start();
    const std::string first =
        chl::test::read_socket_until(p.src.priv() / kUid / "virt-serial0", "heartbeat", 60s);
    REQUIRE(first.find("heartbeat") != std::string::npos);
    p.prepare_target();
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(p.migrate().success());
    REQUIRE(chl::test::wait_until(
        300s, [&] { return target_ended(p.dst_notify); }, 1ms));
    total.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    REQUIRE(chl::test::wait_until(
        30s, [&] { return p.dst.output().find("completed in") != std::string::npos; }));
    const auto [el, down] = libvirt_figures(p.dst.output());
    elapsed.push_back(el);
    downtime.push_back(down);
    std::printf("%s round %d: total %.0f ms, libvirt %.0f ms, downtime %.0f ms\n", size.c_str(),
                i + 1, total.back(), el, down);
    v1::VMIRequest vmi;
    vmi.mutable_vmi()->set_vmijson(migrating_vmi(p.base));
    v1::Response r;
    (void)call([&](auto& c) { return p.src_cmd->DeleteVirtualMachine(&c, vmi, &r); });
    kill_and_delete(*p.dst_cmd, vmi);
  }
  std::printf(
      "QEMU/libvirt live migration, PVH guest %s, %d rounds (medians): MigrateVirtualMachine -> "
      "target EndTimestamp %.0f ms; libvirt's job %.0f ms, downtime %.0f ms\n",
      size.c_str(), n, median(total), median(elapsed), median(downtime));
  // Beside the Cloud Hypervisor path's figures (migration_bench: the VMM double, protocol only).
  std::printf(
      "RESULT\tmigration_qemu_total_%s\tQEMU/libvirt live migration, %s PVH guest: "
      "MigrateVirtualMachine -> target EndTimestamp\t%.1f\t\t\tms\tinfo\t\n",
      id.c_str(), size.c_str(), median(total));
  std::printf(
      "RESULT\tmigration_qemu_downtime_%s\tQEMU/libvirt live migration, %s PVH guest: "
      "downtime (libvirt's)\t%.1f\t\t\tms\tinfo\t\n",
      id.c_str(), size.c_str(), median(downtime));
}

}  // namespace

TEST_CASE("bench: QEMU/libvirt live migration of the PVH guest between two pods, 64 MiB") {
  if (!pods_runnable()) return;
  bench_size(64, "64", "64 MiB");
}

// The guest touches little of its memory: QEMU sends the untouched pages as zero-page flags, so
// the 1 GiB figure is mostly libvirt's and QEMU's per-page walk, not 1 GiB of data.
TEST_CASE("bench: QEMU/libvirt live migration of the PVH guest between two pods, 1 GiB") {
  if (!pods_runnable()) return;
  bench_size(1024, "1g", "1 GiB");
}

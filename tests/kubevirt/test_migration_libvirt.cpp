// The QEMU/libvirt path's migration send, from the VMI and MigrationOptions as virt-handler sends
// them, and what it refuses (kubevirt/migration_libvirt.hpp; KubeVirt's generateMigrationParams,
// migrationMonitor and checkVolumesForMigration, d923fdb). No libvirt.
#include <doctest/doctest.h>

#include "kubevirt/migration_libvirt.hpp"

using chl::kubevirt::libvirt_migration_send;
using chl::kubevirt::not_migratable_on_libvirt;
using Json = nlohmann::json;

namespace {
Json vmi() {
  return Json::parse(R"({"metadata": {"uid": "u-1"}, "spec": {"domain": {"devices": {}}}})");
}
}  // namespace

TEST_CASE(
    "libvirt migration send: the proxy's sockets, Bandwidth in MiB/s, ProgressTimeout, "
    "CompletionTimeoutPerGiB x GiB rounded up, the flags' options") {
  auto m = libvirt_migration_send(
      vmi(),
      Json::parse(R"({"Bandwidth":"64Mi","ProgressTimeout":30,"CompletionTimeoutPerGiB":100,)"
                  R"("AllowAutoConverge":true,"AllowPostCopy":true,"UnsafeMigration":true,)"
                  R"("ParallelMigrationThreads":4})"),
      "/var/run/kubevirt/migrationproxy", 1536 * 1024);  // 1.5 GiB
  REQUIRE(m);
  CHECK(m->destination == "unix:/var/run/kubevirt/migrationproxy/u-1-source.sock");
  CHECK(m->migrate_uri == "unix:///var/run/kubevirt/migrationproxy/u-1-49152-source.sock");
  CHECK(m->bandwidth_mib == 64);
  CHECK(m->progress_timeout_s == 30);
  CHECK(m->completion_timeout_s == 200);  // 100 x 2 GiB
  CHECK(m->allow_auto_converge);
  CHECK(m->allow_post_copy);
  CHECK(m->allow_workload_disruption);  // AllowPostCopy stands for it where it is absent
  CHECK(m->unsafe);
  REQUIRE(m->parallel_threads);
  CHECK(*m->parallel_threads == 4);
}

TEST_CASE(
    "libvirt migration send: KubeVirt's defaults, and a Bandwidth that is no quantity refused") {
  auto d = libvirt_migration_send(vmi(), Json::parse(R"({"Bandwidth":"0Mi"})"), "/p", 64 * 1024);
  REQUIRE(d);
  CHECK(d->bandwidth_mib == 0);  // unlimited
  CHECK(d->progress_timeout_s == 150);
  CHECK(d->completion_timeout_s == 150);  // 64 MiB counts as 1 GiB
  CHECK_FALSE(d->allow_post_copy);
  CHECK_FALSE(d->allow_workload_disruption);
  CHECK_FALSE(d->parallel_threads);
  auto bad = libvirt_migration_send(vmi(), Json::parse(R"({"Bandwidth":"fast"})"), "/p", 64 * 1024);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message().find("Bandwidth") != std::string::npos);
}

TEST_CASE(
    "libvirt migration refusals: writable local disks and non-RWX PVCs, not read-only media, "
    "hostDisks, RWX PVCs or interfaces") {
  auto j = vmi();
  j["spec"]["domain"]["devices"]["disks"] = Json::parse(R"([
    {"name": "scratch", "disk": {"bus": "virtio"}},
    {"name": "cloudinit", "disk": {"bus": "virtio", "readonly": true}},
    {"name": "shared", "disk": {"bus": "virtio"}},
    {"name": "rwo", "disk": {"bus": "virtio"}},
    {"name": "host", "disk": {"bus": "virtio"}}])");
  j["spec"]["domain"]["devices"]["interfaces"] =
      Json::parse(R"([{"name": "default", "masquerade": {}}])");
  j["spec"]["volumes"] = Json::parse(R"([
    {"name": "scratch", "emptyDisk": {"capacity": "1Gi"}},
    {"name": "cloudinit", "cloudInitNoCloud": {"userData": "x"}},
    {"name": "shared", "persistentVolumeClaim": {"claimName": "a"}},
    {"name": "rwo", "persistentVolumeClaim": {"claimName": "b"}},
    {"name": "host", "hostDisk": {"path": "/d.img", "type": "Disk"}}])");
  j["status"]["volumeStatus"] = Json::parse(R"([
    {"name": "shared", "persistentVolumeClaimInfo": {"accessModes": ["ReadWriteMany"]}},
    {"name": "rwo", "persistentVolumeClaimInfo": {"accessModes": ["ReadWriteOnce"]}}])");
  const auto why = not_migratable_on_libvirt(j);
  REQUIRE(why.size() == 2);
  CHECK(why[0].find("volume scratch") == 0);
  CHECK(why[1].find("volume rwo") == 0);
  CHECK(not_migratable_on_libvirt(vmi()).empty());
}

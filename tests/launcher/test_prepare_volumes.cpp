// Config volumes (configMap, secret, serviceAccount, downwardAPI) and ephemeral volumes from the
// VMI through the plan and run_preparations() to the files Cloud Hypervisor is given: an ISO
// per config volume (volume id "cfgdata" or volumeLabel, read-only), a qcow2 overlay per
// ephemeral volume (image_type Qcow2, backing_files on), removed again by
// remove_ephemeral_files().
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "drivers/cloud_hypervisor/translate.hpp"
#include "launcher/plan.hpp"
#include "launcher/prepare.hpp"
#include "vmi/validator.hpp"
#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using namespace chl::cloud_hypervisor; using namespace chl::launcher; using namespace chl::vmi;
using chl::test::read_file;
using chl::test::run_command;
using chl::test::skip;
using chl::test::TempDir;
using chl::test::tool;
using chl::test::write_file;

namespace {

const char* kVmi = R"(apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: cfg
  namespace: lab
  uid: 0b6c1a9e-5c3f-4c1e-9a55-3c8a8f0d2e11
spec:
  domain:
    devices:
      disks:
      - name: scratch
        disk: {bus: virtio}
      - name: app-config
        disk: {bus: virtio}
      - name: creds
        disk: {bus: virtio}
      - name: sa
        disk: {bus: virtio}
    resources:
      requests:
        memory: 128Mi
  volumes:
  - name: scratch
    ephemeral:
      persistentVolumeClaim:
        claimName: base-image
  - name: app-config
    configMap:
      name: app-settings
  - name: creds
    secret:
      secretName: db-creds
      volumeLabel: creds
  - name: sa
    serviceAccount:
      serviceAccountName: default
)";

CheckedVmi checked() {
  auto c = check_vmi(kVmi, "cloud-hypervisor");
  if (!c) {
    std::string all;
    for (const auto& v : c.error()) all += to_string(v) + "\n";
    FAIL("does not validate:\n" << all);
  }
  return std::move(*c);
}

// A kubelet-style volume directory: key -> ..data/key, ..data -> ..<timestamp>.
void kubelet_dir(const fs::path& dir, const std::string& key, const std::string& value) {
  const fs::path ts = dir / "..2026_11_22_16_00_00.000000001";
  fs::create_directories(ts);
  write_file(ts / key, value);
  fs::create_directory_symlink(ts.filename(), dir / "..data");
  fs::create_symlink("..data/" + key, dir / key);
}

std::string blkid_label(const fs::path& img) {
  auto r = run_command({*tool("blkid"), "-p", "-o", "value", "-s", "LABEL", img.string()});
  std::string v = r.output;
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v;
}

}  // namespace

TEST_CASE("plan: config volumes are read-only ISO disks labelled cfgdata or volumeLabel") {
  CheckedVmi c = checked();
  PlanInputs in;
  in.pod_layout = true;
  auto p = plan_launch(c.vmi, *c.caps, in);
  REQUIRE(p.has_value());
  int config = 0;
  for (const auto& prep : p->preparations) {
    if (prep.kind != PreparationKind::WriteConfigDisk) continue;
    ++config;
    if (prep.volume == "app-config") {
      CHECK(prep.volume_label == "cfgdata");
      CHECK(prep.source == "/var/run/kubevirt-private/config-map/app-config");
    } else if (prep.volume == "creds") {
      CHECK(prep.volume_label == "creds");
      CHECK(prep.source == "/var/run/kubevirt-private/secret/creds");
    } else {
      CHECK(prep.volume == "sa");
      CHECK(prep.source == "/var/run/secrets/kubernetes.io/serviceaccount");
    }
  }
  CHECK(config == 3);
  for (const auto& d : p->disks) CHECK(d.readonly == (d.name != "scratch"));
  nlohmann::json j = to_ch_vm_config(*p);
  CHECK(j["disks"][0]["id"] == "scratch");
  CHECK(j["disks"][0]["image_type"] == "Qcow2");
  CHECK(j["disks"][0]["backing_files"] == true);
  CHECK(j["disks"][1]["readonly"] == true);
}

TEST_CASE("prepare: config ISOs and the ephemeral overlay are written, then removed at teardown") {
  if (!tool("blkid") || !tool("isoinfo") || !tool("qemu-img")) {
    skip("needs blkid, isoinfo and qemu-img");
    return;
  }
  TempDir tmp("chlprep");
  kubelet_dir(tmp / "cm", "settings.yaml", "mode: fast\n");
  kubelet_dir(tmp / "secret", "password", "hunter2");
  kubelet_dir(tmp / "sa", "token", "eyJhbGciOi");
  write_file(tmp / "base.img", std::string(1 << 20, 'b'));
  CheckedVmi c = checked();
  PlanInputs in;
  in.state_dir = (tmp / "state").string();
  in.firmware_path = (tmp / "hypervisor-fw").string();  // no firmware search: disks only
  in.volume_paths = {{"scratch", (tmp / "base.img").string()},
                     {"app-config", (tmp / "cm").string()},
                     {"creds", (tmp / "secret").string()},
                     {"sa", (tmp / "sa").string()}};
  auto p = plan_launch(c.vmi, *c.caps, in);
  REQUIRE(p.has_value());
  auto st = run_preparations(*p, PrepareOptions{});
  REQUIRE_MESSAGE(st, (st ? "" : st.error().message()));

  const fs::path cm_iso = tmp / "state/config-disks/app-config.iso";
  const fs::path secret_iso = tmp / "state/config-disks/creds.iso";
  const fs::path overlay = tmp / "state/ephemeral-disks/scratch.qcow2";
  CHECK(blkid_label(cm_iso) == "cfgdata");
  CHECK(blkid_label(secret_iso) == "creds");
  auto out = run_command({"/bin/sh", "-c",
                          "isoinfo -R -i '" + secret_iso.string() + "' -x /password"});
  CHECK(out.output == "hunter2");
  auto ls = run_command({*tool("isoinfo"), "-R", "-f", "-i", cm_iso.string()});
  CHECK(ls.output == "/settings.yaml\n");
  auto info = run_command({*tool("qemu-img"), "info", "--output=json", overlay.string()});
  REQUIRE_MESSAGE(info.exit_code == 0, info.output);
  auto j = nlohmann::json::parse(info.output);
  CHECK(j["backing-filename"] == (tmp / "base.img").string());
  CHECK(j["backing-filename-format"] == "raw");

  // A second start rebuilds the config ISOs and keeps the overlay.
  write_file(tmp / "cm/..data/settings.yaml", "mode: slow\n");
  const std::string overlay_before = read_file(overlay);
  st = run_preparations(*p, PrepareOptions{});
  REQUIRE_MESSAGE(st, (st ? "" : st.error().message()));
  auto again = run_command({"/bin/sh", "-c",
                            "isoinfo -R -i '" + cm_iso.string() + "' -x /settings.yaml"});
  CHECK(again.output == "mode: slow\n");
  CHECK(read_file(overlay) == overlay_before);

  auto rm = remove_ephemeral_files(*p);
  REQUIRE(rm);
  CHECK_FALSE(fs::exists(overlay));
  CHECK_FALSE(fs::exists(cm_iso));
  CHECK(fs::exists(tmp / "base.img"));
  CHECK(remove_ephemeral_files(*p));  // nothing left to remove is fine
}

TEST_CASE("prepare: a config volume with a symlink out of its directory fails naming it") {
  TempDir tmp("chlprep");
  kubelet_dir(tmp / "cm", "settings.yaml", "x");
  kubelet_dir(tmp / "secret", "password", "x");
  kubelet_dir(tmp / "sa", "token", "x");
  fs::create_symlink("/etc/shadow", tmp / "secret" / "shadow");
  write_file(tmp / "base.img", std::string(4096, 'b'));
  CheckedVmi c = checked();
  PlanInputs in;
  in.state_dir = (tmp / "state").string();
  in.firmware_path = (tmp / "hypervisor-fw").string();  // no firmware search: disks only
  in.volume_paths = {{"scratch", (tmp / "base.img").string()},
                     {"app-config", (tmp / "cm").string()},
                     {"creds", (tmp / "secret").string()},
                     {"sa", (tmp / "sa").string()}};
  auto p = plan_launch(c.vmi, *c.caps, in);
  REQUIRE(p.has_value());
  auto st = run_preparations(*p, PrepareOptions{});
  REQUIRE_FALSE(st);
  const std::string msg = st.error().message();
  INFO(msg);
  CHECK(msg.find("write-config-disk 'creds'") != std::string::npos);
  CHECK(msg.find("'shadow' (-> '/etc/shadow') is a symlink leading outside") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "state/config-disks/creds.iso"));
}

// What the qemu-kvm table accepts, libvirt and QEMU carry out: a VMI with tablets, a sound card,
// a watchdog, a TPM (swtpm), Hyper-V enlightenments and a clock runs through ch-launcher run (real
// libvirtd, real QEMU, the PVH guest under TCG), and the live domain and QEMU's device tree have
// each of them.
// (The XML itself: test_domain_xml.cpp; the audit: docs/qemu/daemon.md.)
#include <algorithm>
#include <fstream>

#include "tests/support/qemu_harness.hpp"

using chl::test::libvirt_runnable;
using chl::test::QemuRun;
using chl::test::run_command;
using namespace std::chrono_literals;

TEST_CASE(
    "qemu-kvm run: inputs, sound, watchdog, TPM, Hyper-V, the clock, I/O threads and block sizes "
    "reach the live domain and QEMU") {
  if (!libvirt_runnable()) return;
  QemuRun r;
  r.write_vmi("console=ttyS0");
  // devices.tpm needs swtpm (scripts/setup.sh installs swtpm, swtpm-tools); without it the rest
  // is checked.
  const bool swtpm =
      chl::test::tool("swtpm").has_value() && chl::test::tool("swtpm_setup").has_value();
  if (!swtpm) chl::test::skip_part("swtpm not installed (scripts/setup.sh): the TPM not checked");
  {
    // Appended under spec.domain.devices, then spec.domain's own keys (write_vmi ends in devices).
    std::ofstream f(r.vmi_file(), std::ios::app);
    f << "      inputs:\n      - {name: tablet0, type: tablet, bus: usb}\n"
         "      - {name: tablet1, type: tablet, bus: virtio}\n"
         "      sound: {name: audio}\n"
         "      watchdog: {name: wd, i6300esb: {action: poweroff}}\n"
         "      disks:\n      - {name: shared, disk: {bus: virtio, pciAddress: \"0000:00:0a.0\"}}\n"
         "      - {name: own, dedicatedIOThread: true, disk: {bus: virtio},\n"
         "         blockSize: {custom: {logical: 512, physical: 4096}}}\n"
      << (swtpm ? "      tpm: {}\n" : "")
      << "    features:\n      hyperv: {relaxed: {}, vapic: {}, spinlocks: {}}\n"
         "    clock:\n      utc: {offsetSeconds: 3600}\n      timer: {rtc: {tickPolicy: catchup}, "
         "hpet: {present: false}}\n"
         "    ioThreadsPolicy: shared\n"
         "  volumes:\n  - {name: shared, emptyDisk: {capacity: 16Mi}}\n"
         "  - {name: own, emptyDisk: {capacity: 16Mi}}\n";
  }
  r.go();
  REQUIRE_MESSAGE(r.running(), r.output());
  const long pid = r.qemu_pid();

  auto live = run_command({"virsh", "-c", "qemu:///system", "dumpxml", "default_testvm"});
  REQUIRE_MESSAGE(live.exit_code == 0, live.output);
  const std::string& x = live.output;
  CAPTURE(x);
  auto has = [&x](const std::string& s) { return x.find(s) != std::string::npos; };
  CHECK(has("<input type='tablet' bus='usb'>"));
  CHECK(has("<alias name='ua-tablet0'/>"));
  CHECK(has("<input type='tablet' bus='virtio'"));
  CHECK(has("<alias name='ua-tablet1'/>"));
  CHECK(has("<sound model='ich9'>"));
  CHECK(has("<alias name='ua-audio'/>"));
  CHECK(has("<watchdog model='i6300esb' action='poweroff'>"));
  CHECK(has("<alias name='ua-wd'/>"));
  CHECK(has("<relaxed state='on'/>"));
  CHECK(has("<spinlocks state='on' retries='4096'/>"));
  CHECK(has("<clock offset='variable' adjustment='3600' basis='utc'>"));  // libvirt's live form
  CHECK(has("<timer name='rtc' present='yes' tickpolicy='catchup'/>"));
  CHECK(has("<timer name='hpet' present='no'"));
  // ioThreadsPolicy shared + a dedicated disk: one shared thread (1) and the disk's own (2).
  CHECK(has("<iothreads>2</iothreads>"));
  CHECK(has("iothread='1'"));
  CHECK(has("iothread='2'"));
  CHECK(has("<address type='pci' domain='0x0000' bus='0x00' slot='0x0a' function='0x0'/>"));
  if (swtpm) {
    CHECK(has("<tpm model='tpm-tis'>"));
    CHECK(has("<backend type='emulator' version='2.0'"));
  }

  // QEMU has the devices (its device tree through the monitor).
  auto qtree = run_command({"virsh", "-c", "qemu:///system", "qemu-monitor-command",
                            "default_testvm", "--hmp", "info qtree"});
  REQUIRE_MESSAGE(qtree.exit_code == 0, qtree.output);
  const std::string& q = qtree.output;
  CAPTURE(q);
  for (const char* dev :
       {"usb-tablet", "virtio-tablet", "ich9-intel-hda", "hda-duplex", "i6300esb"})
    CHECK_MESSAGE(q.find(std::string("dev: ") + dev) != std::string::npos, dev);
  if (swtpm) {
    CHECK_MESSAGE(q.find("dev: tpm-tis") != std::string::npos, "tpm-tis");
    // QEMU's TPM backend is libvirt's swtpm, running beside it.
    auto tpm = run_command({"virsh", "-c", "qemu:///system", "qemu-monitor-command",
                            "default_testvm", "--hmp", "info tpm"});
    CHECK_MESSAGE(tpm.output.find("emulator") != std::string::npos, tpm.output);
    auto ps = run_command({"pgrep", "-f", "swtpm socket.*default_testvm"});
    CHECK_MESSAGE(ps.exit_code == 0, "no swtpm process for the domain");
  }
  auto iothreads = run_command({"virsh", "-c", "qemu:///system", "qemu-monitor-command",
                                "default_testvm", "--hmp", "info iothreads"});
  CHECK_MESSAGE(iothreads.output.find("iothread2") != std::string::npos, iothreads.output);
  // The watchdog's action and the RTC's policy are QEMU's command line (libvirt gives them there).
  const std::string cmdline = chl::test::read_file("/proc/" + std::to_string(pid) + "/cmdline");
  std::string args = cmdline;
  std::replace(args.begin(), args.end(), '\0', ' ');
  CAPTURE(args);
  CHECK((args.find("-watchdog-action poweroff") != std::string::npos ||
         args.find("\"action\":\"poweroff\"") != std::string::npos ||
         args.find("watchdog=poweroff") != std::string::npos));
  CHECK(args.find("hv-relaxed") != std::string::npos);
  // Each virtio-blk device on its thread (a link property, which info qtree does not print).
  CHECK(args.find("\"iothread\":\"iothread1\"") != std::string::npos);
  CHECK(args.find("\"iothread\":\"iothread2\"") != std::string::npos);
  CHECK(args.find("\"logical_block_size\":512,\"physical_block_size\":4096") != std::string::npos);
  CHECK(args.find("driftfix=slew") != std::string::npos);  // rtc tickPolicy catchup

  CHECK(r.cli({"kill"}).exit_code == 0);
  auto exit = r.wait_exit(120s);
  REQUIRE(exit);
  r.check_clean_qemu(pid, {"empty-disks"});  // the emptyDisks last, as KubeVirt's do
  if (swtpm)                                 // libvirt stops the domain's swtpm with it
    CHECK(chl::test::wait_until(
        30s,
        [] {
          return run_command({"pgrep", "-f", "swtpm socket.*default_testvm"}).exit_code != 0;
        },
        100ms));
}

TEST_CASE("qemu-kvm run: useVirtioTransitional gives QEMU transitional virtio devices") {
  if (!libvirt_runnable()) return;
  QemuRun r;
  r.write_vmi("console=ttyS0");
  {
    std::ofstream f(r.vmi_file(), std::ios::app);
    f << "      useVirtioTransitional: true\n"
         "      rng: {}\n"
         "      disks: [{name: scratch, disk: {bus: virtio}}]\n"
         "  volumes: [{name: scratch, emptyDisk: {capacity: 16Mi}}]\n";
  }
  r.go();
  REQUIRE_MESSAGE(r.running(), r.output());
  const long pid = r.qemu_pid();
  std::string args = chl::test::read_file("/proc/" + std::to_string(pid) + "/cmdline");
  std::replace(args.begin(), args.end(), '\0', ' ');
  CAPTURE(args);
  for (const char* dev : {"virtio-blk-pci-transitional", "virtio-scsi-pci-transitional",
                          "virtio-serial-pci-transitional", "virtio-rng-pci-transitional",
                          "virtio-balloon-pci-transitional", "pcie-pci-bridge"})
    CHECK_MESSAGE(args.find(std::string("\"driver\":\"") + dev + "\"") != std::string::npos, dev);
  CHECK(r.cli({"kill"}).exit_code == 0);
  REQUIRE(r.wait_exit(120s));
  r.check_clean_qemu(pid, {"empty-disks"});
}

// The guest agent on the libvirt path: GuestPing and GetGuestInfo through gRPC in virt-launcher
// mode (`--hypervisor kvm`), the launcher reaching Debian's real qemu-ga in the Linux test guest
// (QEMU, TCG here) through libvirt's virDomainQemuAgentCommand — the figures beside the Cloud
// Hypervisor path's (bench_guest_agent: the double's hybrid vsock and a host qemu-ga). Built on
// the virt-launcher test harness, run as a doctest case; prints RESULT lines (bench/run.sh).
// Usage: bench_guest_agent_qemu [-- N]   (root; libvirtd, QEMU and build/guests/linux needed)
#include <algorithm>
#include <cstdio>

#include "tests/kubevirt/virt_launcher_harness.hpp"

namespace {

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

template <typename F>
double micros(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("bench: GuestPing and GetGuestInfo through libvirt's agent API (qemu-kvm)") {
  if (!chl::test::libvirt_runnable()) return;
  std::string why;
  auto guest = chl::test::find_linux_guest(&why);
  if (!guest) {
    chl::test::skip(why);
    return;
  }
  int n = 200;
  if (const char* e = std::getenv("CHL_BENCH_N"); e && *e) n = std::max(10, std::atoi(e));
  Pod pod;
  chl::test::TestNotifyServer notify(pod.share() / "domain-notify-pipe.sock");
  auto cmd = pod.serve();  // its kernel-boot directory holds the PVH guest; the Linux one beside
  const auto kb = pod.cdisks() / "kernel-boot";
  fs::copy_file(guest->kernel, kb / "vmlinuz", fs::copy_options::overwrite_existing);
  fs::copy_file(guest->initramfs, kb / "initramfs.cpio.gz", fs::copy_options::overwrite_existing);
  auto j = nlohmann::json::parse(vmi_json());
  j["spec"]["domain"]["memory"]["guest"] = "256Mi";
  j["status"]["memory"] = {
      {"guestAtBoot", "256Mi"}, {"guestCurrent", "256Mi"}, {"guestRequested", "256Mi"}};
  j["spec"]["domain"]["firmware"]["kernelBoot"] = {
      {"kernelArgs", "console=ttyS0 quiet panic=-1 no_timer_check"},
      {"container",
       {{"image", "registry.example/linux:1"},
        {"kernelPath", "/vmlinuz"},
        {"initrdPath", "/initramfs.cpio.gz"}}}};
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(j.dump());
  v1::Response r;
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }, 120s).ok());
  REQUIRE_MESSAGE(r.success(), r.message() << "\n" << pod.output());
  v1::EmptyRequest empty;
  v1::GuestInfoResponse gi;
  REQUIRE_MESSAGE(chl::test::wait_until(
                      360s,
                      [&] {
                        if (!call([&](auto& c) { return cmd->GetGuestInfo(&c, empty, &gi); }).ok())
                          return false;
                        auto g = nlohmann::json::parse(gi.guestinforesponse(), nullptr, false);
                        return g.is_object() && g.contains("supportedCommands");
                      }),
                  pod.output());
  v1::GuestPingRequest ping;
  ping.set_domainname("default_testvm");
  ping.set_timeoutseconds(10);
  v1::GuestPingResponse pr;
  std::vector<double> pings, infos;
  for (int i = 0; i < n; ++i) {
    pings.push_back(micros(
        [&] { REQUIRE(call([&](auto& c) { return cmd->GuestPing(&c, ping, &pr); }).ok()); }));
    infos.push_back(micros(
        [&] { REQUIRE(call([&](auto& c) { return cmd->GetGuestInfo(&c, empty, &gi); }).ok()); }));
  }
  std::printf(
      "libvirt path, %d calls: GuestPing p50 %.0f us, p99 %.0f us; GetGuestInfo p50 %.0f us, p99 "
      "%.0f us\n",
      n, pct(pings, 0.5), pct(pings, 0.99), pct(infos, 0.5), pct(infos, 0.99));
  std::printf(
      "RESULT\tga_qemu_ping_p50\tguest agent: GuestPing over gRPC + libvirt's agent API (QEMU TCG, "
      "real qemu-ga in the guest), p50\t%.0f\t\t\tus\tabs_le\t20000\n",
      pct(pings, 0.5));
  std::printf(
      "RESULT\tga_qemu_ping_p99\tguest agent: GuestPing over gRPC + libvirt's agent API (QEMU TCG, "
      "real qemu-ga in the guest), p99\t%.0f\t\t\tus\tabs_le\t100000\n",
      pct(pings, 0.99));
  std::printf(
      "RESULT\tga_qemu_info_p50\tguest agent: GetGuestInfo (cache), libvirt path, "
      "p50\t%.0f\t\t\tus\tabs_le\t1000\n",
      pct(infos, 0.5));
  std::printf(
      "RESULT\tga_qemu_info_p99\tguest agent: GetGuestInfo (cache), libvirt path, "
      "p99\t%.0f\t\t\tus\tabs_le\t3000\n",
      pct(infos, 0.99));
  kill_and_delete(*cmd, vmi);
  (void)pod.child.wait_for(60s);
}

#pragma once
// Limits of this machine, not of ours, proven by a direct call of the real Cloud Hypervisor
// (CLOUD_HYPERVISOR_BIN): no launcher, no harness of ours between the test and CH. A test that
// cannot run a part on the real VMM skips that part only with the reason these return, which
// names the limit and the call that proved it (../shared/bin/README.md, issue 39).
#include <optional>
#include <string>

namespace chl::test {

// Why the real VMM cannot save a running VM's vCPU state here, so neither `vm.snapshot` nor
// `vm.send-migration` can work (both take it through the same path: CH v52 vmm/src/lib.rs
// vm_snapshot and send_migration call Vm::snapshot, whose vCPUs' state needs KVM's nested state,
// hypervisor/src/kvm/mod.rs GetNestedState). Proven once per test process and cached: the real
// VMM is started by itself with the project's PVH guest (vm.create, vm.boot, vm.pause,
// vm.snapshot), and only when it answers with CH's GetNestedState error is the reason given —
// "this machine's KVM (nested) cannot give a vCPU's nested state: <binary> alone answered
// vm.snapshot with: <CH's chain>". nullopt against the VMM double, or when the real VMM could
// take the snapshot (then the test must run its part and pass), or when the probe could not run
// at all (that is printed; the test then runs its part and fails if CH really fails).
const std::optional<std::string>& real_vmm_cannot_save_vcpu_state();

// Why the real VMM cannot run a full Linux kernel on this machine (../shared/bin/README.md: it
// dies under this KVM before it prints anything). Proven once per test process and cached: the
// real VMM is started by itself (its command line, no API, no launcher) with the Linux test
// guest's `kernel` and `initramfs` and `console=ttyS0 earlyprintk=ttyS0`, and only when COM1
// stays silent for 60 s is the reason given. nullopt against the VMM double, or when the kernel
// printed (then the test must run and pass), or when the probe could not run (printed).
const std::optional<std::string>& real_vmm_cannot_run_linux(const std::string& kernel,
                                                            const std::string& initramfs);

// Why a test of the guest agent cannot run on the real VMM here: the agent (qemu-ga on CH's
// hybrid vsock) runs in a guest, the PVH test guest has none, and the only guest of ours that could
// carry one is the Linux test guest, whose kernel this machine's KVM cannot run — proven by
// real_vmm_cannot_run_linux on that guest (the reason carries the proof). nullopt against the VMM
// double (its pretend guest bridges vsock to a host or scripted agent). When the Linux guest is
// not built the reason says so (the kernel could not be tried); when it runs here the reason says
// that these tests do not yet boot it with an agent (a limit of ours, then printed as such).
std::optional<std::string> real_vmm_has_no_guest_agent();

}  // namespace chl::test

#pragma once
// The ACPI power button as Cloud Hypervisor v52 exposes it, and whether the pretend guest can
// reach it. CH's power button is the GED notification register (devices/src/acpi.rs
// AcpiGedDevice, one byte, bit 3 = power button), placed in the platform MMIO area at the top of
// the guest physical address space (vmm/src/memory_manager.rs MemoryManager::new: the last
// 1 MiB below 2^phys_bits - 64 KiB; vm-allocator/src/address.rs allocates it top-down, one
// 4 KiB page per device): far above 4 GiB. A guest that cannot map it never sees the button.
// The double runs no guest code, so the guest kernel says in an ELF note how it reaches the
// register (tests/guests/pvh_guest.S, note "chl-test-guest" type 1) and the double checks that
// against the address CH would use. A kernel without the note does not reach it.
#include <cstdint>
#include <optional>
#include <string>

namespace chl::vmm_double {

// vmm/src/vm.rs physical_bits: min(the host CPU's MAXPHYADDR (arch/src/x86_64/mod.rs
// get_host_cpu_phys_bits, CPUID 0x80000008), cpus.max_phys_bits (46 by default)).
unsigned ch_phys_bits(unsigned max_phys_bits);

// The GED register's guest physical address. Platform MMIO allocations before it, each one page
// from the top down: the memory manager's ACPI device when memory hotplug is ACPI with a
// hotplug_size (memory_manager.rs), the device manager's and the CPU manager's ACPI devices
// (device_manager.rs DeviceManager::new), then the GED (add_acpi_devices).
std::uint64_t ch_ged_address(unsigned phys_bits, bool acpi_memory_hotplug);

// The PCI hotplug registers' address (the DeviceManager's ACPI device, 16 bytes: PCIU, PCID,
// B0EJ, PSEG; vmm/src/device_manager.rs DEVICE_MANAGER_ACPI_SIZE): the first allocation after
// the memory manager's.
std::uint64_t ch_pcst_address(unsigned phys_bits, bool acpi_memory_hotplug);

// How the guest reaches MMIO above 4 GiB, from its ELF note (type 1), and whether it ejects a
// PCI device CH asks it to remove (type 2, descriptor 1; tests/guests/pvh_guest.S pci_hotplug).
enum class GuestPaging : std::uint32_t { None = 0, Pae = 1, FourLevel = 2 };
struct GuestReach {
  unsigned address_bits = 0;  // 0: the CPU's MAXPHYADDR
  GuestPaging paging = GuestPaging::None;
  bool ejects_pci = false;  // no type-2 entry: it never ejects (CH keeps the device)
};
// The note of `kernel` (nullopt: not an ELF file with a type-1 entry).
std::optional<GuestReach> read_guest_reach(const std::string& kernel);

// Whether a guest with `reach` polls a register at `addr`; `why` says why not. A PAE-paged guest
// does not run on a host whose KVM is the nested kvm_pvm module (it runs paged guests only in
// long mode: docs/guests.md), which the double sees as /sys/module/kvm_pvm.
bool guest_reaches(const std::optional<GuestReach>& reach, std::uint64_t addr, std::string& why);

}  // namespace chl::vmm_double

#include "tests/vmm_double/acpi_ged.hpp"

#include <cpuid.h>
#include <elf.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

namespace chl::vmm_double {

namespace {

unsigned cpu_phys_bits() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0x80000000, &eax, &ebx, &ecx, &edx) == 0 || eax < 0x80000008) return 36;
  __get_cpuid(0x80000008, &eax, &ebx, &ecx, &edx);
  return eax & 0xff;
}

template <typename Ehdr, typename Phdr>
std::optional<GuestReach> notes(const std::vector<char>& f) {
  if (f.size() < sizeof(Ehdr)) return std::nullopt;
  Ehdr eh;
  std::memcpy(&eh, f.data(), sizeof eh);
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    const std::uint64_t off = eh.e_phoff + static_cast<std::uint64_t>(i) * eh.e_phentsize;
    if (off + sizeof(Phdr) > f.size()) return std::nullopt;
    Phdr ph;
    std::memcpy(&ph, f.data() + off, sizeof ph);
    if (ph.p_type != PT_NOTE || ph.p_offset + ph.p_filesz > f.size()) continue;
    std::optional<GuestReach> reach;
    bool ejects = false;
    std::uint64_t p = ph.p_offset;
    const std::uint64_t end = ph.p_offset + ph.p_filesz;
    while (p + 12 <= end) {
      std::uint32_t namesz, descsz, type;
      std::memcpy(&namesz, f.data() + p, 4);
      std::memcpy(&descsz, f.data() + p + 4, 4);
      std::memcpy(&type, f.data() + p + 8, 4);
      const std::uint64_t name_at = p + 12;
      const std::uint64_t desc_at = name_at + ((namesz + 3u) & ~3u);
      const std::uint64_t next = desc_at + ((descsz + 3u) & ~3u);
      if (next > end) break;
      const std::string name(f.data() + name_at, namesz ? namesz - 1 : 0);
      if (name == "chl-test-guest" && type == 1 && descsz >= 8) {
        std::uint32_t bits, paging;
        std::memcpy(&bits, f.data() + desc_at, 4);
        std::memcpy(&paging, f.data() + desc_at + 4, 4);
        reach = GuestReach{bits, static_cast<GuestPaging>(std::min<std::uint32_t>(paging, 2))};
      } else if (name == "chl-test-guest" && type == 2 && descsz >= 4) {
        std::uint32_t v;
        std::memcpy(&v, f.data() + desc_at, 4);
        ejects = v == 1;
      }
      p = next;
    }
    if (reach) {
      reach->ejects_pci = ejects;
      return reach;
    }
  }
  return std::nullopt;
}

}  // namespace

unsigned ch_phys_bits(unsigned max_phys_bits) { return std::min(cpu_phys_bits(), max_phys_bits); }

std::uint64_t ch_ged_address(unsigned phys_bits, bool acpi_memory_hotplug) {
  const std::uint64_t top = (std::uint64_t{1} << phys_bits) - (std::uint64_t{1} << 16);
  const unsigned before =
      acpi_memory_hotplug ? 3 : 2;  // memory manager?, device manager, CPU manager
  return top - (before + 1) * 0x1000;
}

std::uint64_t ch_pcst_address(unsigned phys_bits, bool acpi_memory_hotplug) {
  const std::uint64_t top = (std::uint64_t{1} << phys_bits) - (std::uint64_t{1} << 16);
  return top - (acpi_memory_hotplug ? 2 : 1) * 0x1000;  // after the memory manager's, if any
}

std::optional<GuestReach> read_guest_reach(const std::string& kernel) {
  std::ifstream in(kernel, std::ios::binary);
  if (!in) return std::nullopt;
  std::vector<char> f((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (f.size() < EI_NIDENT || std::memcmp(f.data(), ELFMAG, SELFMAG) != 0) return std::nullopt;
  if (f[EI_CLASS] == ELFCLASS64) return notes<Elf64_Ehdr, Elf64_Phdr>(f);
  if (f[EI_CLASS] == ELFCLASS32) return notes<Elf32_Ehdr, Elf32_Phdr>(f);
  return std::nullopt;
}

bool guest_reaches(const std::optional<GuestReach>& reach, std::uint64_t addr, std::string& why) {
  if (!reach) {
    why = "the kernel has no chl-test-guest note saying how it reaches the GED register";
    return false;
  }
  if (reach->paging == GuestPaging::None) {
    if (addr >> 32) why = "the guest addresses only the low 4 GiB (no paging)";
    return (addr >> 32) == 0;
  }
  const unsigned bits = reach->address_bits ? reach->address_bits : cpu_phys_bits();
  if (bits < 64 && (addr >> bits) != 0) {
    why = "the guest maps physical addresses below 2^" + std::to_string(bits) + " only";
    return false;
  }
  if (reach->paging == GuestPaging::Pae && ::access("/sys/module/kvm_pvm", F_OK) == 0) {
    why = "a PAE-paged guest does not run under this host's kvm_pvm (long mode only)";
    return false;
  }
  return true;
}

}  // namespace chl::vmm_double

#pragma once
// Reading libvirt's live domain XML (virDomainGetXMLDesc) for what the driver reports: the
// disks (status) and the console PTY QEMU opened. libvirt writes it in one canonical form
// (attributes in single quotes, escaped); these readers take only what they name and ignore
// the rest. Pure: no libvirt call.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chl::libvirt {

// One <disk> of the live domain.
struct LiveDisk {
  std::string id;      // the VMI's disk name (the alias "ua-<name>" domain_xml.cpp gives)
  std::string path;    // <source file|dev|name>; "" for an empty CD-ROM
  std::string target;  // "vda", "sda"
  std::string device;  // "disk", "cdrom", "lun", "floppy"
  bool readonly = false;
};

std::vector<LiveDisk> live_disks(std::string_view xml);

// One <interface> of the live domain (what the guest NIC really got, for KubeVirt's domain
// document: kubevirt/domain_document.cpp).
struct LiveInterface {
  std::string id;         // the VMI's interface name (the alias "ua-<name>" domain_xml.cpp gives)
  std::string mac;        // <mac address>, as libvirt writes it (lowercase)
  std::string tap;        // <target dev>
  std::string model;      // <model type>
  std::uint32_t mtu = 0;  // <mtu size>; 0 when absent
};

std::vector<LiveInterface> live_interfaces(std::string_view xml);

// The machine type libvirt expanded the domain's to (<type machine='pc-q35-7.2'>); "" when absent.
std::string live_machine(std::string_view xml);

// A size element of the domain, in KiB: the top-level <memory> or <maxMemory> ("memory",
// "maxMemory"), or inside a block (<size>, <requested> of a memory device). libvirt writes KiB;
// b, KiB, MiB and GiB are read. nullopt when absent or malformed.
std::optional<std::uint64_t> live_size_kib(std::string_view xml, std::string_view element);

// The first <memory model='virtio-mem'>…</memory> device, whole, as libvirt wrote it.
std::optional<std::string> live_virtio_mem(std::string_view xml);

// The host side of the first <serial type='pty'> (its <source path>), nullopt when there is none.
std::optional<std::string> live_serial_pty(std::string_view xml);

}  // namespace chl::libvirt

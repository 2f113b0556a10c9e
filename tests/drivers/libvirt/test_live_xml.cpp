// Reading libvirt's live domain XML (live_xml.hpp): the disks `status` reports and the console
// PTY. The document is libvirt 9.0's live XML for a domain domain_xml.cpp rendered (trimmed).
#include <doctest/doctest.h>

#include "drivers/libvirt/live_xml.hpp"

using namespace chl::libvirt;

namespace {

constexpr const char* kLive = R"(<domain type='qemu' id='3'>
  <name>default_testvm</name>
  <memory unit='KiB'>65536</memory>
  <vcpu placement='static'>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc-q35-7.2'>hvm</type>
  </os>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/>
      <source file='/var/run/kubevirt/disks/root&apos;s.img' index='2'/>
      <backingStore/>
      <target dev='vda' bus='virtio'/>
      <alias name='ua-rootdisk'/>
      <address type='pci' domain='0x0000' bus='0x02' slot='0x00' function='0x0'/>
    </disk>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source file='/state/cloud-init.iso' index='1'/>
      <backingStore/>
      <target dev='sda' bus='sata'/>
      <readonly/>
      <alias name='ua-cloudinitdisk'/>
    </disk>
    <disk type='file' device='cdrom'>
      <target dev='sdb' bus='sata'/>
      <readonly/>
      <alias name='sata0-0-1'/>
    </disk>
    <diskette/>
    <interface type='ethernet'>
      <mac address='02:00:00:aa:bb:cc'/>
      <target dev='tap0' managed='no'/>
      <model type='virtio-non-transitional'/>
      <mtu size='1450'/>
      <alias name='ua-default'/>
      <address type='pci' domain='0x0000' bus='0x01' slot='0x00' function='0x0'/>
    </interface>
    <interface type='ethernet'>
      <mac address='52:54:00:12:34:56'/>
      <target dev='tap1' managed='no'/>
      <model type='virtio'/>
      <alias name='net1'/>
    </interface>
    <serial type='pty'>
      <source path='/dev/pts/7'/>
      <target type='isa-serial' port='0'>
        <model name='isa-serial'/>
      </target>
      <alias name='serial0'/>
    </serial>
    <console type='pty' tty='/dev/pts/7'>
      <source path='/dev/pts/7'/>
      <target type='serial' port='0'/>
    </console>
  </devices>
</domain>
)";

}  // namespace

TEST_CASE("live XML: every <disk> with its VMI name, file, target, device and read-only flag") {
  auto disks = live_disks(kLive);
  REQUIRE(disks.size() == 3);
  CHECK(disks[0].id == "rootdisk");
  CHECK(disks[0].path == "/var/run/kubevirt/disks/root's.img");  // unescaped
  CHECK(disks[0].target == "vda");
  CHECK(disks[0].device == "disk");
  CHECK_FALSE(disks[0].readonly);
  CHECK(disks[1].id == "cloudinitdisk");
  CHECK(disks[1].device == "cdrom");
  CHECK(disks[1].readonly);
  // An empty CD-ROM: no source; an alias libvirt chose is kept as it is.
  CHECK(disks[2].path.empty());
  CHECK(disks[2].id == "sata0-0-1");
  CHECK(disks[2].target == "sdb");
}

TEST_CASE("live XML: every <interface> with its VMI name, MAC, tap, model and MTU, and the expanded machine type") {
  auto nics = live_interfaces(kLive);
  REQUIRE(nics.size() == 2);
  CHECK(nics[0].id == "default");  // the "ua-" of KubeVirt's user alias dropped
  CHECK(nics[0].mac == "02:00:00:aa:bb:cc");
  CHECK(nics[0].tap == "tap0");
  CHECK(nics[0].model == "virtio-non-transitional");
  CHECK(nics[0].mtu == 1450);
  CHECK(nics[1].id == "net1");  // an alias libvirt chose is kept as it is
  CHECK(nics[1].mtu == 0);      // no <mtu>
  CHECK(live_machine(kLive) == "pc-q35-7.2");
  CHECK(live_machine("<domain><devices/></domain>").empty());
  CHECK(live_interfaces("<domain><name>x</name></domain>").empty());
}

TEST_CASE("live XML: a domain without disks or devices has no disks") {
  CHECK(live_disks("<domain><devices><serial type='pty'/></devices></domain>").empty());
  CHECK(live_disks("<domain><name>x</name></domain>").empty());
  CHECK(live_disks("").empty());
}

TEST_CASE("live XML: the console PTY is the first pty serial's source path") {
  CHECK(live_serial_pty(kLive) == std::optional<std::string>("/dev/pts/7"));
  CHECK_FALSE(
      live_serial_pty("<devices><serial type='file'><source path='/log'/></serial></devices>")
          .has_value());
  // The PTY not allocated yet (no source): none.
  CHECK_FALSE(live_serial_pty("<devices><serial type='pty'><target port='0'/></serial></devices>")
                  .has_value());
  CHECK_FALSE(live_serial_pty("").has_value());
}

TEST_CASE("live XML: memory sizes in KiB and the virtio-mem device, as libvirt writes them after a hotplug") {
  const char* live = R"(<domain type='qemu' id='3'>
  <name>default_testvm</name>
  <maxMemory slots='1' unit='KiB'>524288</maxMemory>
  <memory unit='KiB'>524288</memory>
  <currentMemory unit='KiB'>131072</currentMemory>
  <devices>
    <memballoon model='virtio'><alias name='balloon0'/></memballoon>
    <memory model='virtio-mem'>
      <target>
        <size unit='KiB'>393216</size>
        <node>0</node>
        <block unit='KiB'>2048</block>
        <requested unit='KiB'>131072</requested>
        <current unit='KiB'>0</current>
      </target>
      <alias name='virtiomem0'/>
      <address type='pci' domain='0x0000' bus='0x01' slot='0x00' function='0x0'/>
    </memory>
  </devices>
</domain>)";
  CHECK(live_size_kib(live, "maxMemory") == 524288u);
  CHECK(live_size_kib(live, "memory") == 524288u);  // the top-level one, not the device
  auto dev = live_virtio_mem(live);
  REQUIRE(dev);
  CHECK(dev->rfind("<memory model='virtio-mem'>", 0) == 0);
  CHECK(dev->find("</memory>") == dev->size() - 9);
  CHECK(live_size_kib(*dev, "size") == 393216u);
  CHECK(live_size_kib(*dev, "requested") == 131072u);
  CHECK(live_size_kib(*dev, "current") == 0u);
  CHECK(live_size_kib("<memory unit='b'>134217728</memory>", "memory") == 131072u);
  CHECK(live_size_kib("<memory unit='MiB'>2</memory>", "memory") == 2048u);
  CHECK_FALSE(live_size_kib("<memory unit='KiB'>12x</memory>", "memory"));
  CHECK_FALSE(live_size_kib("<memory unit='furlongs'>1</memory>", "memory"));
  CHECK_FALSE(live_size_kib("<domain/>", "maxMemory"));
  CHECK_FALSE(live_virtio_mem("<domain><devices><memory model='dimm'/></devices></domain>"));
}

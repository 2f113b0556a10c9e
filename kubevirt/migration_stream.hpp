#pragma once
// What the launcher's migration relay changes in Cloud Hypervisor v52's outgoing migration stream
// (docs/kubevirt/migration.md, "Live migration", NICs): one field of the VM's config, so that the
// target's VMM can open its pod's taps by name as uid 107 without capabilities.
//
// CH v52's sender (vmm/src/lib.rs send_migration) writes Request{Start}, waits for the answer,
// then Request{Config} with the VmMigrationConfig {vm_config, common_cpuid, memory_manager_data}
// as JSON (vm-migration/src/protocol.rs Request: u16 command, [u8; 6] padding, u64 length, little
// endian; then `length` bytes). The receiver builds its VM from that vm_config verbatim
// (vm_receive_config). A NIC given by tap name carries `host_mac`: when the config has none, the
// source's open_tap wrote its own tap's MAC there (net_util/src/open_tap.rs open_tap_rx_q_0,
// `host_mac: &mut`, kept by device_manager.rs make_virtio_net_devices). The target's tap is
// another device with another (kernel-chosen) MAC, so the target's open_tap would set it
// (Tap::set_mac_addr: SIOCSIFHWADDR, CAP_NET_ADMIN) and fail for a VMM without capabilities.
// With host_mac null the target reads its tap's MAC instead (SIOCGIFHWADDR, no privilege). The
// guest's MAC (`mac`) is untouched.
#include <cstdint>
#include <string>
#include <string_view>

namespace chl::kubevirt {

class MigrationStreamEditor {
 public:
  // Bytes from the sending VMM, in order, in any pieces; what to forward is appended to `out`.
  void feed(std::string_view in, std::string& out);
  // Past the Config request: everything else goes through as it comes.
  [[nodiscard]] bool through() const { return stage_ == Stage::Through; }
  // NICs whose host_mac was taken out of the config.
  [[nodiscard]] int nets_edited() const { return edited_; }

  // The Config request's JSON with host_mac nulled in every net given by tap name; "" when
  // nothing needed a change (or it is not JSON: passed on as it is, CH answers for it).
  static std::string edited_config(std::string_view json, int& edited);

 private:
  enum class Stage { StartHeader, ConfigHeader, ConfigBody, Through };
  static constexpr std::size_t kHeader = 16;
  // A config this large is not CH's (a few KiB): passed on unread rather than held in memory.
  static constexpr std::uint64_t kMaxConfig = 16u << 20;
  Stage stage_ = Stage::StartHeader;
  std::string pending_;
  std::uint64_t config_length_ = 0;
  int edited_ = 0;
};

}  // namespace chl::kubevirt

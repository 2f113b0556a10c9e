#pragma once
// spec.domain.cpu.realtime.mask: which vCPUs KubeVirt makes SCHED_FIFO, parsed as KubeVirt parses
// it (pkg/hypervisor/common/vcpu.go ParseCPUMask, d923fdb: "a-b", "n" and "^n" items joined by
// ',', each trimmed; libvirt's virbitmap syntax). "" enables every vCPU; otherwise only the vCPUs
// the mask names, and a "^n" anywhere wins over a range or "n" naming the same vCPU ("0-3,^1" and
// "^1,0-3" both leave vCPU 1 out). KubeVirt keys the mask by the item's own digits ("01" names no
// vCPU: IsEnabled looks up "1"); so does this.
#include <cstdint>
#include <string>
#include <string_view>
#include <tl/expected.hpp>
#include <vector>

namespace chl::vmi {

class RealtimeMask {
 public:
  // vCPU `vcpu` is made SCHED_FIFO (KubeVirt's CPUMask.IsEnabled).
  bool enabled(std::uint32_t vcpu) const;
  // The enabled vCPUs among 0..count-1.
  std::vector<std::uint32_t> enabled_among(std::uint32_t count) const;

 private:
  friend tl::expected<RealtimeMask, std::string> parse_realtime_mask(std::string_view);
  struct Range {
    std::int64_t first = 0, last = 0;
  };
  bool all_ = true;
  std::vector<Range> ranges_;
  std::vector<std::string> singles_;  // "n" items, as written
  std::vector<std::string> negated_;  // "^n" items' digits, as written
};

// The mask, or KubeVirt's error text ("invalid mask value 'x' in 'mask'", "invalid mask range
// `3-1`").
tl::expected<RealtimeMask, std::string> parse_realtime_mask(std::string_view mask);

}  // namespace chl::vmi

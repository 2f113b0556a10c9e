#pragma once
// Build the launcher's seccomp filter from the policy table (seccomp_policy.hpp) and load it.
// Building is apart from loading (as crun does): a build error is reported before anything is
// enforced, and tests can build, export and inspect a filter without confining themselves.
#include <memory>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "sandbox/seccomp_policy.hpp"

namespace chl::sandbox {

enum class SeccompMode {
  Off,      // no filter
  Log,      // allowed as listed, everything else allowed but logged by the kernel (audit)
  Enforce,  // allowed as listed, everything else EPERM; the kill list kills the process
};

[[nodiscard]] std::string to_string(SeccompMode m);
common::Result<SeccompMode> parse_seccomp_mode(const std::string& text);

// A built, not yet loaded filter (owns the libseccomp context).
class SeccompFilter {
 public:
  SeccompFilter(SeccompFilter&&) noexcept;
  SeccompFilter& operator=(SeccompFilter&&) noexcept;
  ~SeccompFilter();

  // Apply to every thread of the process (SECCOMP_FILTER_FLAG_TSYNC). Irreversible.
  common::Status load();
  // The number of rules added (for status and the tests).
  [[nodiscard]] std::size_t rules() const { return rules_; }
  // The BPF program as the kernel would get it (struct sock_filter, 8 bytes each), without
  // loading it: the tests run it on chosen syscalls.
  [[nodiscard]] common::Result<std::vector<std::uint64_t>> export_bpf() const;

 private:
  friend common::Result<SeccompFilter> build_launcher_filter(SeccompMode mode, DriverKind kind);
  struct Ctx;
  explicit SeccompFilter(std::unique_ptr<Ctx> ctx, std::size_t rules);
  std::unique_ptr<Ctx> ctx_;
  std::size_t rules_ = 0;
};

// The launcher's filter for `mode` (Log or Enforce) and the driver it runs: the common allow-list,
// plus the libvirt additions for DriverKind::Libvirt (seccomp_policy.hpp).
common::Result<SeccompFilter> build_launcher_filter(SeccompMode mode, DriverKind kind);

}  // namespace chl::sandbox

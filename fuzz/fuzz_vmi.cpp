// libFuzzer target: VMI manifests (YAML and JSON) through the parser and the validator, for
// every hypervisor description. The input is the manifest text as `ch-launcher` reads it.
// Properties checked: no crash/UB/leak; a fatal parse has problems to report; a VMI that
// check_vmi accepts has no violations left when validated again, and summarises.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "vmi/hypervisor_capabilities.hpp"
#include "vmi/validator.hpp"
#include "vmi/parser.hpp"
#include "common/log.hpp"
#include "fuzz/fuzz_support.hpp"

namespace {

using chl::fuzz::require;


}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  chl::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace chl::vmi;
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  ParseOutcome parsed = parse_vmi(text);
  if (parsed.fatal) require(!parsed.problems.empty());
  (void)format_violations(parsed.problems, "fuzz.yaml");
  if (parsed.fatal) return 0;

  const HostFacts host;
  for (const HypervisorCapabilities* caps : all_hypervisors()) {
    Violations v = validate(parsed.vmi, *caps, host);
    (void)format_violations(v, "fuzz.yaml");
    if (parsed.problems.empty() && v.empty()) (void)vmi_summary(parsed.vmi, *caps);

    auto checked = check_vmi(text, caps->name, host);
    if (checked) {
      require(checked->caps != nullptr);
      require(validate(checked->vmi, *checked->caps, host).empty());
      (void)vmi_summary(checked->vmi, *checked->caps);
    } else {
      require(!checked.error().empty());
    }
  }
  return 0;
}

// Inputs fuzz/fuzz_vmi found (each also in fuzz/corpus/fuzz_vmi/regress-*): the parser must
// answer, not hang.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "vmi/defaults.hpp"
#include "vmi/validator.hpp"
#include "vmi/parser.hpp"

using namespace chl::vmi;

// yaml-cpp 0.7's LoadAll() loops forever (a null document per turn, memory growing without
// bound) on a stray ',' after a flow collection (jbeder/yaml-cpp#1040). The parser bounds the
// document count first: the manifest is refused with a syntax problem instead.
TEST_CASE("a stray comma after a flow map is refused, not looped on (yaml-cpp 1040)") {
  for (const std::string text :
       {"{k},", "{\"k\"},", "{\n  \"apiVersion\": \"kubevirt.io/v1\",\n  \"k\"},\n"}) {
    CAPTURE(text);
    const ParseOutcome out = parse_vmi(text);
    CHECK(out.fatal);
    REQUIRE(out.problems.size() == 1);
    CHECK(out.problems[0].message.find("not valid YAML or JSON") == 0);
    auto checked = check_vmi(text, "cloud-hypervisor");
    CHECK_FALSE(checked.has_value());
  }
}

TEST_CASE("multi-document streams still parse after the document bound") {
  const std::string text =
      "---\nkind: ConfigMap\napiVersion: v1\n---\n"
      "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata:\n  name: vm1\n"
      "spec:\n  domain:\n    devices: {}\n    resources:\n      requests:\n        memory: 1Gi\n";
  const ParseOutcome out = parse_vmi(text);
  CHECK_FALSE(out.fatal);
  CHECK(out.vmi.kind == "VirtualMachineInstance");
  CHECK(out.vmi.metadata.name == "vm1");
}

// fuzz_vmi (regress-max-guest-milli-overflow.yaml): a 1Ei memory request becomes a 4Ei maxGuest
// under KubeVirt's LiveUpdate defaulting, whose thousandths overflowed int64 (UBSan). They
// saturate now; the bytes are right.
TEST_CASE("a 1Ei guest: the defaulted maxGuest is 4Ei, its thousandths saturate instead of overflowing") {
  const ParseOutcome out = parse_vmi(
      "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata:\n  name: big\n"
      "spec:\n  domain:\n    devices: {}\n    resources:\n      requests:\n        memory: 1Ei\n");
  REQUIRE_FALSE(out.fatal);
  Vmi vmi = out.vmi;
  apply_kubevirt_defaults(vmi);
  REQUIRE(vmi.spec.domain.memory.max_guest);
  CHECK(vmi.spec.domain.memory.max_guest->value == (std::int64_t{1} << 62));
  CHECK(vmi.spec.domain.memory.max_guest->milli == INT64_MAX);
  CHECK_NOTHROW((void)check_vmi(std::string("apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata:\n  name: big\n"
                                            "spec:\n  domain:\n    devices: {}\n    resources:\n      requests:\n        memory: 1Ei\n"),
                                "cloud-hypervisor"));
}
